-- A workflow run whose steps have all come to rest while one of them is
-- failed is failed (SPEC §10: a step run that ends failed makes its workflow
-- run failed), also when a sibling's redrive had set it running: two steps
-- failed, one is redriven (running again, SPEC §10) and succeeds, and the
-- other's dead letter is still open. Before, such a workflow run stayed
-- running with nothing queued, running or held.
--
-- converge_workflow_run_waiting (000013) is entered whenever a step run
-- becomes or stops being held or active; when none of its workflow run's
-- step runs is unfinished any more, the run is now failed if the latest run
-- of an accepted step is, and running as before otherwise (a step
-- succeeding is followed, in its transaction, by workflowAdvance, which
-- accepts the next steps or makes the workflow run succeed).
CREATE OR REPLACE FUNCTION converge_workflow_run_waiting(w uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    st text;
BEGIN
    PERFORM 1 FROM converge_workflow_runs
     WHERE id = w AND finished_at IS NULL AND status IN ('running', 'waiting') FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- st is NULL when no step run is unfinished (an aggregate over no rows
    -- still gives a row, with bool_or NULL).
    SELECT CASE WHEN count(*) = 0 THEN NULL
                WHEN bool_or(status = 'held') AND NOT bool_or(status IN ('queued', 'running', 'retrying'))
                THEN 'waiting' ELSE 'running' END INTO st
      FROM converge_runs WHERE workflow_run_id = w AND finished_at IS NULL;
    IF st IS NULL AND EXISTS (
        SELECT 1 FROM converge_workflow_steps s
          JOIN LATERAL (SELECT r.status FROM converge_runs r WHERE r.event_id = s.event_id
                         ORDER BY r.number DESC LIMIT 1) lr ON true
         WHERE s.workflow_run_id = w AND s.state = 'accepted' AND lr.status = 'failed') THEN
        st := 'failed';
    END IF;
    UPDATE converge_workflow_runs SET status = coalesce(st, 'running')
     WHERE id = w AND status IN ('running', 'waiting') AND status IS DISTINCT FROM coalesce(st, 'running');
END;
$$;
