package pgserver

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// findTimeout bounds each connection attempt made by Find.
const findTimeout = 2 * time.Second

// findUsers are the roles Find tries, in order.
var findUsers = []string{"root", "postgres"}

// Find reports the URL of a PostgreSQL server accepting connections on
// 127.0.0.1:5432, such as
// "postgres://root@127.0.0.1:5432/postgres?sslmode=disable". It tries the
// role root and then postgres, each with a short timeout, and returns false
// when neither connects.
func Find(ctx context.Context) (string, bool) {
	for _, user := range findUsers {
		u := fmt.Sprintf("postgres://%s@127.0.0.1:5432/postgres?sslmode=disable", user)
		if err := ping(ctx, u, findTimeout); err == nil {
			return u, true
		}
	}
	return "", false
}

// ping connects to databaseURL, runs SELECT 1 and disconnects, all within
// timeout.
func ping(ctx context.Context, databaseURL string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("parse database url: %w", err)
	}
	cfg.ConnectTimeout = timeout
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var one int
	if err := conn.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("select 1: %w", err)
	}
	return nil
}
