DROP TRIGGER converge_workflow_runs_status_note_insert ON converge_workflow_runs;
DROP TRIGGER converge_workflow_runs_status_note ON converge_workflow_runs;
CREATE OR REPLACE FUNCTION converge_workflow_runs_status_note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('converge.workflow_statuses',
        coalesce(current_setting('converge.workflow_statuses', true), '') || NEW.workflow || ' ' || NEW.status || E'\n', true);
    RETURN NULL;
END;
$$;
CREATE TRIGGER converge_workflow_runs_status_note AFTER UPDATE OF status ON converge_workflow_runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                       AND NEW.status IN ('succeeded', 'failed', 'superseded', 'cancelled'))
    EXECUTE FUNCTION converge_workflow_runs_status_note();
