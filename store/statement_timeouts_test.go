package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// TestStatementTimeoutsOutsideTransactions: with TransactionTimeouts (a
// pooler in transaction mode, where no setting stays on a connection), a
// statement the store sends outside a transaction of its own is bounded
// too: a read of one row (QueryRow), of a page (Query) and a single-statement
// write (Exec) each stop at lock_timeout behind a lock, unavailable, where
// they waited for as long as the lock was held; without a lock they work,
// a write commits, and nothing stays on the connection.
func TestStatementTimeoutsOutsideTransactions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	databaseURL := pgtest.NewDatabase(t)
	pool := pgtest.OpenPool(t, databaseURL, 1)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(pool, client, store.TransactionTimeouts(0, 150*time.Millisecond))
	acc, err := st.EventAccept(ctx, store.EventAcceptParams{
		EventSubmission: converge.EventSubmission{Kind: "build", Resource: "timeouts/" + uuid.NewString(), Version: 1, Payload: []byte(`{}`)}, MaxAttempts: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		name, table string
		call        func(context.Context) error
	}{
		{"EventGet (one row)", "converge_events", func(ctx context.Context) error { _, err := st.EventGet(ctx, acc.Event.ID); return err }},
		{"EventList (a page)", "converge_events", func(ctx context.Context) error {
			_, _, err := st.EventList(ctx, converge.EventListParams{Limit: 10})
			return err
		}},
		{"SessionDelete (a write)", "converge_sessions", func(ctx context.Context) error { return st.SessionDelete(ctx, "no such session") }},
	}
	other := pgtest.OpenPool(t, databaseURL, 1)
	for _, c := range calls {
		tx, err := other.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE `+c.table+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		began := time.Now()
		err = st.Unavailable(cctx, c.call(cctx))
		took := time.Since(began)
		cancel()
		_ = tx.Rollback(ctx)
		if converge.ErrorCode(err) != converge.EUNAVAILABLE || took > 3*time.Second {
			t.Errorf("%s under a lock: %v after %s, want unavailable within lock_timeout", c.name, err, took)
		}
		if err := c.call(ctx); err != nil {
			t.Errorf("%s without a lock: %v", c.name, err)
		}
	}
	var lockTimeout string
	if err := pool.QueryRow(ctx, `SHOW lock_timeout`).Scan(&lockTimeout); err != nil || lockTimeout != "0" {
		t.Errorf("lock_timeout of the session afterwards: %q %v, want 0 (nothing left on the connection)", lockTimeout, err)
	}
}
