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
    ELSE
        PERFORM converge_workflow_run_end(w, 'failed');
    END IF;
    RETURN NULL;
END;
$$;
ALTER TABLE converge_workflow_steps DROP COLUMN quarantine_after, DROP COLUMN approval;
DROP TRIGGER converge_runs_workflow_waiting_update ON converge_runs;
DROP TRIGGER converge_runs_workflow_waiting_insert ON converge_runs;
DROP FUNCTION converge_runs_workflow_waiting();
DROP FUNCTION converge_workflow_run_waiting(uuid);
DROP TRIGGER converge_runs_failed_streak ON converge_runs;
DROP FUNCTION converge_runs_failed_streak();
DROP INDEX converge_streams_quarantined;
ALTER TABLE converge_streams DROP COLUMN quarantined_at, DROP COLUMN failed_streak;
DROP INDEX converge_runs_workflow_unfinished;
DROP INDEX converge_runs_held;
DROP INDEX converge_runs_unsettled_event;
CREATE INDEX converge_runs_unsettled_event ON converge_runs (status, event_id DESC)
    WHERE status IN ('queued', 'running', 'retrying', 'failed', 'cancelled');
DROP INDEX converge_runs_one_active;
CREATE UNIQUE INDEX converge_runs_one_active ON converge_runs (kind, resource)
    WHERE status IN ('queued', 'running', 'retrying');
ALTER TABLE converge_runs DROP CONSTRAINT converge_runs_hold_status;
ALTER TABLE converge_runs DROP COLUMN quarantine_after, DROP COLUMN hold;
-- Held runs cannot be represented before this migration: they fail the
-- restored check, as they should (release or cancel them first).
ALTER TABLE converge_runs DROP CONSTRAINT converge_runs_status_check;
ALTER TABLE converge_runs ADD CONSTRAINT converge_runs_status_check
    CHECK (status IN ('queued', 'running', 'retrying', 'succeeded', 'failed', 'superseded', 'cancelled'));
