package ui

import (
	"net/url"
	"strings"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
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

// localTimeLayouts are what a datetime-local input sends: a date and time
// without a zone, which the dashboard takes as UTC.
var localTimeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05"}

// apiTime turns a datetime-local value into the RFC 3339 time the API's
// parser reads; anything else is passed on as typed, for the parser to
// accept or refuse as the API does.
func apiTime(s string) string {
	for _, l := range localTimeLayouts {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return t.Format(time.RFC3339)
		}
	}
	return s
}

// inputTime is s as the value of a datetime-local input: an RFC 3339 time
// (a link's, the API's form) in UTC without a zone, to the millisecond,
// which a browser shows and sends back; given as RFC 3339, the browser
// drops it, and the form's next Apply drops it from the filter. Anything
// else is returned as is.
func inputTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	switch t = t.UTC(); {
	case t.Nanosecond() != 0:
		return t.Format("2006-01-02T15:04:05.000")
	case t.Second() != 0:
		return t.Format(localTimeLayouts[1])
	default:
		return t.Format(localTimeLayouts[0])
	}
}

// SinceInput is Since as a datetime-local value (inputTime).
func (f filterForm) SinceInput() string { return inputTime(f.Since) }

// UntilInput is Until as a datetime-local value (inputTime).
func (f filterForm) UntilInput() string { return inputTime(f.Until) }

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

// filter checks the form with the API's parser (api.ParseDeadLetterFilter),
// so that the dashboard refuses what GET /v1/dead-letters refuses, and
// returns the store's filter, or the problems found, field by field.
func (f filterForm) filter() (*converge.DeadLetterFilter, map[string]string) {
	fields := map[string]string{"status": f.Status, "kind": f.Kind, "resource": f.Resource, "reason": f.Reason,
		"q": f.Q, "since": apiTime(f.Since), "until": apiTime(f.Until)}
	out, errs := api.ParseDeadLetterFilter(func(k string) string { return fields[k] }, "")
	if len(errs) > 0 {
		bad := map[string]string{}
		for _, e := range errs {
			bad[e.Field] = e.Message
		}
		return nil, bad
	}
	return &out, nil
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
