package ui

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

// queryProblems is the problem a list page shows for a query the API's
// parser refused: under the one field it names (else "query"), with a
// hint to start over for a cursor.
func queryProblems(err error) map[string]string {
	var ae *converge.AppError
	field := "query"
	if errors.As(err, &ae) && len(ae.Fields) == 1 {
		field = ae.Fields[0].Field
	}
	msg := fieldMessage(err)
	if field == "cursor" {
		msg += "; start from the first page"
	}
	return addProblem(nil, field, msg)
}

// renderRefusedQuery answers a list page whose query the API's parser
// refused with err: the page (template page, view v) with the problem
// under its filters (queryProblems, into *problems, the page data's), at
// the status the API answers err with; an internal error as a server
// error.
func (u *UI) renderRefusedQuery(w http.ResponseWriter, r *http.Request, err error, page string, v *view, problems *map[string]string) {
	*problems = queryProblems(err)
	status := api.ErrorStatus(err)
	if status >= http.StatusInternalServerError {
		u.serverError(w, r, err)
		return
	}
	u.render(w, r, status, page, v)
}

// pageLinks are the links of a cursor-paginated list page at path: the
// next (older) page when there is one, and the first page when this is
// not it. base is the page's filter; a limit other than the default of
// 50 is kept in both.
func pageLinks(path string, base url.Values, limit int, next, cursor *uuid.UUID) (nextURL, firstURL string) {
	if limit != 50 {
		base.Set("limit", strconv.Itoa(limit))
	}
	if next != nil {
		nv := cloneValues(base)
		nv.Set("cursor", api.EncodeCursor(*next))
		nextURL = path + "?" + nv.Encode()
	}
	if cursor != nil {
		firstURL = path + "?" + base.Encode()
	}
	return nextURL, firstURL
}
