-- Terminal runs by kind and status (issue: converge_runs covers every run
-- status, SPEC §2 and §14), kept by the triggers below in the transaction
-- of every change, so that a scrape reads the terminal statuses of
-- converge_runs{kind,status} from a few rows instead of counting the
-- history of finished runs (the unfinished ones are still counted from
-- the partial index converge_runs_one_active).
--
-- The table holds deltas: a kind's count of a status is the sum of n over
-- its rows, and no row means anything alone. A statement that ends runs
-- (or inserts terminal ones, or deletes them) INSERTS one row per
-- (kind, status) it changed, and never updates one: the triggers take no
-- lock on any row another transaction writes, so that finishing
-- transactions never wait for each other here, whatever they end and in
-- whatever order (an upsert into shared count rows held each row's lock
-- until commit, and two transactions ending runs of two kinds in opposite
-- orders deadlocked). No index and no key: an insert is a heap append,
-- and the readers (the scrape, the invariant checker) sum every row.
--
-- The rows are folded back into one per (kind, status) by the compaction
-- of store.RunCountsCompact, which the worker processes run periodically
-- (jobs.Reconciler): it deletes the rows there are and inserts their sums
-- in one statement, so the table stays at about what 30 s of finishes
-- insert.
CREATE TABLE converge_run_counts (
    kind   text   NOT NULL,
    status text   NOT NULL,
    n      bigint NOT NULL
);

-- The triggers are per statement, with transition tables: a statement
-- changing many runs (a group-commit batch of successes, a retention pass)
-- inserts one row per (kind, status) it changes. A terminal run never
-- changes status or finished_at (G6, the one-shot trigger of
-- 000001/000004), so the count changes only when a run ends (finished_at
-- set; the check of 000001 makes finished_at NOT NULL the same as a
-- terminal status), is inserted terminal (tests, the history benchmark,
-- the invariant checker's restore) or is deleted (retention). The update
-- trigger cannot name finished_at (PostgreSQL allows no column list with
-- transition tables), so it fires for every update statement of runs (a
-- begin's or a retry's, once per batch), as the insert trigger does for
-- every accept: the function then leaves after one look at the new rows,
-- since a statement after which no row is finished ended no run and
-- inserted no terminal one (and, by G6, changed no finished row).
CREATE FUNCTION converge_run_counts_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- (Nested: a DELETE trigger has no new_rows to plan a query on.)
    IF TG_OP <> 'DELETE' THEN
        IF NOT EXISTS (SELECT 1 FROM new_rows WHERE finished_at IS NOT NULL) THEN
            RETURN NULL;
        END IF;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO converge_run_counts (kind, status, n)
        SELECT kind, status, count(*) FROM new_rows
         WHERE finished_at IS NOT NULL
         GROUP BY kind, status;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO converge_run_counts (kind, status, n)
        SELECT kind, status, -count(*) FROM old_rows
         WHERE finished_at IS NOT NULL
         GROUP BY kind, status;
    ELSE
        -- The runs finished after the update less those finished before
        -- it: the runs it ended (a terminal run's other columns may change,
        -- and its (kind, status) then nets to zero).
        INSERT INTO converge_run_counts (kind, status, n)
        SELECT kind, status, sum(d) FROM (
            SELECT kind, status, 1 AS d FROM new_rows WHERE finished_at IS NOT NULL
            UNION ALL
            SELECT kind, status, -1 FROM old_rows WHERE finished_at IS NOT NULL) x
         GROUP BY kind, status HAVING sum(d) <> 0;
    END IF;
    RETURN NULL;
END;
$$;

-- Creating the first trigger locks converge_runs against writes (SHARE ROW
-- EXCLUSIVE) until this migration commits, so no run ends between the
-- triggers' creation and the count below: a writer either committed before
-- (and is counted) or waits and fires the triggers.
CREATE TRIGGER converge_run_counts_insert AFTER INSERT ON converge_runs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION converge_run_counts_add();
CREATE TRIGGER converge_run_counts_update AFTER UPDATE ON converge_runs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION converge_run_counts_add();
CREATE TRIGGER converge_run_counts_delete AFTER DELETE ON converge_runs
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION converge_run_counts_add();

-- TRUNCATE fires no row or transition trigger: it empties the counts too.
-- No transaction writing runs is open meanwhile (TRUNCATE's ACCESS
-- EXCLUSIVE lock waited for them all); the compaction, which writes this
-- table without writing runs, takes an ACCESS SHARE lock on converge_runs
-- first, so that it is not open meanwhile either (a sum it inserted after
-- this DELETE's snapshot would outlive the truncation).
CREATE FUNCTION converge_run_counts_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM converge_run_counts;
    RETURN NULL;
END;
$$;
CREATE TRIGGER converge_run_counts_truncate AFTER TRUNCATE ON converge_runs
    FOR EACH STATEMENT EXECUTE FUNCTION converge_run_counts_truncate();

-- Initialised from the runs there are: one pass over the history, once
-- (it is what every scrape would cost without the table).
INSERT INTO converge_run_counts (kind, status, n)
SELECT kind, status, count(*) FROM converge_runs
 WHERE finished_at IS NOT NULL
 GROUP BY kind, status;
