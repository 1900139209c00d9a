package outage

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/pgtest"
	"github.com/converge-run/converge/test/testkit"
)

// holdStreamsLock takes `lock table converge_streams in access exclusive
// mode` in a transaction of its own on databaseURL and returns the
// function that releases it (also run at the test's cleanup).
func holdStreamsLock(t *testing.T, databaseURL string) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE converge_streams IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		_ = tx.Rollback(ctx)
		_ = conn.Close(ctx)
	}
	t.Cleanup(release)
	return release
}

// TestSlowDatabase holds an exclusive lock on converge_streams, as a
// long migration or a stuck transaction would: POST /v1/events is answered
// 503 unavailable within request_timeout (and within
// database.lock_timeout when that is shorter) instead of waiting for the
// lock, /readyz says the database is too slow, and both recover when the
// lock is released.
func TestSlowDatabase(t *testing.T) {
	t.Parallel()
	tg := newTarget(t)
	cases := []struct {
		name, extra string
		bound       time.Duration // the answer comes before this
	}{
		{"request_timeout", "request_timeout: 1s\ndatabase: {lock_timeout: 30s}\n", 1*time.Second + 1500*time.Millisecond},
		{"lock_timeout", "request_timeout: 20s\ndatabase: {lock_timeout: 300ms}\n", 300*time.Millisecond + 1500*time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDatabase(t)
			_, base := proc(t, "serve", "--config", testkit.ConfigFile(t, config(db, tg, tc.extra)))
			waitReady(t, base, 30*time.Second)
			waitSucceeded(t, base, eventID(t, submit(t, base, "app/locked", 1)), 30*time.Second)

			release := holdStreamsLock(t, db)
			a := submit(t, base, "app/locked", 2)
			wantUnavailable(t, "POST /v1/events under a table lock", a)
			if a.Took > tc.bound {
				t.Errorf("POST /v1/events under a table lock took %s, want under %s", a.Took, tc.bound)
			}
			a = submit(t, base, "app/other", 1)
			wantUnavailable(t, "POST /v1/events of a new stream under a table lock", a)
			r := call(t, base, http.MethodGet, "/readyz", nil)
			if r.Status != http.StatusServiceUnavailable || r.Body["reason"] != "database too slow" || r.Took > 5*time.Second {
				t.Errorf("readyz under a table lock: %d %s after %s, want 503 database too slow within 5s", r.Status, r.Raw, r.Took)
			}

			release()
			waitReady(t, base, 10*time.Second)
			waitSucceeded(t, base, eventID(t, submit(t, base, "app/locked", 2)), 30*time.Second)
		})
	}
}

// TestSchemaNotCurrent: with the database up but not migrated, /readyz
// says "schema not current" (not that the database is unreachable), and
// the worker, which cannot start River yet, starts once migrate up ran.
func TestSchemaNotCurrent(t *testing.T) {
	t.Parallel()
	db := pgtest.EmptyDatabase(t)
	tg := newTarget(t)
	cfg := testkit.ConfigFile(t, config(db, tg, ""))
	_, apiURL := proc(t, "api", "--config", cfg)
	worker, workerURL := proc(t, "worker", "--config", cfg)
	for _, u := range []string{apiURL, workerURL} {
		wantNotReady(t, u, "schema not current")
	}
	p := cvproc.Start(t, cvproc.Options{Args: []string{"migrate", "up", "--config", cfg}, Env: cvproc.Env()})
	if code := p.Wait(t, time.Minute); code != 0 {
		t.Fatalf("migrate up: exit %d\n%s", code, p.Stderr())
	}
	worker.LogLine(t, "workers started", 30*time.Second)
	for _, u := range []string{apiURL, workerURL} {
		waitReady(t, u, 30*time.Second)
	}
	waitSucceeded(t, apiURL, eventID(t, submit(t, apiURL, "app/late-schema", 1)), 30*time.Second)
}
