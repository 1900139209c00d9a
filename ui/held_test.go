package ui_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// TestDashboardHeldWork: the overview lists runs waiting for approval and
// quarantined streams; operators get approve, reject and release buttons
// (CSRF-checked, Post/Redirect/Get), viewers none, and a viewer's forged
// POST is refused.
func TestDashboardHeldWork(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := t.Context()
	approve, reject := heldRun(t, s, "prod/held-a"), heldRun(t, s, "prod/held-b")
	quarantine(t, s, "app/quarantined")

	viewer := newClient(t, s.srv.URL)
	viewer.signIn(s.viewer)
	resp, body := viewer.get("/ui/")
	wantStatus(t, "viewer overview", resp, body, http.StatusOK)
	wantContains(t, "viewer overview", body, "Waiting for approval", "prod/held-a", "Quarantined streams", "app/quarantined")
	for _, hidden := range []string{"/approve\"", "/reject\"", "/release\""} {
		if strings.Contains(body, hidden) {
			t.Errorf("viewer sees %q", hidden)
		}
	}
	token := viewer.formToken()
	for _, p := range []string{"/ui/runs/" + approve.ID.String() + "/approve", "/ui/runs/" + approve.ID.String() + "/reject",
		"/ui/quarantine/build/app/quarantined/release"} {
		resp, body := viewer.do(http.MethodPost, p, url.Values{"csrf_token": {token}}, sameOrigin)
		wantStatus(t, "viewer POST "+p, resp, body, http.StatusForbidden)
	}

	op := newClient(t, s.srv.URL)
	op.signIn(s.operator)
	resp, body = op.get("/ui/")
	wantStatus(t, "operator overview", resp, body, http.StatusOK)
	wantContains(t, "operator overview", body, "/ui/runs/"+approve.ID.String()+"/approve", "/ui/runs/"+reject.ID.String()+"/reject",
		"/ui/quarantine/build/app/quarantined/release")
	resp, body = op.get("/ui/events/" + approve.EventID.String())
	wantStatus(t, "event page", resp, body, http.StatusOK)
	wantContains(t, "event page", body, "Held for", "/ui/runs/"+approve.ID.String()+"/approve")
	// The stream's history says the run was made held, as its active run
	// does, not queued.
	resp, body = op.get("/ui/streams/deploy/prod/held-a")
	wantStatus(t, "stream page", resp, body, http.StatusOK)
	wantContains(t, "stream page", body, "Run #1 held", "for approval")
	if strings.Contains(body, "Run #1 queued") {
		t.Errorf("stream page of a held run says it was queued:\n%s", body)
	}
	resp, body = op.do(http.MethodPost, "/ui/runs/"+approve.ID.String()+"/approve", url.Values{}, sameOrigin)
	wantStatus(t, "approve without a form token", resp, body, http.StatusForbidden)

	token = op.formToken()
	// The stream's key percent-encoded is the same key.
	for _, p := range []string{"/ui/runs/" + approve.ID.String() + "/approve", "/ui/runs/" + reject.ID.String() + "/reject",
		"/ui/quarantine/build/app%2Fquarantined/release"} {
		resp, body := op.do(http.MethodPost, p, url.Values{"csrf_token": {token}, "back": {"/ui/"}}, sameOrigin)
		wantStatus(t, "operator POST "+p, resp, body, http.StatusSeeOther)
		if got := resp.Header.Get("Location"); got != "/ui/" {
			t.Errorf("%s redirected to %q", p, got)
		}
	}
	for id, want := range map[*converge.Run]converge.RunStatus{approve: "", reject: converge.RunCancelled} {
		got, err := s.st.RunGet(ctx, id.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want == "" && got.Status == converge.RunHeld || want != "" && got.Status != want {
			t.Errorf("run %s is %s after the dashboard's action", id.Resource, got.Status)
		}
	}
	if q, err := s.st.QuarantineList(ctx); err != nil || len(q) != 0 {
		t.Errorf("quarantine after release: %v %v", q, err)
	}
	// Each stream's history says which operator acted, from the audit log,
	// and that the approved run was held (its hold is gone: the approval's
	// audit entry says it).
	for page, want := range map[string][]string{
		"/ui/streams/deploy/prod/held-a":    {"Run #1 approved", "Run #1 held", "for approval"},
		"/ui/streams/deploy/prod/held-b":    {"Run #1 rejected", "Run #1 held", "for approval"},
		"/ui/streams/build/app/quarantined": {"Quarantine released"},
	} {
		resp, body := viewer.get(page)
		wantStatus(t, page, resp, body, http.StatusOK)
		wantContains(t, page, body, append(want, "by oncall")...)
	}
	resp, body = viewer.get("/ui/events/" + approve.EventID.String())
	wantStatus(t, "event page after the approval", resp, body, http.StatusOK)
	wantContains(t, "event page after the approval", body, `data-testid="run-action"><dt>Approved</dt><dd>by oncall`)
	if _, body := viewer.get("/ui/streams/deploy/prod/held-a"); strings.Contains(body, "rejected") || strings.Contains(body, "Quarantine released") {
		t.Errorf("the approved run's stream shows another stream's actions:\n%s", body)
	}
	resp, body = op.get("/ui/")
	wantStatus(t, "overview after", resp, body, http.StatusOK)
	wantContains(t, "overview after", body, "released")

	// A redrive into a quarantined stream is accepted held: the flash says
	// so, not "queued".
	s.waitDeadLetters(t, wantDeadLetters)
	dl := s.deadLetter(t, "build", "lib/core")
	if _, err := s.pool.Exec(ctx, `UPDATE converge_streams SET failed_streak = 3, quarantined_at = now()
		WHERE kind = 'build' AND resource = 'lib/core'`); err != nil {
		t.Fatal(err)
	}
	resp, body = op.do(http.MethodPost, "/ui/dead-letters/"+dl.ID.String()+"/redrive", url.Values{"csrf_token": {token}}, sameOrigin)
	wantStatus(t, "redrive into a quarantine", resp, body, http.StatusSeeOther)
	resp, body = op.get(resp.Header.Get("Location"))
	wantStatus(t, "dead letter after the redrive", resp, body, http.StatusOK)
	wantContains(t, "dead letter after the redrive", body, "Redriven: run #2 is held for quarantine.")
}

// heldRun accepts version 1 of deploy resource held for approval.
func heldRun(t *testing.T, s *stack, resource string) *converge.Run {
	t.Helper()
	res, err := s.st.EventAccept(t.Context(), store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: "deploy", Resource: resource, Version: 1, Payload: json.RawMessage(`{}`)},
		MaxAttempts:     2, Hold: []string{converge.HoldApproval},
	})
	if err != nil {
		t.Fatal(err)
	}
	return res.Run
}

