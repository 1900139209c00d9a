ALTER TABLE converge_runs RESET (fillfactor);

-- As in 000009.
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
      FROM converge_runs WHERE workflow_run_id = w AND status IN ('queued', 'held', 'running', 'retrying');
    UPDATE converge_workflow_runs SET status = coalesce(st, 'running')
     WHERE id = w AND status IN ('running', 'waiting') AND status IS DISTINCT FROM coalesce(st, 'running');
END;
$$;

DROP INDEX converge_runs_superseded_finished;
CREATE INDEX converge_runs_superseded_finished ON converge_runs (finished_at DESC) WHERE status = 'superseded';
DROP INDEX converge_runs_workflow_unfinished;
CREATE INDEX converge_runs_workflow_unfinished ON converge_runs (workflow_run_id)
    WHERE workflow_run_id IS NOT NULL AND status IN ('queued', 'held', 'running', 'retrying');
DROP INDEX converge_runs_held;
CREATE INDEX converge_runs_held ON converge_runs (created_at DESC) WHERE status = 'held';
DROP INDEX converge_runs_unsettled_event;
DROP INDEX converge_runs_unfinished_event;
CREATE INDEX converge_runs_unsettled_event ON converge_runs (status, event_id DESC)
    WHERE status IN ('queued', 'held', 'running', 'retrying', 'failed', 'cancelled');
DROP INDEX converge_runs_one_active;
CREATE UNIQUE INDEX converge_runs_one_active ON converge_runs (kind, resource)
    WHERE status IN ('queued', 'held', 'running', 'retrying');

ALTER TABLE converge_runs DROP COLUMN end_status;
