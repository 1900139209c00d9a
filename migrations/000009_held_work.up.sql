-- Held work (SPEC §11): a run may be held (accepted and durable, but not
-- started) until an operator approves it or releases its stream's
-- quarantine. A held run has no River job until it stops being held.
ALTER TABLE converge_runs DROP CONSTRAINT converge_runs_status_check;
ALTER TABLE converge_runs ADD CONSTRAINT converge_runs_status_check
    CHECK (status IN ('queued', 'held', 'running', 'retrying', 'succeeded', 'failed', 'superseded', 'cancelled'));
-- hold is what holds a held run (approval and/or quarantine). A run that
-- left held for queued has an empty list; a held run that was superseded,
-- rejected or cancelled keeps the list it had.
ALTER TABLE converge_runs ADD COLUMN hold text[] NOT NULL DEFAULT '{}'
    CHECK (hold <@ ARRAY['approval', 'quarantine']::text[]);
ALTER TABLE converge_runs ADD CONSTRAINT converge_runs_hold_status
    CHECK ((status = 'held') = (cardinality(hold) > 0) OR status IN ('superseded', 'cancelled'));
-- The kind's quarantine_after when the run was created: the transaction
-- that ends it failed quarantines its stream after that many failures in a
-- row (0 = never).
ALTER TABLE converge_runs ADD COLUMN quarantine_after integer NOT NULL DEFAULT 0;

-- A held run is unfinished: at most one per stream, superseded by G4 like a
-- queued one.
DROP INDEX converge_runs_one_active;
CREATE UNIQUE INDEX converge_runs_one_active ON converge_runs (kind, resource)
    WHERE status IN ('queued', 'held', 'running', 'retrying');
DROP INDEX converge_runs_unsettled_event;
CREATE INDEX converge_runs_unsettled_event ON converge_runs (status, event_id DESC)
    WHERE status IN ('queued', 'held', 'running', 'retrying', 'failed', 'cancelled');
-- The dashboard's list of runs waiting for approval.
CREATE INDEX converge_runs_held ON converge_runs (created_at DESC) WHERE status = 'held';
-- A workflow run's unfinished step runs (its waiting status, its cancel).
CREATE INDEX converge_runs_workflow_unfinished ON converge_runs (workflow_run_id)
    WHERE workflow_run_id IS NOT NULL AND status IN ('queued', 'held', 'running', 'retrying');

-- Quarantine is stored on the stream: failed_streak counts the failed runs
-- since the last success (superseded and cancelled runs neither count nor
-- break it); quarantined_at is set when it reaches the kind's
-- quarantine_after, and cleared by a success or a release.
ALTER TABLE converge_streams ADD COLUMN failed_streak integer NOT NULL DEFAULT 0,
    ADD COLUMN quarantined_at timestamptz;
CREATE INDEX converge_streams_quarantined ON converge_streams (quarantined_at) WHERE quarantined_at IS NOT NULL;

-- Whichever path ends a run failed (a finish, a begin that finds the last
-- attempt abandoned), the streak grows in that transaction, under the
-- stream's row lock that every such path holds, and the stream is
-- quarantined when it reaches the run's quarantine_after. A success resets
-- it in the finish's own write of the stream row (store/finish.go).
CREATE FUNCTION converge_runs_failed_streak() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE converge_streams SET failed_streak = failed_streak + 1,
           quarantined_at = CASE WHEN quarantined_at IS NULL AND NEW.quarantine_after > 0
                                      AND failed_streak + 1 >= NEW.quarantine_after
                                 THEN now() ELSE quarantined_at END
     WHERE kind = NEW.kind AND resource = NEW.resource;
    RETURN NULL;
END;
$$;
CREATE TRIGGER converge_runs_failed_streak AFTER UPDATE OF status ON converge_runs
    FOR EACH ROW WHEN (NEW.status = 'failed' AND OLD.status IS DISTINCT FROM 'failed')
    EXECUTE FUNCTION converge_runs_failed_streak();

-- A workflow run is waiting while some step run is held and none is
-- queued, running or retrying; running otherwise (until it fails or ends).
-- The workflow run's row is locked before the step runs are read, so that
-- two step runs changing at once see each other.
CREATE FUNCTION converge_workflow_run_waiting(w uuid) RETURNS void LANGUAGE plpgsql AS $$
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
      FROM converge_runs WHERE workflow_run_id = w AND status IN ('queued', 'held', 'running', 'retrying');
    UPDATE converge_workflow_runs SET status = coalesce(st, 'running')
     WHERE id = w AND status IN ('running', 'waiting') AND status IS DISTINCT FROM coalesce(st, 'running');
END;
$$;
CREATE FUNCTION converge_runs_workflow_waiting() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM converge_workflow_run_waiting(NEW.workflow_run_id);
    RETURN NULL;
END;
$$;
-- Entered only when a step run becomes or stops being held, or active
-- (queued, running, retrying): not for queued -> running or running ->
-- retrying, so beginning an attempt never takes the workflow run's lock.
CREATE TRIGGER converge_runs_workflow_waiting_insert AFTER INSERT ON converge_runs
    FOR EACH ROW WHEN (NEW.workflow_run_id IS NOT NULL)
    EXECUTE FUNCTION converge_runs_workflow_waiting();
CREATE TRIGGER converge_runs_workflow_waiting_update AFTER UPDATE OF status ON converge_runs
    FOR EACH ROW WHEN (NEW.workflow_run_id IS NOT NULL AND (
        (OLD.status = 'held') IS DISTINCT FROM (NEW.status = 'held') OR
        (OLD.status IN ('queued', 'running', 'retrying')) IS DISTINCT FROM (NEW.status IN ('queued', 'running', 'retrying'))))
    EXECUTE FUNCTION converge_runs_workflow_waiting();

-- A step keeps whether it waits for approval and its kind's
-- quarantine_after, so that it is accepted with them later without the
-- configuration (as max_attempts and debounce_us).
ALTER TABLE converge_workflow_steps ADD COLUMN approval boolean NOT NULL DEFAULT false,
    ADD COLUMN quarantine_after integer NOT NULL DEFAULT 0;

-- A redriven step puts its failed workflow run back to running (000006),
-- or to waiting when the redrive is held (a quarantined stream).
CREATE OR REPLACE FUNCTION converge_dead_letters_workflow() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w uuid;
BEGIN
    SELECT workflow_run_id INTO w FROM converge_runs WHERE id = NEW.run_id;
    IF w IS NULL THEN
        RETURN NULL;
    END IF;
    IF NEW.status = 'redriven' THEN
        UPDATE converge_workflow_runs SET status = 'running'
         WHERE id = w AND finished_at IS NULL AND status = 'failed';
        PERFORM converge_workflow_run_waiting(w);
    ELSE
        -- The step will never succeed now: the workflow run ends failed,
        -- even when a sibling's redrive had set it running again.
        PERFORM converge_workflow_run_end(w, 'failed');
    END IF;
    RETURN NULL;
END;
$$;
