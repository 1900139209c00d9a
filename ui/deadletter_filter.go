package ui

import (
	"encoding/base64"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
)

// filterForm is the dead-letter filter as typed in the form: the same
// fields as the API's list.
type filterForm struct {
	Status   string
	Kind     string
	Resource string
	Reason   string
	Q        string
	Since    string
	Until    string
}

// timeLayouts are accepted for since and until: what a datetime-local input
// sends (taken as UTC), and RFC 3339.
var timeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339, "2006-01-02"}

func parseFormTime(s string) (*time.Time, bool) {
	for _, l := range timeLayouts {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			t = t.UTC()
			return &t, true
		}
	}
	return nil, false
}

// readFilter reads the filter fields of q.
func readFilter(q url.Values) filterForm {
	get := func(k string) string { return strings.TrimSpace(q.Get(k)) }
	f := filterForm{Status: get("status"), Kind: get("kind"), Resource: get("resource"), Reason: get("reason"),
		Q: get("q"), Since: get("since"), Until: get("until")}
	if f.Status == "" {
		f.Status = string(converge.DeadLetterOpen)
	}
	return f
}

// filter checks the form and returns the store's filter, or the problems
// found, field by field.
func (f filterForm) filter() (*converge.DeadLetterFilter, map[string]string) {
	out := &converge.DeadLetterFilter{Kind: f.Kind, Resource: f.Resource, Q: f.Q}
	bad := map[string]string{}
	if s := converge.DeadLetterStatus(f.Status); s.Valid() {
		out.Status = s
	} else {
		bad["status"] = "unknown status"
	}
	if f.Reason != "" {
		if r := converge.DeadLetterReason(f.Reason); r.Valid() {
			out.Reason = r
		} else {
			bad["reason"] = "unknown reason"
		}
	}
	if len(f.Resource) > converge.MaxResourceLen {
		bad["resource"] = "too long"
	}
	if len(f.Q) > 500 {
		bad["q"] = "too long"
	}
	if f.Since != "" {
		if t, ok := parseFormTime(f.Since); ok {
			out.Since = t
		} else {
			bad["since"] = "not a date and time"
		}
	}
	if f.Until != "" {
		if t, ok := parseFormTime(f.Until); ok {
			out.Until = t
		} else {
			bad["until"] = "not a date and time"
		}
	}
	if len(bad) > 0 {
		return nil, bad
	}
	return out, nil
}

// Values is the filter as query parameters, without empty fields.
func (f filterForm) Values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"status": f.Status, "kind": f.Kind, "resource": f.Resource,
		"reason": f.Reason, "q": f.Q, "since": f.Since, "until": f.Until} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// Query is the filter as a query string.
func (f filterForm) Query() string { return f.Values().Encode() }

// Active reports whether anything other than the default status filters.
func (f filterForm) Active() bool {
	return f.Kind != "" || f.Resource != "" || f.Reason != "" || f.Q != "" || f.Since != "" || f.Until != "" ||
		f.Status != string(converge.DeadLetterOpen)
}

// encodeCursor makes the opaque page cursor of a dead-letter list.
func encodeCursor(c *converge.DeadLetterCursor) string {
	if c == nil {
		return ""
	}
	s := strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + "." + c.ID.String()
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

func decodeCursor(s string) (*converge.DeadLetterCursor, bool) {
	if s == "" {
		return nil, true
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, false
	}
	ts, id, ok := strings.Cut(string(b), ".")
	if !ok {
		return nil, false
	}
	us, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nil, false
	}
	uid, err := uuid.Parse(id)
	if err != nil {
		return nil, false
	}
	return &converge.DeadLetterCursor{CreatedAt: time.UnixMicro(us).UTC(), ID: uid}, true
}
