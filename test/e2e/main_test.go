package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/converge-run/converge/pgserver"
	"github.com/converge-run/converge/test/pgbouncer"
	"github.com/converge-run/converge/test/pgtest"
)

// bouncer is the PgBouncer in transaction mode the suite runs converge
// through when TEST_PGBOUNCER=1 (make test-pgbouncer), nil otherwise.
var bouncer *pgbouncer.Bouncer

func TestMain(m *testing.M) {
	if os.Getenv("TEST_PGBOUNCER") == "1" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		upstream, _ := pgserver.Find(ctx)
		if upstream == "" {
			upstream = "postgres://postgres@127.0.0.1:5432/postgres"
		}
		b, err := pgbouncer.Start(ctx, upstream)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: TEST_PGBOUNCER=1 but PgBouncer does not start: %v\n", err)
			os.Exit(1)
		}
		bouncer = b
		fmt.Fprintf(os.Stderr, "e2e: converge runs through PgBouncer (transaction mode) on %s\n", b.Addr())
		code := pgtest.Run(m)
		if code == 0 {
			// The suite passed: make sure it went through PgBouncer.
			time.Sleep(1500 * time.Millisecond) // SHOW STATS is refreshed every second
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			n, err := b.Transactions(ctx)
			cancel()
			if err != nil || n < 100 {
				fmt.Fprintf(os.Stderr, "e2e: PgBouncer served %d transactions (%v): the suite did not run through it\n", n, err)
				code = 1
			} else {
				fmt.Fprintf(os.Stderr, "e2e: PgBouncer served %d transactions\n", n)
			}
		}
		b.Stop()
		os.Exit(code)
	}
	pgtest.Main(m)
}

// databaseYAML is the configuration's database lines for a test database
// at databaseURL: database_url alone, or, under TEST_PGBOUNCER=1, the
// database through PgBouncer with database.pooler: transaction and the
// direct URL as database.direct_url (migrations, River's LISTEN).
func databaseYAML(databaseURL string) string {
	if bouncer == nil {
		return "database_url: " + databaseURL + "\n"
	}
	return fmt.Sprintf("database_url: %s\ndatabase: {pooler: transaction, direct_url: '%s'}\n", bouncer.URL(databaseURL), databaseURL)
}
