-- HOT run updates (issue 22, round 4).
--
-- A run is written three times: inserted at acceptance, set running when an
-- attempt begins (and retrying, running again), and ended. PostgreSQL can
-- update a row in place, adding no index entries (a HOT update), only when
-- no column that any index uses (as a key or in a partial index's
-- predicate) changes. status was used by five of the run's eight indexes,
-- so every status change added an entry to each index the new row belongs
-- to. The indexes below no longer use status or any other column that the
-- updates of an unfinished run change (status, attempts, started_at,
-- next_attempt_at, job_id, error): such an update can be HOT. A run's end
-- sets finished_at and is not.
--
-- An unfinished run is one with finished_at NULL: the check
-- ((status IN terminal) = (finished_at IS NOT NULL)) of 000001 makes the
-- two the same. end_status is the status of a finished run and NULL before
-- it ends, so it stays the same (NULL) while an unfinished run changes
-- status, and the indexes of finished runs by status use it.
ALTER TABLE converge_runs ADD COLUMN end_status text
    GENERATED ALWAYS AS (CASE WHEN finished_at IS NOT NULL THEN status END) STORED;

-- G4: at most one unfinished run per stream, as before.
DROP INDEX converge_runs_one_active;
CREATE UNIQUE INDEX converge_runs_one_active ON converge_runs (kind, resource)
    WHERE finished_at IS NULL;

-- Listing events by status (store/event.go): an unfinished status walks
-- the unfinished runs (at most one per stream) and keeps that status's; a
-- finished status that few runs end in walks its own.
DROP INDEX converge_runs_unsettled_event;
CREATE INDEX converge_runs_unfinished_event ON converge_runs (event_id DESC)
    WHERE finished_at IS NULL;
CREATE INDEX converge_runs_unsettled_event ON converge_runs (end_status, event_id DESC)
    WHERE end_status IN ('failed', 'cancelled');

-- A held run is an unfinished run with a hold (the check
-- converge_runs_hold_status of 000009).
DROP INDEX converge_runs_held;
CREATE INDEX converge_runs_held ON converge_runs (created_at DESC)
    WHERE cardinality(hold) > 0 AND finished_at IS NULL;

DROP INDEX converge_runs_workflow_unfinished;
CREATE INDEX converge_runs_workflow_unfinished ON converge_runs (workflow_run_id)
    WHERE workflow_run_id IS NOT NULL AND finished_at IS NULL;

DROP INDEX converge_runs_superseded_finished;
CREATE INDEX converge_runs_superseded_finished ON converge_runs (finished_at DESC)
    WHERE end_status = 'superseded';

-- The step runs of a workflow run that are unfinished, read from the index
-- above (as 000009, which named the unfinished statuses).
CREATE OR REPLACE FUNCTION converge_workflow_run_waiting(w uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    st text;
BEGIN
    PERFORM 1 FROM converge_workflow_runs
     WHERE id = w AND finished_at IS NULL AND status IN ('running', 'waiting') FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT CASE WHEN bool_or(status = 'held') AND NOT bool_or(status IN ('queued', 'running', 'retrying'))
                THEN 'waiting' ELSE 'running' END INTO st
      FROM converge_runs WHERE workflow_run_id = w AND finished_at IS NULL;
    UPDATE converge_workflow_runs SET status = coalesce(st, 'running')
     WHERE id = w AND status IN ('running', 'waiting') AND status IS DISTINCT FROM coalesce(st, 'running');
END;
$$;

-- A HOT update needs room on the row's page for the new version: leave
-- half of each page filled from now on free for the updates (a run is
-- updated at least twice after its insert, and the runs of a page are
-- begun at about the same time; 80 left room for a fifth of the begins,
-- 50 for nearly all, docs/benchmarks.md).
ALTER TABLE converge_runs SET (fillfactor = 50);
