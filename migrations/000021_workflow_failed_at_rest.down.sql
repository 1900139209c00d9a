-- converge_workflow_run_waiting as 000013 left it.
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
