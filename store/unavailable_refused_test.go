package store_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// TestUnavailableConnectionRefused checks that a connection the server
// itself refuses (a database that no longer allows connections, one that
// does not exist, a role that cannot log in) is the database unreachable:
// 503 unavailable and an outage, not 500 internal (SPEC §15). Each is a
// *pgconn.ConnectError wrapping the server's error, whose code (55000,
// 3D000, 28000) is no outage code of its own.
func TestUnavailableConnectionRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	closed := pgtest.NewDatabase(t)
	name := databaseName(t, closed)
	admin := pgtest.OpenPool(t, pgtest.AdminURL(), 1)
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` ALLOW_CONNECTIONS false`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` ALLOW_CONNECTIONS true`)
	})
	cases := []struct{ name, url string }{
		{"database not allowing connections", closed},
		{"database missing", withURL(t, closed, func(u *url.URL) { u.Path = "/converge_no_such_database" })},
		{"role missing", withURL(t, closed, func(u *url.URL) { u.User = url.User("converge_no_such_role") })},
	}
	for _, tc := range cases {
		pool, err := pgxpool.New(ctx, tc.url)
		if err != nil {
			t.Fatal(err)
		}
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = pool.Exec(qctx, `SELECT 1`)
		cancel()
		pool.Close()
		if err == nil {
			t.Fatalf("%s: the statement ran", tc.name)
		}
		got := store.Unavailable(err)
		var app *converge.AppError
		if !errors.As(got, &app) || app.Code != converge.EUNAVAILABLE || !strings.HasPrefix(app.Message, store.ReasonUnreachable) {
			t.Errorf("%s: Unavailable(%v) = %v (code %q), want %q", tc.name, err, got, converge.ErrorCode(got), store.ReasonUnreachable)
		}
		if !store.IsOutage(err) {
			t.Errorf("%s: IsOutage(%v) = false, want true", tc.name, err)
		}
	}
}

// databaseName is the database of databaseURL.
func databaseName(t *testing.T, databaseURL string) string {
	t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// withURL returns databaseURL changed by change.
func withURL(t *testing.T, databaseURL string, change func(*url.URL)) string {
	t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	change(u)
	return u.String()
}
