package api

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/telemetry"
)

// deadLetterRoutes registers the dead-letter routes.
func (s *Server) deadLetterRoutes(r chi.Router) {
	s.route(r, http.MethodGet, "/dead-letters", converge.RoleViewer, s.handleDeadLetterList)
	s.route(r, http.MethodPost, "/dead-letters/redrive", converge.RoleOperator, s.handleDeadLetterRedriveMany)
	s.route(r, http.MethodPost, "/dead-letters/discard", converge.RoleOperator, s.handleDeadLetterDiscardMany)
	s.route(r, http.MethodPost, "/dead-letters/purge", converge.RoleOperator, s.handleDeadLetterPurge)
	s.route(r, http.MethodGet, "/dead-letters/{id}", converge.RoleViewer, s.handleDeadLetterGet)
	s.route(r, http.MethodPost, "/dead-letters/{id}/redrive", converge.RoleOperator, s.handleDeadLetterRedrive)
	s.route(r, http.MethodPost, "/dead-letters/{id}/discard", converge.RoleOperator, s.handleDeadLetterDiscard)
}

// Limits of dead-letter filters and actions.
const (
	maxQueryLen  = 200
	maxReasonLen = 1000
)

var kindPattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// deadLetterFilterFields are the filter's names, in the query string and
// in a bulk body's "filter".
var deadLetterFilterFields = []string{"status", "kind", "resource", "reason", "q", "since", "until"}

// ParseDeadLetterFilter reads a dead-letter filter from its fields (the
// names of deadLetterFilterFields). Every bad value is reported, each field
// named with prefix; a filter with errors must not be used.
func ParseDeadLetterFilter(get func(string) string, prefix string) (converge.DeadLetterFilter, []converge.FieldError) {
	var f converge.DeadLetterFilter
	var errs []converge.FieldError
	add := func(field, msg string) { errs = append(errs, converge.FieldError{Field: prefix + field, Message: msg}) }
	if v := converge.DeadLetterStatus(get("status")); v != "" {
		if v.Valid() {
			f.Status = v
		} else {
			add("status", "must be one of open, redriven, discarded, superseded")
		}
	}
	if v := get("kind"); v != "" {
		if kindPattern.MatchString(v) {
			f.Kind = v
		} else {
			add("kind", "is not a kind name")
		}
	}
	if v := get("resource"); v != "" {
		if err := converge.ValidateResource(v); err != nil {
			add("resource", "a resource prefix "+err.Error())
		} else {
			f.Resource = v
		}
	}
	if v := converge.DeadLetterReason(get("reason")); v != "" {
		if v.Valid() {
			f.Reason = v
		} else {
			add("reason", "must be permanent_error or attempts_exhausted")
		}
	}
	if v := get("q"); v != "" {
		switch n := utf8.RuneCountInString(v); {
		case !utf8.ValidString(v) || strings.ContainsRune(v, 0):
			add("q", "must be valid UTF-8 without NUL characters")
		case n > maxQueryLen:
			add("q", "must be at most 200 characters")
		default:
			f.Q = v
		}
	}
	parseTime := func(name string) *time.Time {
		v := get(name)
		if v == "" {
			return nil
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			add(name, "is not a date and time in RFC 3339 form, like 2025-01-31T15:04:05Z")
			return nil
		}
		t = t.UTC()
		return &t
	}
	f.Since, f.Until = parseTime("since"), parseTime("until")
	if f.Since != nil && f.Until != nil && f.Since.After(*f.Until) {
		add("until", "must not be before since")
	}
	return f, errs
}

// ParseDeadLetterListParams reads the query of GET /v1/dead-letters.
func ParseDeadLetterListParams(r *http.Request) (*converge.DeadLetterListParams, error) {
	if err := queryParams(r, slices.Concat(deadLetterFilterFields, []string{"cursor", "limit"})...); err != nil {
		return nil, err
	}
	q := r.URL.Query()
	f, errs := ParseDeadLetterFilter(q.Get, "")
	p := &converge.DeadLetterListParams{DeadLetterFilter: f}
	var err error
	if p.Cursor, err = DecodeDeadLetterCursor(q.Get("cursor")); err != nil {
		errs = append(errs, converge.FieldError{Field: "cursor", Message: "is not a cursor this server made"})
	}
	if p.Limit, err = ParseLimit(q.Get("limit")); err != nil {
		errs = append(errs, converge.FieldError{Field: "limit", Message: "must be an integer from 1 to 500"})
	}
	if len(errs) > 0 {
		return nil, &converge.AppError{Code: converge.EINVALID, Message: fieldSummary(errs), Fields: errs}
	}
	return p, nil
}

