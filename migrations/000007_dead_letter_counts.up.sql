-- Open dead letters by kind, kept by the triggers below in the transaction of
-- every change, so that converge_dead_letters_open is read in O(kinds) on
-- each scrape instead of counting the open rows (621 ms at 1,000,000; see
-- docs/benchmarks.md "Metrics scrape cost").
--
-- (Numbered 000007: 000006 is the workflows branch's.)
CREATE TABLE converge_dead_letter_counts (
    kind text   PRIMARY KEY,
    open bigint NOT NULL DEFAULT 0
);

-- The triggers are per statement, with transition tables: a statement
-- changing many dead letters (a bulk redrive, a purge) updates each kind's
-- row once, in kind order (so two statements lock the rows of several kinds
-- in the same order). A statement that changes no open dead letter writes
-- nothing; dead letters are written only when a run fails or an operator
-- acts, and superseded by a success only when its stream has open ones.
CREATE FUNCTION converge_dead_letter_counts_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO converge_dead_letter_counts AS c (kind, open)
        SELECT kind, count(*) FROM new_rows WHERE status = 'open' GROUP BY kind ORDER BY kind
        ON CONFLICT (kind) DO UPDATE SET open = c.open + EXCLUDED.open;
    ELSIF TG_OP = 'DELETE' THEN
        UPDATE converge_dead_letter_counts c SET open = c.open - d.n
          FROM (SELECT kind, count(*) AS n FROM old_rows WHERE status = 'open' GROUP BY kind ORDER BY kind) d
         WHERE c.kind = d.kind;
    ELSE
        -- Kind never changes; a row's status may enter or leave 'open'.
        INSERT INTO converge_dead_letter_counts AS c (kind, open)
        SELECT kind, sum(delta) FROM (
            SELECT n.kind, (n.status = 'open')::int - (o.status = 'open')::int AS delta
              FROM new_rows n JOIN old_rows o ON o.id = n.id
             WHERE (n.status = 'open') <> (o.status = 'open')) d
         GROUP BY kind ORDER BY kind
        ON CONFLICT (kind) DO UPDATE SET open = c.open + EXCLUDED.open;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER converge_dead_letter_counts_insert AFTER INSERT ON converge_dead_letters
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION converge_dead_letter_counts_add();
CREATE TRIGGER converge_dead_letter_counts_update AFTER UPDATE ON converge_dead_letters
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION converge_dead_letter_counts_add();
CREATE TRIGGER converge_dead_letter_counts_delete AFTER DELETE ON converge_dead_letters
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION converge_dead_letter_counts_add();

-- TRUNCATE fires no row or transition trigger: it empties the counts too.
CREATE FUNCTION converge_dead_letter_counts_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM converge_dead_letter_counts;
    RETURN NULL;
END;
$$;
CREATE TRIGGER converge_dead_letter_counts_truncate AFTER TRUNCATE ON converge_dead_letters
    FOR EACH STATEMENT EXECUTE FUNCTION converge_dead_letter_counts_truncate();

-- Initialised from the rows there are. (Migrations run under the migration
-- lock, before any process serves, so no change races this count.)
INSERT INTO converge_dead_letter_counts (kind, open)
SELECT kind, count(*) FROM converge_dead_letters WHERE status = 'open' GROUP BY kind;
