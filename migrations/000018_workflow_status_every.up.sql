-- converge_workflow_runs_total{workflow,status} (SPEC §14) counts workflow
-- runs entering every status, running and waiting included: a workflow run
-- that reaches an approval (running -> waiting), is approved (waiting ->
-- running) or has a failed step redriven (failed -> running) enters a status
-- as much as one that ends. 000011 noted only the final statuses, and the
-- API counted a start's first status itself.
--
-- Each note is now "id old new workflow" (old empty for an insert), so that
-- a transaction that moves one workflow run twice (inserted running, then
-- waiting because its root step is held) counts only where it left it,
-- compared with where it found it (store's workflowStatusesTx).
CREATE OR REPLACE FUNCTION converge_workflow_runs_status_note() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    old_status text := '';
BEGIN
    IF TG_OP = 'UPDATE' THEN
        old_status := OLD.status;
    END IF;
    PERFORM set_config('converge.workflow_statuses',
        coalesce(current_setting('converge.workflow_statuses', true), '')
            || NEW.id || ' ' || old_status || ' ' || NEW.status || ' ' || NEW.workflow || E'\n', true);
    RETURN NULL;
END;
$$;
DROP TRIGGER converge_workflow_runs_status_note ON converge_workflow_runs;
CREATE TRIGGER converge_workflow_runs_status_note AFTER UPDATE OF status ON converge_workflow_runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION converge_workflow_runs_status_note();
CREATE TRIGGER converge_workflow_runs_status_note_insert AFTER INSERT ON converge_workflow_runs
    FOR EACH ROW EXECUTE FUNCTION converge_workflow_runs_status_note();
