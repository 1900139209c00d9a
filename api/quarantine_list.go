package api

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"time"

	"github.com/converge-run/converge"
)

// GET /v1/quarantine (SPEC §11): the quarantined streams, newest first,
// paged by cursor and limit like every list (SPEC §4).

// ParseQuarantineListParams reads the query of GET /v1/quarantine: cursor
// and limit.
func ParseQuarantineListParams(r *http.Request) (converge.QuarantineListParams, error) {
	if err := queryParams(r, "cursor", "limit"); err != nil {
		return converge.QuarantineListParams{}, err
	}
	q := r.URL.Query()
	cursor, err := DecodeQuarantineCursor(q.Get("cursor"))
	if err != nil {
		return converge.QuarantineListParams{}, err
	}
	limit, err := ParseLimit(q.Get("limit"))
	if err != nil {
		return converge.QuarantineListParams{}, err
	}
	return converge.QuarantineListParams{Cursor: cursor, Limit: limit}, nil
}

func (s *Server) handleQuarantineList(w http.ResponseWriter, r *http.Request) {
	p, err := ParseQuarantineListParams(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	items, next, err := s.store.QuarantinePage(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	page := listPage[*converge.Quarantine]{Items: items}
	if page.Items == nil {
		page.Items = []*converge.Quarantine{}
	}
	if next != nil {
		c := EncodeQuarantineCursor(*next)
		page.NextCursor = &c
	}
	s.writeJSON(w, r, http.StatusOK, page)
}

// EncodeQuarantineCursor makes the opaque cursor of a page of quarantined
// streams: the time in microseconds, the kind, a NUL and the resource.
func EncodeQuarantineCursor(c converge.QuarantineCursor) string {
	b := make([]byte, 8, 8+len(c.Kind)+1+len(c.Resource))
	binary.BigEndian.PutUint64(b, uint64(c.Since.UnixMicro()))
	b = append(b, c.Kind...)
	b = append(b, 0)
	b = append(b, c.Resource...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeQuarantineCursor reads a cursor made by EncodeQuarantineCursor; an
// empty string is no cursor.
func DecodeQuarantineCursor(s string) (*converge.QuarantineCursor, error) {
	if s == "" {
		return nil, nil
	}
	bad := invalid("cursor", "is not a cursor this server made")
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 8 {
		return nil, bad
	}
	kind, resource, ok := bytes.Cut(b[8:], []byte{0})
	if !ok || converge.ValidateKind(string(kind)) != nil || converge.ValidateResource(string(resource)) != nil {
		return nil, bad
	}
	at := time.UnixMicro(int64(binary.BigEndian.Uint64(b))).UTC()
	if at.Year() < 1 || at.Year() > 9999 {
		// Not a time this server wrote, and out of PostgreSQL's range.
		return nil, bad
	}
	return &converge.QuarantineCursor{Since: at, Kind: string(kind), Resource: string(resource)}, nil
}
