package store

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge"
)

// The SQL fragments that more than one statement uses, named once.

// unfinished are the run statuses a run can still leave: at most one run
// of a stream is in one of them (a partial unique index holds the line).
// A held run is unfinished: a newer version supersedes it (G4).
//
// A run is in one of them exactly when its finished_at is NULL (a check of
// migration 000001), and statements find unfinished runs by
// `finished_at IS NULL`: the predicate of the partial indexes of unfinished
// runs (migration 000013), which name no status so that a status change of
// an unfinished run can be a HOT update.
var unfinished = []converge.RunStatus{converge.RunQueued, converge.RunHeld, converge.RunRunning, converge.RunRetrying}

// waiting are the unfinished statuses of a run that is not in a call and
// has a job (a held run has none until it is released).
var waiting = []converge.RunStatus{converge.RunQueued, converge.RunRetrying}

// terminal are the statuses a run never leaves.
var terminal = []converge.RunStatus{converge.RunSucceeded, converge.RunFailed, converge.RunSuperseded, converge.RunCancelled}

// unsettledEnded are the terminal statuses that the partial index
// converge_runs_unsettled_event covers (migration 000013): failed and
// cancelled, which few runs end in.
var unsettledEnded = []converge.RunStatus{converge.RunFailed, converge.RunCancelled}

// statusList is statuses as a parenthesised SQL list of literals, for
// `status IN ...`: literals, not a parameter, so that the planner can use
// the partial indexes whose predicates name them.
func statusList(statuses []converge.RunStatus) string {
	q := make([]string, len(statuses))
	for i, s := range statuses {
		q[i] = "'" + string(s) + "'"
	}
	return "(" + strings.Join(q, ", ") + ")"
}

var (
	// waitingSQL is statusList(waiting): ('queued', 'retrying').
	waitingSQL = statusList(waiting)
	// terminalSQL is statusList(terminal).
	terminalSQL = statusList(terminal)
)

// durationSQL is, for an attempt row aliased a (or no alias when a is ""),
// how long it has lasted until the transaction's now(), in milliseconds:
// the value of converge_attempts.duration_ms when it is closed.
func durationSQL(a string) string {
	if a != "" {
		a += "."
	}
	return `(extract(epoch FROM now() - ` + a + `started_at) * 1000)::bigint`
}

// supersedeSet is the SET list that ends a run as superseded.
const supersedeSet = `status = 'superseded', finished_at = now(), next_attempt_at = NULL`

// supersedeStreamSQL ends every unfinished run of stream ($1, $2) as
// superseded and returns them with their jobs. The caller holds the
// stream's row lock and cancels the jobs returned.
var supersedeStreamSQL = `UPDATE converge_runs SET ` + supersedeSet + `
	WHERE kind = $1 AND resource = $2 AND finished_at IS NULL
	RETURNING id, job_id`

// supersedeRunSQL ends run $1 as superseded.
const supersedeRunSQL = `UPDATE converge_runs SET ` + supersedeSet + ` WHERE id = $1`

// The one lock order. Every transaction that locks more than one stream row
// locks them in bytewise order of (kind, resource) (COLLATE "C", which is
// how Go orders strings, see sortStreams), and locks a stream before any run
// of it, so that no two transactions wait for each other's locks.

// lockOrder is the ORDER BY list that puts stream rows, or the (kind,
// resource) pairs a statement locks them by, in the lock order.
func lockOrder(kind, resource string) string {
	return kind + ` COLLATE "C", ` + resource + ` COLLATE "C"`
}

// streamLockOrder is lockOrder of the rows of converge_streams aliased s.
var streamLockOrder = lockOrder("s.kind", "s.resource")

// lockStreamSQL locks the row of stream ($1, $2), aliased s, and reads
// cols from it.
func lockStreamSQL(cols string) string {
	return `SELECT ` + cols + ` FROM converge_streams s WHERE s.kind = $1 AND s.resource = $2 FOR UPDATE OF s`
}

// lockStreamsSQL locks the rows of the streams ($1[i], $2[i]), aliased s, in
// the lock order, and reads u.i (the 1-based index of the stream in the
// arrays) and cols from each. extra are more unnested arrays ($3...) with
// their names, available to cols as u.name.
func lockStreamsSQL(cols string, extra ...string) string {
	arrays, names := `$1::text[], $2::text[]`, `k, r`
	for i := 0; i+1 < len(extra); i += 2 {
		arrays += fmt.Sprintf(", $%d::%s", 3+i/2, extra[i+1])
		names += ", " + extra[i]
	}
	return `SELECT u.i, ` + cols + `
		FROM unnest(` + arrays + `) WITH ORDINALITY u(` + names + `, i)
		JOIN converge_streams s ON s.kind = u.k AND s.resource = u.r
		ORDER BY ` + streamLockOrder + ` FOR UPDATE OF s`
}

