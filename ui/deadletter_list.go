package ui

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

// pageSizes are the list sizes offered.
var pageSizes = []int{25, 50, 100, 200}

type deadLetterListData struct {
	Filter   filterForm
	Problems map[string]string
	Items    []*converge.DeadLetter
	Limit    int
	// NextURL is the next (older) page; FirstURL the first page, set when
	// this is not the first.
	NextURL  string
	FirstURL string
	Kinds    []string
	Statuses []converge.DeadLetterStatus
	Reasons  []converge.DeadLetterReason
	Sizes    []int
}

func (u *UI) handleDeadLetterList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := deadLetterListData{
		Filter: readFilter(q), Kinds: u.kinds, Sizes: pageSizes, Limit: 50,
		Statuses: []converge.DeadLetterStatus{converge.DeadLetterOpen, converge.DeadLetterRedriven, converge.DeadLetterDiscarded, converge.DeadLetterSuperseded},
		Reasons:  []converge.DeadLetterReason{converge.ReasonPermanentError, converge.ReasonAttemptsExhausted},
	}
	v := &view{Title: "Dead letters", Nav: "dead-letters", Flash: u.takeFlash(r), Data: &d}
	f, problems := d.Filter.filter()
	if n, err := api.ParseLimit(q.Get("limit")); err == nil {
		d.Limit = n
	} else {
		problems = addProblem(problems, "limit", fieldMessage(err))
	}
	cursor, err := api.DecodeDeadLetterCursor(q.Get("cursor"))
	if err != nil {
		problems = addProblem(problems, "cursor", fieldMessage(err)+"; start from the first page")
	}
	if len(problems) > 0 {
		d.Problems = problems
		u.render(w, r, http.StatusUnprocessableEntity, "dead_letters", v)
		return
	}
	items, next, err := u.store.DeadLetterList(r.Context(), &converge.DeadLetterListParams{DeadLetterFilter: *f, Cursor: cursor, Limit: d.Limit})
	if err != nil {
		u.serverError(w, r, err)
		return
	}
	d.Items = items
	base := d.Filter.Values()
	if d.Limit != 50 {
		base.Set("limit", strconv.Itoa(d.Limit))
	}
	if next != nil {
		nv := cloneValues(base)
		nv.Set("cursor", api.EncodeDeadLetterCursor(*next))
		d.NextURL = "/ui/dead-letters?" + nv.Encode()
	}
	if cursor != nil {
		d.FirstURL = "/ui/dead-letters?" + base.Encode()
	}
	u.render(w, r, http.StatusOK, "dead_letters", v)
}

// fieldMessage is the message of the one field an API validation error
// names.
func fieldMessage(err error) string {
	var ae *converge.AppError
	if errors.As(err, &ae) && len(ae.Fields) == 1 {
		return ae.Fields[0].Message
	}
	return appMessage(err)
}

func addProblem(m map[string]string, field, msg string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[field] = msg
	return m
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, s := range v {
		out[k] = append([]string(nil), s...)
	}
	return out
}
