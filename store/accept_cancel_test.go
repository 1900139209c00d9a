package store_test

import (
	"fmt"
	"slices"
	"testing"
)

// TestAcceptManyCancelsJobs: a batch of accepts that supersedes several
// runs cancels their jobs as one accept each does through River's
// JobCancelTx: a job not running is cancelled and finalized at once, a
// running one stays running for its producer to stop, and both are marked
// cancel_attempted_at. The batch cancels the jobs that are not running in
// one statement (jobCancelMany), so this holds it to River's own call,
// with a running job among them.
func TestAcceptManyCancelsJobs(t *testing.T) {
	t.Parallel()
	jobs := func(many bool) []string {
		d := newDiffPath(t, many)
		d.accept(t, diffAccept{"queued-a", 1, `{}`}, diffAccept{"queued-b", 1, `{}`}, diffAccept{"running", 1, `{}`}, diffAccept{"scheduled", 1, `{}`})
		// A worker fetched the job of running@1 and began its attempt; the
		// job of scheduled@1 waits for a later time (as a debounced or
		// snoozed one does).
		if _, err := d.pool.Exec(t.Context(), `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now()
			WHERE id = (SELECT job_id FROM converge_runs WHERE resource = 'running')`); err != nil {
			t.Fatal(err)
		}
		if _, err := d.pool.Exec(t.Context(), `UPDATE river_job SET state = 'scheduled', scheduled_at = now() + interval '1 hour'
			WHERE id = (SELECT job_id FROM converge_runs WHERE resource = 'scheduled')`); err != nil {
			t.Fatal(err)
		}
		d.begin(t, "running@1")
		d.accept(t, diffAccept{"queued-a", 2, `{}`}, diffAccept{"queued-b", 2, `{}`}, diffAccept{"running", 2, `{}`}, diffAccept{"scheduled", 2, `{}`})
		rows, err := d.pool.Query(t.Context(), `SELECT r.resource, r.version, r.status, j.state, j.finalized_at IS NOT NULL, j.metadata ? 'cancel_attempted_at'
			FROM converge_runs r JOIN river_job j ON j.id = r.job_id ORDER BY r.resource, r.version`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var res, status, state string
			var version int64
			var finalized, marked bool
			if err := rows.Scan(&res, &version, &status, &state, &finalized, &marked); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s@%d %s: job %s finalized %v cancel_attempted_at %v", res, version, status, state, finalized, marked))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	one, many := jobs(false), jobs(true)
	want := []string{
		"queued-a@1 superseded: job cancelled finalized true cancel_attempted_at true",
		"queued-a@2 queued: job available finalized false cancel_attempted_at false",
		"queued-b@1 superseded: job cancelled finalized true cancel_attempted_at true",
		"queued-b@2 queued: job available finalized false cancel_attempted_at false",
		"running@1 superseded: job running finalized false cancel_attempted_at true",
		"running@2 queued: job available finalized false cancel_attempted_at false",
		"scheduled@1 superseded: job cancelled finalized true cancel_attempted_at true",
		"scheduled@2 queued: job available finalized false cancel_attempted_at false",
	}
	if !slices.Equal(one, want) {
		t.Errorf("one by one (River's JobCancelTx):\n got %q\nwant %q", one, want)
	}
	if !slices.Equal(many, one) {
		t.Errorf("in one batch:\n got %q\none by one %q", many, one)
	}
}