// streamKey identifies a stream in maps.
type streamKey struct{ kind, resource string }

// sortStreams returns 0..n-1 ordered by the stream of each, in the lock
// order (bytewise (kind, resource), as Go compares strings and as
// streamLockOrder sorts): the order in which a batch handles its calls.
func sortStreams(n int, stream func(int) (string, string)) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ka, ra := stream(a)
		kb, rb := stream(b)
		if c := strings.Compare(ka, kb); c != 0 {
			return c
		}
		return strings.Compare(ra, rb)
	})
	return order
}

// leaseReleaseSQL releases the lease of stream ($1, $2) if run $3 holds it.
const leaseReleaseSQL = `UPDATE converge_streams SET lease_run_id = NULL, lease_attempt = NULL, lease_expires_at = NULL
	WHERE kind = $1 AND resource = $2 AND lease_run_id = $3`

func leaseReleaseStmt(kind, resource string, runID uuid.UUID) stmt {
	return stmt{"release lease", leaseReleaseSQL, []any{kind, resource, runID}}
}

// stmt is a statement for execAll: what it does (for errors), its SQL and
// its arguments.
type stmt struct {
	what string
	sql  string
	args []any
}

// execAll runs stmts in tx, in order, in one round trip (a pgx batch; a
// single statement goes alone). The first error stops it and is returned
// with what its statement does.
func execAll(ctx context.Context, tx pgx.Tx, stmts ...stmt) error {
	if len(stmts) == 0 {
		return nil
	}
	if len(stmts) == 1 {
		if _, err := tx.Exec(ctx, stmts[0].sql, stmts[0].args...); err != nil {
			return fmt.Errorf("%s: %w", stmts[0].what, err)
		}
		return nil
	}
	var b pgx.Batch
	queue(&b, stmts)
	br := tx.SendBatch(ctx, &b)
	if err := execResults(br, stmts); err != nil {
		_ = br.Close()
		return err
	}
	return br.Close()
}

// queue adds stmts to b.
func queue(b *pgx.Batch, stmts []stmt) {
	for _, st := range stmts {
		b.Queue(st.sql, st.args...)
	}
}

// execResults reads the results of stmts, queued in br, in order.
func execResults(br pgx.BatchResults, stmts []stmt) error {
	for _, st := range stmts {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("%s: %w", st.what, err)
		}
	}
	return nil
}

// scanEach reads the next result of br row by row.
func scanEach(br pgx.BatchResults, fn func(pgx.Rows) error) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// uuids is ids as a query argument pgx encodes directly (a uuid.UUID is
// encoded through its text form).
func uuids(ids []uuid.UUID) [][16]byte {
	out := make([][16]byte, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// uuidDest is id as a scan destination pgx decodes directly: into a
// uuid.UUID, pgx goes through its sql.Scanner, formatting the id as text
// for uuid.Parse. Only for NOT NULL columns: a NULL is an error here, where
// the sql.Scanner would leave id unchanged.
func uuidDest(id *uuid.UUID) *[16]byte {
	return (*[16]byte)(id)
}

// Index plans for the batches. A group-commit batch addresses at most a few
// hundred rows, each by its key (a run's id, an attempt's (run, number), a
// stream's (kind, resource)), so an index lookup per row is always the
// right plan. PostgreSQL's cost model disagrees while a table is small (up
// to some thousands of rows, with the default random_page_cost): it scans
// the whole table, or hashes it, once per statement, a cost that grows with
// the table until the plan flips (docs/benchmarks.md, "Speed (issue 22):
// index plans for the batches"). The batches of begins and finishes set
// enable_seqscan off for their own statements and back to the session's
// value before anything else of the transaction runs (notifications,
// wake-ups, workflow steps), so that no other statement's plan changes.
const (
	indexPlansOnSQL  = `SET LOCAL enable_seqscan = off`
	indexPlansOffSQL = `SET LOCAL enable_seqscan TO DEFAULT`
)

// indexPlansOn and indexPlansOff are indexPlansOnSQL and indexPlansOffSQL
// as statements for execAll or queue.
var (
	indexPlansOn  = stmt{"plan by index", indexPlansOnSQL, nil}
	indexPlansOff = stmt{"end plan by index", indexPlansOffSQL, nil}
)