// EncodeDeadLetterCursor makes the opaque cursor of a dead-letter page.
func EncodeDeadLetterCursor(c converge.DeadLetterCursor) string {
	b := make([]byte, 24)
	binary.BigEndian.PutUint64(b, uint64(c.CreatedAt.UnixMicro()))
	copy(b[8:], c.ID[:])
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeDeadLetterCursor reads a cursor made by EncodeDeadLetterCursor; an
// empty string is no cursor.
func DecodeDeadLetterCursor(s string) (*converge.DeadLetterCursor, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 24 {
		return nil, invalid("cursor", "is not a cursor this server made")
	}
	id, _ := uuid.FromBytes(b[8:])
	at := time.UnixMicro(int64(binary.BigEndian.Uint64(b))).UTC()
	if at.Year() < 1 || at.Year() > 9999 {
		// Not a time this server wrote, and out of PostgreSQL's range.
		return nil, invalid("cursor", "is not a cursor this server made")
	}
	return &converge.DeadLetterCursor{CreatedAt: at, ID: id}, nil
}

func (s *Server) handleDeadLetterList(w http.ResponseWriter, r *http.Request) {
	p, err := ParseDeadLetterListParams(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	items, next, err := s.store.DeadLetterList(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	page := listPage[*converge.DeadLetter]{Items: items}
	if page.Items == nil {
		page.Items = []*converge.DeadLetter{}
	}
	if next != nil {
		c := EncodeDeadLetterCursor(*next)
		page.NextCursor = &c
	}
	s.writeJSON(w, r, http.StatusOK, page)
}

func (s *Server) handleDeadLetterGet(w http.ResponseWriter, r *http.Request) {
	serveGet(s, w, r, s.store.DeadLetterGet)
}

// actionRequest is the body of a single redrive or discard.
type actionRequest struct {
	Reason string `json:"reason"`
}

func decodeAction(w http.ResponseWriter, r *http.Request) (string, error) {
	var body actionRequest
	if err := decodeOptionalBody(w, r, &body); err != nil {
		return "", err
	}
	if err := CheckReason(body.Reason); err != nil {
		return "", err
	}
	return body.Reason, nil
}

// CheckReason checks the reason given with an operator action (§4: at most
// 1000 characters of valid UTF-8 without NUL); the dashboard checks its
// forms' reasons with it too.
func CheckReason(reason string) error {
	if utf8.RuneCountInString(reason) > maxReasonLen || !utf8.ValidString(reason) || strings.ContainsRune(reason, 0) {
		return invalid("reason", "must be at most 1000 characters of valid UTF-8, without NUL characters")
	}
	return nil
}

func (s *Server) handleDeadLetterRedrive(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	reason, err := decodeAction(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx, span := telemetry.StartRedrive(r.Context(), id.String())
	run, err := s.store.DeadLetterRedrive(ctx, store.DeadLetterRedriveParams{
		ID: id, Kinds: s.cfg.Kinds, Audit: auditFor(r, reason), TraceParent: telemetry.TraceParent(ctx),
	})
	telemetry.EndRedrive(span, run, err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusAccepted, map[string]*converge.Run{"run": run})
}

func (s *Server) handleDeadLetterDiscard(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "id")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	reason, err := decodeAction(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	d, err := s.store.DeadLetterDiscard(r.Context(), id, auditFor(r, reason))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, d)
}

// bulkRequest is the body of a bulk redrive or discard.
type bulkRequest struct {
	IDs *[]string `json:"ids"`
	// Filter's values are read one by one, so that a value of the wrong
	// type is named by its own field (filter.<name>).
	Filter *map[string]json.RawMessage `json:"filter"`
	DryRun bool                        `json:"dry_run"`
	Reason string                      `json:"reason"`
}

// DecodeDeadLetterBulk reads and validates the body of a bulk redrive or
// discard: ids (1 to 1000) or a filter, not both.
func DecodeDeadLetterBulk(w http.ResponseWriter, r *http.Request) (*store.DeadLetterBulkParams, string, error) {
	var body bulkRequest
	if err := decodeOptionalBody(w, r, &body); err != nil {
		return nil, "", err
	}
	var errs []converge.FieldError
	add := func(field, msg string) { errs = append(errs, converge.FieldError{Field: field, Message: msg}) }
	p := &store.DeadLetterBulkParams{DryRun: body.DryRun}
	switch {
	case body.IDs != nil && body.Filter != nil:
		add("ids", "give either ids or filter, not both")
	case body.IDs == nil && body.Filter == nil:
		add("ids", "give either ids or filter")
	case body.IDs != nil:
		ids := *body.IDs
		switch {
		case len(ids) == 0:
			add("ids", "must list at least one id")
		case len(ids) > converge.MaxDeadLetterBulk:
			add("ids", "must list at most 1000 ids; act on more in several calls")
		default:
			p.IDs = make([]uuid.UUID, 0, len(ids))
			for i, v := range ids {
				id, err := uuid.Parse(v)
				if err != nil || len(v) != 36 {
					add("ids["+strconv.Itoa(i)+"]", "is not an id")
					if len(errs) >= 10 {
						break
					}
					continue
				}
				p.IDs = append(p.IDs, id)
			}
		}
	default:
		m := make(map[string]string, len(*body.Filter))
		for k, raw := range *body.Filter {
			var v string
			switch {
			case !slices.Contains(deadLetterFilterFields, k):
				add("filter."+truncate(k, 64), "is not a known filter")
			case json.Unmarshal(raw, &v) != nil:
				add("filter."+k, "must be a string")
			default:
				m[k] = v
			}
		}
		f, ferrs := ParseDeadLetterFilter(func(k string) string { return m[k] }, "filter.")
		errs = append(errs, ferrs...)
		p.Filter = &f
	}
	if err := CheckReason(body.Reason); err != nil {
		add("reason", "must be at most 1000 characters of valid UTF-8, without NUL characters")
	}
	if len(errs) > 0 {
		return nil, "", &converge.AppError{Code: converge.EINVALID, Message: fieldSummary(errs), Fields: errs}
	}
	return p, body.Reason, nil
}

func (s *Server) handleDeadLetterRedriveMany(w http.ResponseWriter, r *http.Request) {
	p, reason, err := DecodeDeadLetterBulk(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p.Kinds, p.Audit = s.cfg.Kinds, auditFor(r, reason)
	ctx, span := telemetry.StartRedrive(r.Context(), "")
	p.TraceParent = telemetry.TraceParent(ctx)
	res, err := s.store.DeadLetterRedriveMany(ctx, *p)
	telemetry.EndRedrive(span, nil, err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, res)
}

func (s *Server) handleDeadLetterDiscardMany(w http.ResponseWriter, r *http.Request) {
	p, reason, err := DecodeDeadLetterBulk(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p.Audit = auditFor(r, reason)
	res, err := s.store.DeadLetterDiscardMany(r.Context(), *p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, res)
}

// purgeRequest is the body of POST /v1/dead-letters/purge.
type purgeRequest struct {
	OlderThan *string `json:"older_than"`
	DryRun    bool    `json:"dry_run"`
	Reason    string  `json:"reason"`
}

func (s *Server) handleDeadLetterPurge(w http.ResponseWriter, r *http.Request) {
	var body purgeRequest
	if err := decodeOptionalBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	// Without older_than every discarded dead letter is purged.
	var olderThan time.Duration
	if body.OlderThan != nil {
		d, err := converge.ParseDuration(*body.OlderThan)
		if err != nil || d < 0 {
			s.writeError(w, r, invalid("older_than", "must be a duration like 720h or 30d, not negative"))
			return
		}
		olderThan = d
	}
	if err := CheckReason(body.Reason); err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.store.DeadLetterPurge(r.Context(), store.DeadLetterPurgeParams{
		OlderThan: olderThan, All: body.OlderThan == nil, DryRun: body.DryRun, Audit: auditFor(r, body.Reason),
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, res)
}
