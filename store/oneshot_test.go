package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// TestRunOneShot checks G6 at the database: once a run is terminal, an
// UPDATE of its status, finished_at, error or output, or a DELETE, is
// refused with SQLSTATE CV006, whoever sends it.
func TestRunOneShot(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	st := store.New(pool, client)

	ends := []struct {
		status converge.RunStatus
		set    string // how the run became terminal
	}{
		{converge.RunSucceeded, `status = 'succeeded', finished_at = now(), output = '{"artifact":"x"}'`},
		{converge.RunFailed, `status = 'failed', finished_at = now(), error = '{"class":"permanent","message":"400 Bad Request","http_status":400}'`},
		{converge.RunSuperseded, `status = 'superseded', finished_at = now()`},
		{converge.RunCancelled, `status = 'cancelled', finished_at = now()`},
	}
	changes := []struct {
		name, sql string
	}{
		{"status to queued", `UPDATE converge_runs SET status = 'queued', finished_at = NULL WHERE id = $1`},
		{"status to running", `UPDATE converge_runs SET status = 'running', finished_at = NULL WHERE id = $1`},
		{"status to another terminal status", `UPDATE converge_runs SET status = CASE WHEN status = 'succeeded' THEN 'failed' ELSE 'succeeded' END WHERE id = $1`},
		{"finished_at", `UPDATE converge_runs SET finished_at = finished_at + interval '1 second' WHERE id = $1`},
		{"error set", `UPDATE converge_runs SET error = '{"class":"transient","message":"late"}' WHERE id = $1 AND error IS NULL`},
		{"error changed", `UPDATE converge_runs SET error = '{"class":"transient","message":"rewritten"}' WHERE id = $1 AND error IS NOT NULL`},
		{"error cleared", `UPDATE converge_runs SET error = NULL WHERE id = $1 AND error IS NOT NULL`},
		{"output", `UPDATE converge_runs SET output = '{"late":true}' WHERE id = $1`},
		{"everything at once", `UPDATE converge_runs SET status = 'retrying', finished_at = NULL, error = NULL, output = NULL WHERE id = $1`},
		{"delete", `DELETE FROM converge_runs WHERE id = $1`},
	}

	for _, end := range ends {
		t.Run(string(end.status), func(t *testing.T) {
			t.Parallel()
			res, err := st.EventAccept(ctx, store.EventAcceptParams{
				EventSubmission: converge.EventSubmission{Kind: "build", Resource: "oneshot/" + uuid.NewString(), Version: 1, Payload: json.RawMessage(`{}`)},
				MaxAttempts:     3,
			})
			if err != nil {
				t.Fatalf("accept: %v", err)
			}
			id := res.Run.ID
			if _, err := pool.Exec(ctx, `UPDATE converge_runs SET `+end.set+` WHERE id = $1`, id); err != nil {
				t.Fatalf("end the run %s: %v", end.status, err)
			}
			before := runState(t, pool, id)
			if before[0] != string(end.status) {
				t.Fatalf("run is %s, want %s", before[0], end.status)
			}

			for _, c := range changes {
				tag, err := pool.Exec(ctx, c.sql, id)
				if err == nil && tag.RowsAffected() == 0 {
					continue // the change does not apply to this run (error NULL or not)
				}
				if !store.IsOneShotViolation(err) {
					t.Errorf("%s of a %s run: err %v, want SQLSTATE CV006", c.name, end.status, err)
				}
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) && pgErr.Code != "CV006" {
					t.Errorf("%s: SQLSTATE %s", c.name, pgErr.Code)
				}
			}
			if after := runState(t, pool, id); after != before {
				t.Errorf("run changed from %v to %v", before, after)
			}

			// The store says the same thing in domain terms.
			_, err = st.RunCancel(ctx, id, converge.AuditEntry{Actor: "test", Role: "operator"})
			if !errors.Is(err, store.ErrRunFinished) || converge.ErrorCode(err) != converge.ERUNFINISHED {
				t.Errorf("cancel a %s run: %v, want run-finished", end.status, err)
			}
		})
	}

	t.Run("a run that is not terminal may change", func(t *testing.T) {
		t.Parallel()
		res, err := st.EventAccept(ctx, store.EventAcceptParams{
			EventSubmission: converge.EventSubmission{Kind: "build", Resource: "oneshot/" + uuid.NewString(), Version: 1, Payload: json.RawMessage(`{}`)},
			MaxAttempts:     3,
		})
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
		for _, sql := range []string{
			`UPDATE converge_runs SET status = 'running', started_at = now() WHERE id = $1`,
			`UPDATE converge_runs SET status = 'retrying', error = '{"class":"transient","message":"503"}' WHERE id = $1`,
			`UPDATE converge_runs SET status = 'succeeded', finished_at = now(), error = NULL, output = '{}' WHERE id = $1`,
		} {
			if _, err := pool.Exec(ctx, sql, res.Run.ID); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	})

	if store.IsOneShotViolation(errors.New("CV006")) || store.IsOneShotViolation(nil) ||
		store.IsOneShotViolation(fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "23505"})) {
		t.Error("IsOneShotViolation is true for an error that is not CV006")
	}
	if !store.IsOneShotViolation(fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "CV006"})) {
		t.Error("IsOneShotViolation is false for a wrapped CV006")
	}
}

// runState reads what G6 keeps fixed: status, finished_at, error, output.
func runState(t *testing.T, pool interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, id uuid.UUID) [4]string {
	t.Helper()
	var s [4]string
	err := pool.QueryRow(t.Context(), `SELECT status, coalesce(finished_at::text, ''), coalesce(error::text, ''), coalesce(output::text, '')
		FROM converge_runs WHERE id = $1`, id).Scan(&s[0], &s[1], &s[2], &s[3])
	if err != nil {
		t.Fatalf("read run %s: %v", id, err)
	}
	return s
}
