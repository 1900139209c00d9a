package pgserver

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// CreateDatabase creates the database name on the server behind adminURL,
// as a copy of template when template is not empty (CREATE DATABASE ...
// TEMPLATE, which copies files and is fast). Both names are quoted, so any
// spelling is safe.
func CreateDatabase(ctx context.Context, adminURL, name string, template string) error {
	sql := `CREATE DATABASE ` + pgx.Identifier{name}.Sanitize()
	if template != "" {
		sql += ` TEMPLATE ` + pgx.Identifier{template}.Sanitize()
	}
	if err := adminExec(ctx, adminURL, sql); err != nil {
		return fmt.Errorf("create database %q: %w", name, err)
	}
	return nil
}

// DropDatabase drops the database name on the server behind adminURL if it
// exists, disconnecting any sessions still connected to it (WITH (FORCE)).
func DropDatabase(ctx context.Context, adminURL, name string) error {
	sql := `DROP DATABASE IF EXISTS ` + pgx.Identifier{name}.Sanitize() + ` WITH (FORCE)`
	if err := adminExec(ctx, adminURL, sql); err != nil {
		return fmt.Errorf("drop database %q: %w", name, err)
	}
	return nil
}

// adminExec runs one statement on its own connection to adminURL. CREATE
// and DROP DATABASE cannot run inside a transaction, so no pool or
// transaction is involved.
func adminExec(ctx context.Context, adminURL, sql string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, sql); err != nil {
		return err
	}
	return nil
}
