package ui

import (
	"net/http"
	"net/url"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

// workflowRunFilter is the workflow run filter as typed in the form: the
// query of GET /v1/workflow-runs.
type workflowRunFilter struct {
	Workflow string
	Resource string
	Status   string
}

// Values is the filter as query parameters, without empty fields.
func (f workflowRunFilter) Values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"workflow": f.Workflow, "resource": f.Resource, "status": f.Status} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// Active reports whether anything filters.
func (f workflowRunFilter) Active() bool {
	return f.Workflow != "" || f.Resource != "" || f.Status != ""
}

type workflowRunListData struct {
	Filter   workflowRunFilter
	Problems map[string]string
	Items    []*converge.WorkflowRun
	Limit    int
	// NextURL is the next (older) page; FirstURL the first page, set when
	// this is not the first.
	NextURL  string
	FirstURL string
	Statuses []converge.WorkflowRunStatus
	Sizes    []int
}

// Progress is "succeeded/total" of a workflow run's steps.
func (workflowRunListData) Progress(w *converge.WorkflowRun) string { return progress(w) }

func (u *UI) handleWorkflowRunList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := workflowRunListData{
		Filter:   workflowRunFilter{Workflow: q.Get("workflow"), Resource: q.Get("resource"), Status: q.Get("status")},
		Statuses: converge.WorkflowRunStatuses, Sizes: pageSizes, Limit: 50,
	}
	v := &view{Title: "Workflow runs", Nav: "workflow-runs", Flash: u.takeFlash(r), Data: &d}
	// The API's own parser, so the dashboard refuses what GET
	// /v1/workflow-runs refuses, with its message.
	p, err := api.ParseWorkflowRunListParams(r)
	if err != nil {
		u.renderRefusedQuery(w, r, err, "workflow_runs", v, &d.Problems)
		return
	}
	d.Limit = p.Limit
	items, next, err := u.store.WorkflowRunList(r.Context(), p)
	if err != nil {
		u.serverError(w, r, err)
		return
	}
	d.Items = items
	d.NextURL, d.FirstURL = pageLinks("/ui/workflow-runs", d.Filter.Values(), d.Limit, next, p.Cursor)
	u.render(w, r, http.StatusOK, "workflow_runs", v)
}
