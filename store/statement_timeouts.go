package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// statementRunner runs a statement outside any transaction of the store's: a read
// of a page, a token lookup, a single-statement write.
type statementRunner interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// timedStatements is the store's statementRunner with TransactionTimeouts (through
// a pooler in transaction mode): each statement runs in a transaction of
// its own begun with opts, whose BEGIN sets statement_timeout and
// lock_timeout for it alone. Alone, a statement would be its own implicit
// transaction on whichever server connection the pooler lends, with no
// timeout at all, since none may stay on a pooled connection (SPEC §15).
// It costs the BEGIN's and the COMMIT's round trips, only in that mode.
type timedStatements struct {
	pool *pgxpool.Pool
	opts pgx.TxOptions
}

// Exec runs sql in a transaction of its own and commits it.
func (q *timedStatements) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := pgx.BeginTxFunc(ctx, q.pool, q.opts, func(tx pgx.Tx) error {
		var err error
		tag, err = tx.Exec(ctx, sql, args...)
		return err
	})
	return tag, err
}

// QueryRow returns a row whose Scan runs sql in a transaction of its own.
func (q *timedStatements) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return &timedRow{q: q, ctx: ctx, sql: sql, args: args}
}

// Query runs sql in a transaction of its own, which ends when the rows do:
// committed once they are read to the end without an error, rolled back
// otherwise (a Close before the end commits what was done: a statement
// sent alone would have committed too).
func (q *timedStatements) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	tx, err := q.pool.BeginTx(ctx, q.opts)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return &timedRows{Rows: rows, tx: tx, ctx: ctx}, nil
}

// timedRow is QueryRow's row of timedStatements.
type timedRow struct {
	q    *timedStatements
	ctx  context.Context
	sql  string
	args []any
}

// Scan implements pgx.Row.
func (r *timedRow) Scan(dest ...any) error {
	return pgx.BeginTxFunc(r.ctx, r.q.pool, r.q.opts, func(tx pgx.Tx) error {
		return tx.QueryRow(r.ctx, r.sql, r.args...).Scan(dest...)
	})
}

// timedRows is Query's rows of timedStatements: the transaction ends when
// Next finds no more rows, or at Close, and an error of its commit is the
// rows' error.
type timedRows struct {
	pgx.Rows
	tx   pgx.Tx
	ctx  context.Context
	done bool
	err  error
}

// Next implements pgx.Rows.
func (r *timedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.end()
	return false
}

// Close implements pgx.Rows.
func (r *timedRows) Close() {
	r.Rows.Close()
	r.end()
}

// Err implements pgx.Rows.
func (r *timedRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// end commits the transaction, or rolls it back after an error; once.
func (r *timedRows) end() {
	if r.done {
		return
	}
	r.done = true
	r.Rows.Close()
	if r.Rows.Err() != nil {
		_ = r.tx.Rollback(r.ctx)
		return
	}
	r.err = r.tx.Commit(r.ctx)
}
