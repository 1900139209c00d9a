package invariant

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge"
)

// prunedTables are the tables whose pruned rows RecordPrunes keeps, in the
// order RestorePruned writes them back (parents first).
var prunedTables = []string{"converge_workflow_runs", "converge_events", "converge_runs", "converge_attempts",
	"converge_dead_letters", "converge_workflow_steps"}

// RecordPrunes makes the test database keep a copy of every row a pruning
// pass deletes (SPEC §13), so that CheckPruned can judge each deletion and
// then put the rows back for Check to see the whole history. Call it once,
// on a database of the test's own, before converge runs: it adds a table
// (converge_test_pruned: the table, the row as JSON, the deleting
// transaction and the moment of the delete) and an AFTER DELETE trigger on
// each pruned table that fires only on the prune path
// (converge_pruning()).
func RecordPrunes(ctx context.Context, pool *pgxpool.Pool) error {
	sql := `CREATE TABLE IF NOT EXISTS converge_test_pruned (
		seq bigserial PRIMARY KEY, tbl text NOT NULL, row jsonb NOT NULL,
		tx bigint NOT NULL DEFAULT txid_current(), at timestamptz NOT NULL DEFAULT clock_timestamp());
	CREATE OR REPLACE FUNCTION converge_test_record_prune() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO converge_test_pruned (tbl, row) VALUES (TG_TABLE_NAME, to_jsonb(OLD));
		RETURN NULL;
	END;
	$$;`
	for _, t := range prunedTables {
		sql += fmt.Sprintf(`
	CREATE OR REPLACE TRIGGER converge_test_record_prune AFTER DELETE ON %s
		FOR EACH ROW WHEN (converge_pruning()) EXECUTE FUNCTION converge_test_record_prune();`, t)
	}
	if _, err := pool.Exec(ctx, sql); err != nil {
		return fmt.Errorf("record prunes: %w", err)
	}
	return nil
}

// PruneReport is what CheckPruned found.
type PruneReport struct {
	// Pruned counts the rows pruning deleted, by table.
	Pruned map[string]int
	// Transactions is how many transactions deleted them.
	Transactions int
	Violations   []Violation
}

