-- Terminal runs by kind and status (issue: converge_runs covers every run
-- status, SPEC §2 and §14), kept by the triggers below in the transaction
-- of every change, so that a scrape reads the terminal statuses of
-- converge_runs{kind,status} in O(kinds × statuses × shards) instead of
-- counting the history of finished runs (the unfinished ones are still
-- counted from the partial index converge_runs_one_active).
--
-- A kind's count of a status is the sum of n over its shards. A statement
-- that ends runs (or inserts terminal ones) adds to the row of the shard
-- pg_backend_pid() % 16 (the connection's; no session state, so any
-- connection of a pooler may add to any shard), so that the finishing
-- transactions of different connections rarely wait for the same row's
-- lock until they commit. Retention's deletions subtract in shard 16 of
-- their own (one pruning pass at a time holds the prune lease), so that a
-- finish never waits for a pruning batch, which holds its rows' locks
-- until the batch commits. Shard 16's n is negative; only the sum means
-- something.
CREATE TABLE converge_run_counts (
    kind   text     NOT NULL,
    status text     NOT NULL,
    shard  smallint NOT NULL,
    n      bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, status, shard)
);

-- The triggers are per statement, with transition tables: a statement
-- changing many runs (a group-commit batch of successes, a retention pass)
-- upserts each (kind, status) it changes once, in (kind, status) order, so
-- two statements lock the rows of several kinds in the same order. A
-- terminal run never changes status or finished_at (G6, the one-shot
-- trigger of 000001/000004), so the count changes only when a run ends
-- (finished_at set; the check of 000001 makes finished_at NOT NULL the same
-- as a terminal status), is inserted terminal (tests, the history
-- benchmark, the invariant checker's restore) or is deleted (retention).
-- The update trigger cannot name finished_at (PostgreSQL allows no column
-- list with transition tables), so it fires for every update statement of
-- runs (a begin's or a retry's, once per batch), as the insert trigger does
-- for every accept: the function then leaves after one look at the new
-- rows, since a statement after which no row is finished ended no run and
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
        INSERT INTO converge_run_counts AS c (kind, status, shard, n)
        SELECT kind, status, pg_backend_pid() % 16, count(*) FROM new_rows
         WHERE finished_at IS NOT NULL
         GROUP BY kind, status ORDER BY kind, status
        ON CONFLICT (kind, status, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO converge_run_counts AS c (kind, status, shard, n)
        SELECT kind, status, 16, -count(*) FROM old_rows
         WHERE finished_at IS NOT NULL
         GROUP BY kind, status ORDER BY kind, status
        ON CONFLICT (kind, status, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
    ELSE
        -- The runs finished after the update less those finished before
        -- it: the runs it ended (a terminal run's other columns may change,
        -- and its (kind, status) then nets to zero).
        INSERT INTO converge_run_counts AS c (kind, status, shard, n)
        SELECT kind, status, pg_backend_pid() % 16, sum(d) FROM (
            SELECT kind, status, 1 AS d FROM new_rows WHERE finished_at IS NOT NULL
            UNION ALL
            SELECT kind, status, -1 FROM old_rows WHERE finished_at IS NOT NULL) x
         GROUP BY kind, status HAVING sum(d) <> 0 ORDER BY kind, status
        ON CONFLICT (kind, status, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
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
CREATE FUNCTION converge_run_counts_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM converge_run_counts;
    RETURN NULL;
END;
$$;
CREATE TRIGGER converge_run_counts_truncate AFTER TRUNCATE ON converge_runs
    FOR EACH STATEMENT EXECUTE FUNCTION converge_run_counts_truncate();

-- Initialised from the runs there are, in shard 0: one pass over the
-- history, once (it is what every scrape would cost without the table).
INSERT INTO converge_run_counts (kind, status, shard, n)
SELECT kind, status, 0, count(*) FROM converge_runs
 WHERE finished_at IS NOT NULL
 GROUP BY kind, status;
