-- The run-count triggers' cost per statement (migration 000014), for
-- docs/benchmarks.md "Run counts: converge_runs for every status". Not a
-- migration (testdata is not embedded). On a scratch database migrated to
-- 000014 or later:
--
--   psql -d DB -f migrations/testdata/run_counts_micro.sql
--   psql -d DB -c "SET synchronous_commit = off" \
--     -c "CALL rc_bench(500, 1, false)" -c "CALL rc_bench(500, 1, true)" \
--     -c "CALL rc_bench(200, 50, false)" -c "CALL rc_bench(200, 50, true)"
--
-- rc_bench(iters, rows_per, with_triggers) enables or disables the insert
-- and update count triggers, then, iters times, one transaction each:
-- updates rows_per unfinished runs (as a begin does) and times it; inserts
-- rows_per runs and ends them in one statement (as an accept and a finish
-- do) and times those two statements. It reports µs per statement and per
-- pair in a NOTICE. It leaves the triggers as it set them.

CREATE OR REPLACE PROCEDURE rc_bench(iters int, rows_per int, with_triggers bool) LANGUAGE plpgsql AS $f$
DECLARE t0 timestamptz; t_upd interval := '0'; t_end interval := '0'; ids uuid[]; bids uuid[]; evs uuid[]; i int; mode text;
BEGIN
    mode := CASE WHEN with_triggers THEN 'ENABLE' ELSE 'DISABLE' END;
    EXECUTE format('ALTER TABLE converge_runs %s TRIGGER converge_run_counts_insert', mode);
    EXECUTE format('ALTER TABLE converge_runs %s TRIGGER converge_run_counts_update', mode);
    COMMIT;
    SELECT array_agg(converge_uuid_v7()) INTO evs FROM generate_series(1, rows_per);
    INSERT INTO converge_events (id, kind, resource, version, payload)
    SELECT e, 'micro', 'm/' || e, 1, '{}' FROM unnest(evs) e;
    SELECT array_agg(converge_uuid_v7()) INTO bids FROM generate_series(1, rows_per);
    INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, max_attempts)
    SELECT r, e, 1, 'micro', 'm/' || e, 1, 'queued', 3 FROM unnest(bids, evs) AS x (r, e);
    COMMIT;
    FOR i IN 1..iters LOOP
        t0 := clock_timestamp();
        UPDATE converge_runs SET status = CASE WHEN i % 2 = 0 THEN 'running' ELSE 'retrying' END, attempts = attempts + 1, started_at = now() WHERE id = ANY(bids);
        t_upd := t_upd + (clock_timestamp() - t0);
        COMMIT;
        SELECT array_agg(converge_uuid_v7()) INTO evs FROM generate_series(1, rows_per);
        INSERT INTO converge_events (id, kind, resource, version, payload)
        SELECT e, 'micro', 'f/' || e, 1, '{}' FROM unnest(evs) e;
        t0 := clock_timestamp();
        SELECT array_agg(converge_uuid_v7()) INTO ids FROM generate_series(1, rows_per);
        INSERT INTO converge_runs (id, event_id, number, kind, resource, version, status, max_attempts)
        SELECT r, e, 1, 'micro', 'f/' || e, 1, 'queued', 3 FROM unnest(ids, evs) AS x (r, e);
        UPDATE converge_runs SET status = 'succeeded', finished_at = now() WHERE id = ANY(ids);
        t_end := t_end + (clock_timestamp() - t0);
        COMMIT;
    END LOOP;
    RAISE NOTICE 'triggers % rows/stmt %: update (no run ends) % us/stmt; insert runs + end them % us/pair',
        with_triggers, rows_per, round(extract(epoch FROM t_upd) * 1e6 / iters, 1), round(extract(epoch FROM t_end) * 1e6 / iters, 1);
END;
$f$;