// CheckPruned judges every deletion RecordPrunes recorded against SPEC
// §13 with retention r, then writes the pruned rows back into their tables
// (in one transaction, with the checks), so that Check afterwards sees the
// whole history as if nothing had been pruned and holds G1–G8 over it. It
// is the one function of this package that writes; call it once, after
// converge has stopped.
//
// Rules (rule "P"):
//   - never deleted: every stream's latest accepted event and the event of
//     its applied version are present (checked before the rows go back);
//   - a pruned run was terminal and finished before the moment of its
//     deletion − r.Runs, in the transaction that deleted its event; a
//     pruned attempt was finished (not in flight) and its run went in the
//     same transaction;
//   - a pruned event had every run pruned with it, was neither its
//     stream's latest accepted event nor the event of its applied version
//     at that moment (from the history: the events received and the runs
//     succeeded before it), and no workflow run that referred to it was
//     kept: a step's event went with its workflow run, or after it;
//   - a pruned dead letter was resolved (never open) before the moment −
//     r.DeadLetters;
//   - a pruned workflow run had finished_at before the moment −
//     r.WorkflowRuns, and went with all its steps; its events that were
//     its streams' latest accepted or applied versions stay (they are
//     judged as events).
func CheckPruned(ctx context.Context, pool *pgxpool.Pool, r converge.Retention) (*PruneReport, error) {
	rep := &PruneReport{Pruned: map[string]int{}}
	fail := func(stream, format string, args ...any) {
		rep.Violations = append(rep.Violations, Violation{Rule: "P", Stream: stream, Message: fmt.Sprintf(format, args...)})
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("check pruned: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	// Never deleted, on the tables as converge left them.
	rows, err := tx.Query(ctx, `SELECT s.kind || ' ' || s.resource, v.what, v.version FROM converge_streams s,
		LATERAL (VALUES ('latest accepted', s.latest_version), ('applied', s.applied_version)) AS v (what, version)
		WHERE v.version IS NOT NULL AND NOT EXISTS (SELECT 1 FROM converge_events e
			WHERE e.kind = s.kind AND e.resource = s.resource AND e.version = v.version)`)
	if err != nil {
		return nil, fmt.Errorf("check pruned: %w", err)
	}
	var stream, what string
	var version int64
	if _, err := pgx.ForEachRow(rows, []any{&stream, &what, &version}, func() error {
		fail(stream, "the %s version %d has no event: it was deleted", what, version)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("check pruned: %w", err)
	}

	// The history back in place. Generated columns (converge_runs.end_status,
	// migration 000013) cannot be inserted; the database computes them again.
	for _, t := range prunedTables {
		var cols string
		err := tx.QueryRow(ctx, `SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
			WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = ''`, t).Scan(&cols)
		if err != nil {
			return nil, fmt.Errorf("check pruned: columns of %s: %w", t, err)
		}
		tag, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s (%[2]s) SELECT %[2]s
			FROM (SELECT (jsonb_populate_record(NULL::%[1]s, row)).*, seq AS converge_test_seq
			      FROM converge_test_pruned WHERE tbl = '%[1]s') r ORDER BY converge_test_seq`, t, cols))
		if err != nil {
			return nil, fmt.Errorf("check pruned: restore %s: %w", t, err)
		}
		rep.Pruned[t] = int(tag.RowsAffected())
	}
	if err := tx.QueryRow(ctx, `SELECT count(DISTINCT tx) FROM converge_test_pruned`).Scan(&rep.Transactions); err != nil {
		return nil, fmt.Errorf("check pruned: %w", err)
	}

	age := func(d time.Duration) *int64 {
		if d <= 0 {
			return nil // kept forever: nothing of the kind may be pruned
		}
		us := d.Microseconds()
		return &us
	}
	checks := []struct{ name, sql string }{
		{"run", `SELECT p.row->>'kind' || ' ' || (p.row->>'resource'), format('run %s (%s, finished %s) pruned at %s',
				p.row->>'id', p.row->>'status', coalesce(p.row->>'finished_at', 'never'), p.at)
			FROM converge_test_pruned p WHERE p.tbl = 'converge_runs' AND (
				@runs::bigint IS NULL OR p.row->>'status' NOT IN ('succeeded', 'failed', 'superseded', 'cancelled')
				OR p.row->>'finished_at' IS NULL
				OR (p.row->>'finished_at')::timestamptz >= p.at - @runs * interval '1 microsecond'
				OR NOT EXISTS (SELECT 1 FROM converge_test_pruned e WHERE e.tbl = 'converge_events' AND e.tx = p.tx
				                 AND e.row->>'id' = p.row->>'event_id'))`},
		{"attempt", `SELECT '', format('attempt %s of run %s (%s) pruned open or without its run', p.row->>'number', p.row->>'run_id',
				coalesce(p.row->>'outcome', 'open'))
			FROM converge_test_pruned p WHERE p.tbl = 'converge_attempts' AND (p.row->>'outcome' IS NULL OR NOT EXISTS (
				SELECT 1 FROM converge_test_pruned x WHERE x.tbl = 'converge_runs' AND x.tx = p.tx AND x.row->>'id' = p.row->>'run_id'))`},
		{"event", `SELECT e.kind || ' ' || e.resource, format('event %s@%s pruned at %s: %s', e.id, e.version, p.at,
				concat_ws(', ',
					CASE WHEN EXISTS (SELECT 1 FROM converge_runs r WHERE r.event_id = e.id AND NOT EXISTS (SELECT 1 FROM converge_test_pruned x
						WHERE x.tbl = 'converge_runs' AND x.tx = p.tx AND x.row->>'id' = r.id::text)) THEN 'a run of it was not pruned with it' END,
					CASE WHEN e.version >= (SELECT max(x.version) FROM converge_events x WHERE x.kind = e.kind AND x.resource = e.resource
						AND x.received_at <= p.at) THEN 'it was its stream''s latest accepted event' END,
					CASE WHEN e.version = (SELECT max(r.version) FROM converge_runs r WHERE r.kind = e.kind AND r.resource = e.resource
						AND r.status = 'succeeded' AND r.finished_at <= p.at) THEN 'it was the event of its stream''s applied version' END,
					CASE WHEN (e.workflow_run_id IS NOT NULL OR EXISTS (SELECT 1 FROM converge_workflow_steps st WHERE st.event_id = e.id))
						AND NOT EXISTS (SELECT 1 FROM converge_test_pruned x WHERE x.tbl = 'converge_workflow_runs' AND (x.tx = p.tx OR x.at < p.at)
							AND x.row->>'id' IN (e.workflow_run_id::text, (SELECT st.workflow_run_id::text FROM converge_workflow_steps st WHERE st.event_id = e.id)))
						THEN 'a kept workflow run refers to it' END))
			FROM converge_test_pruned p JOIN converge_events e ON e.id = (p.row->>'id')::uuid
			WHERE p.tbl = 'converge_events' AND (
				EXISTS (SELECT 1 FROM converge_runs r WHERE r.event_id = e.id AND NOT EXISTS (SELECT 1 FROM converge_test_pruned x
					WHERE x.tbl = 'converge_runs' AND x.tx = p.tx AND x.row->>'id' = r.id::text))
				OR e.version >= (SELECT max(x.version) FROM converge_events x WHERE x.kind = e.kind AND x.resource = e.resource AND x.received_at <= p.at)
				OR e.version = (SELECT max(r.version) FROM converge_runs r WHERE r.kind = e.kind AND r.resource = e.resource
					AND r.status = 'succeeded' AND r.finished_at <= p.at)
				OR ((e.workflow_run_id IS NOT NULL OR EXISTS (SELECT 1 FROM converge_workflow_steps st WHERE st.event_id = e.id))
					AND NOT EXISTS (SELECT 1 FROM converge_test_pruned x WHERE x.tbl = 'converge_workflow_runs' AND (x.tx = p.tx OR x.at < p.at)
						AND x.row->>'id' IN (e.workflow_run_id::text, (SELECT st.workflow_run_id::text FROM converge_workflow_steps st WHERE st.event_id = e.id)))))`},
		{"dead letter", `SELECT p.row->>'kind' || ' ' || (p.row->>'resource'), format('dead letter %s (%s, resolved %s) pruned at %s',
				p.row->>'id', p.row->>'status', coalesce(p.row->>'resolved_at', 'never'), p.at)
			FROM converge_test_pruned p WHERE p.tbl = 'converge_dead_letters' AND (
				@dead_letters::bigint IS NULL OR p.row->>'status' = 'open' OR p.row->>'resolved_at' IS NULL
				OR (p.row->>'resolved_at')::timestamptz >= p.at - @dead_letters * interval '1 microsecond')`},
		{"workflow run", `SELECT '', format('workflow run %s (%s, finished %s) pruned at %s%s', p.row->>'id', p.row->>'status',
				coalesce(p.row->>'finished_at', 'never'), p.at,
				CASE WHEN EXISTS (SELECT 1 FROM converge_workflow_steps st WHERE st.workflow_run_id = (p.row->>'id')::uuid AND NOT EXISTS (
					SELECT 1 FROM converge_test_pruned x WHERE x.tbl = 'converge_workflow_steps' AND x.tx = p.tx
					  AND x.row->>'workflow_run_id' = st.workflow_run_id::text AND x.row->>'name' = st.name))
					THEN ', without all its steps' ELSE '' END)
			FROM converge_test_pruned p WHERE p.tbl = 'converge_workflow_runs' AND (
				@workflow_runs::bigint IS NULL OR p.row->>'finished_at' IS NULL
				OR (p.row->>'finished_at')::timestamptz >= p.at - @workflow_runs * interval '1 microsecond'
				OR EXISTS (SELECT 1 FROM converge_workflow_steps st WHERE st.workflow_run_id = (p.row->>'id')::uuid AND NOT EXISTS (
					SELECT 1 FROM converge_test_pruned x WHERE x.tbl = 'converge_workflow_steps' AND x.tx = p.tx
					  AND x.row->>'workflow_run_id' = st.workflow_run_id::text AND x.row->>'name' = st.name)))`},
	}
	args := pgx.NamedArgs{"runs": age(r.Runs), "dead_letters": age(r.DeadLetters), "workflow_runs": age(r.WorkflowRuns)}
	for _, ch := range checks {
		rows, err := tx.Query(ctx, ch.sql, args)
		if err != nil {
			return nil, fmt.Errorf("check pruned %ss: %w", ch.name, err)
		}
		var stream, msg string
		if _, err := pgx.ForEachRow(rows, []any{&stream, &msg}, func() error {
			fail(stream, "%s", msg)
			return nil
		}); err != nil {
			return nil, fmt.Errorf("check pruned %ss: %w", ch.name, err)
		}
	}
	// Once back, the rows are no longer pruned ones.
	if _, err := tx.Exec(ctx, `DELETE FROM converge_test_pruned`); err != nil {
		return nil, fmt.Errorf("check pruned: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("check pruned: %w", err)
	}
	return rep, nil
}