// quarantine makes build resource a quarantined stream of three failed
// runs.
func quarantine(t *testing.T, s *stack, resource string) {
	t.Helper()
	// Quarantined after three failed runs, so at version 3 at least (a
	// stream at 0 never accepted a version: no resource).
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO converge_streams (kind, resource, latest_version, failed_streak, quarantined_at)
		VALUES ('build', $1, 3, 3, now())`, resource); err != nil {
		t.Fatal(err)
	}
}

// TestDashboardHeldWorkOnItsPages: the pages a notification links to let
// an operator act there (SPEC §11, §12): a stream's page says it is
// quarantined and offers a release, and its active run held for approval
// an approve and a reject; a workflow run's page offers them for its step
// held for approval. Each action takes a reason for the audit log and
// returns to the page it was taken on; viewers see the state, no form.
func TestDashboardHeldWorkOnItsPages(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := t.Context()
	held := heldRun(t, s, "prod/page-a")
	quarantine(t, s, "app/page-q")
	gate, err := converge.NewWorkflow("gate", map[string]*converge.WorkflowStep{"ship": {Kind: "rollout", Resource: "gate/{resource}", Approval: true}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.st.WorkflowRunStart(ctx, store.WorkflowRunStartParams{
		WorkflowRunStart: converge.WorkflowRunStart{Workflow: "gate", Resource: "page-w", Version: 1, Payload: json.RawMessage(`{}`)},
		Definition:       gate, Policies: map[string]store.StepPolicy{"rollout": {MaxAttempts: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wr := res.WorkflowRun
	heldStream, quarantined, wfPage := "/ui/streams/deploy/prod/page-a", "/ui/streams/build/app/page-q", "/ui/workflow-runs/"+wr.ID.String()

	viewer := newClient(t, s.srv.URL)
	viewer.signIn(s.viewer)
	for page, want := range map[string]string{heldStream: "for approval", quarantined: "quarantined since", wfPage: "ship"} {
		resp, body := viewer.get(page)
		wantStatus(t, "viewer "+page, resp, body, http.StatusOK)
		wantContains(t, "viewer "+page, body, want)
		for _, hidden := range []string{"/approve\"", "/reject\"", "/release\""} {
			if strings.Contains(body, hidden) {
				t.Errorf("viewer sees %q on %s", hidden, page)
			}
		}
	}

	op := newClient(t, s.srv.URL)
	op.signIn(s.operator)
	resp, body := op.get(heldStream)
	wantStatus(t, "operator's held stream", resp, body, http.StatusOK)
	wantContains(t, "operator's held stream", body, `action="/ui/runs/`+held.ID.String()+`/approve"`, `formaction="/ui/runs/`+held.ID.String()+`/reject"`)
	resp, body = op.get(quarantined)
	wantStatus(t, "operator's quarantined stream", resp, body, http.StatusOK)
	wantContains(t, "operator's quarantined stream", body, `action="/ui/quarantine/build/app/page-q/release"`)
	resp, body = op.get(wfPage)
	wantStatus(t, "operator's workflow run", resp, body, http.StatusOK)
	ship := wr.Steps[0]
	wantContains(t, "operator's workflow run", body, `action="/ui/runs/`+ship.RunID.String()+`/approve"`)

	token := op.formToken()
	for _, act := range []struct{ path, back, reason string }{
		{"/ui/runs/" + held.ID.String() + "/approve", heldStream, "approved from its stream"},
		{"/ui/quarantine/build/app/page-q/release", quarantined, "released from its stream"},
		{"/ui/runs/" + ship.RunID.String() + "/reject", wfPage, "rejected from its workflow run"},
	} {
		resp, body := op.do(http.MethodPost, act.path, url.Values{"csrf_token": {token}, "back": {act.back}, "reason": {act.reason}}, sameOrigin)
		wantStatus(t, "operator POST "+act.path, resp, body, http.StatusSeeOther)
		if got := resp.Header.Get("Location"); got != act.back {
			t.Errorf("%s redirected to %q, want %q", act.path, got, act.back)
		}
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM converge_audit WHERE reason = $1`, act.reason).Scan(&n); err != nil || n != 1 {
			t.Errorf("audit entries with reason %q: %d (%v), want 1", act.reason, n, err)
		}
	}
	// (The stack's workers may have begun it already.)
	if got, err := s.st.RunGet(ctx, held.ID); err != nil || got.Status == converge.RunHeld || got.Status == converge.RunCancelled {
		t.Errorf("approved run: %+v, %v; want it queued or on", got, err)
	}
	if got, err := s.st.RunGet(ctx, *ship.RunID); err != nil || got.Status != converge.RunCancelled {
		t.Errorf("rejected step run: %+v, %v; want cancelled", got, err)
	}
	resp, body = op.get(quarantined)
	wantStatus(t, "released stream", resp, body, http.StatusOK)
	if strings.Contains(body, "quarantined since") || strings.Contains(body, "/release\"") {
		t.Errorf("the released stream's page still shows its quarantine")
	}
}

// TestDashboardHeldMany: the overview lists the newest 50 runs waiting for
// approval, says how many there are in all, and lists every one when asked.
func TestDashboardHeldMany(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	for i := range 53 {
		heldRun(t, s, fmt.Sprintf("prod/many-%02d", i))
	}
	op := newClient(t, s.srv.URL)
	op.signIn(s.operator)
	resp, body := op.get("/ui/")
	wantStatus(t, "overview", resp, body, http.StatusOK)
	wantContains(t, "overview", body, "The newest 50 of 53.", `href="/ui/?held=all#held"`, "prod/many-52")
	if strings.Contains(body, "prod/many-00<") {
		t.Errorf("the overview lists the oldest held run among the newest 50")
	}
	resp, body = op.get("/ui/?held=all")
	wantStatus(t, "overview, all held runs", resp, body, http.StatusOK)
	wantContains(t, "overview, all held runs", body, "prod/many-00<", "prod/many-52<")
	if strings.Contains(body, `data-testid="held-more"`) {
		t.Errorf("all held runs listed, and still a note of more")
	}
}
