package api

import (
	"net/http"

	"github.com/google/uuid"
)

// listStatus is the status type a list filters by (converge.RunStatus,
// converge.WorkflowRunStatus).
type listStatus interface {
	~string
	Valid() bool
}

// listQuery is the query of a list that filters by a name (the kind of
// GET /v1/events, the workflow of GET /v1/workflow-runs), an exact
// resource key and a status, and pages by cursor and limit.
type listQuery[S listStatus] struct {
	name     string
	resource string
	status   S
	cursor   *uuid.UUID
	limit    int
}

// listQuerySpec says what a list's name and status filters accept.
type listQuerySpec struct {
	// name is the name filter's query parameter (kind, workflow);
	// nameOK says whether a non-empty one is one, and nameProblem is the
	// problem's message when it is not.
	name        string
	nameOK      func(string) bool
	nameProblem string
	// statusProblem is the problem's message for a status that is not
	// one.
	statusProblem string
}

// parseListQuery reads the query of a list as spec describes it, after
// queryParams has refused unknown, repeated and malformed parameters. It
// checks the name, the resource, the status and then the page, and
// returns the first problem.
func parseListQuery[S listStatus](r *http.Request, spec listQuerySpec) (listQuery[S], error) {
	var l listQuery[S]
	if err := queryParams(r, spec.name, "resource", "status", "cursor", "limit"); err != nil {
		return l, err
	}
	q := r.URL.Query()
	l.name = q.Get(spec.name)
	if l.name != "" && !spec.nameOK(l.name) {
		return l, invalid(spec.name, spec.nameProblem)
	}
	l.resource = q.Get("resource")
	if err := checkResourceFilter(l.resource); err != nil {
		return l, err
	}
	l.status = S(q.Get("status"))
	if l.status != "" && !l.status.Valid() {
		return l, invalid("status", spec.statusProblem)
	}
	var err error
	l.cursor, l.limit, err = parsePage(q)
	return l, err
}
