DROP TABLE converge_prune_lease;
DROP INDEX converge_workflow_runs_finished;
DROP INDEX converge_dead_letters_resolved;
DROP INDEX converge_dead_letters_event;
DROP TRIGGER converge_dead_letters_no_prune_open ON converge_dead_letters;
DROP FUNCTION converge_dead_letters_no_prune_open();
DROP TRIGGER converge_attempts_no_delete ON converge_attempts;
DROP FUNCTION converge_attempts_no_delete();
DROP TRIGGER converge_audit_no_delete ON converge_audit;
DROP TRIGGER converge_deliveries_no_delete ON converge_deliveries;
DROP TRIGGER converge_events_no_delete ON converge_events;
DROP FUNCTION converge_prune_only();
DROP TRIGGER converge_workflow_steps_no_delete ON converge_workflow_steps;
DROP TRIGGER converge_workflow_runs_no_delete ON converge_workflow_runs;
DROP FUNCTION converge_workflow_steps_no_delete();
DROP FUNCTION converge_workflow_runs_no_delete();
CREATE FUNCTION converge_workflow_no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'workflow runs and steps are never deleted' USING ERRCODE = 'CV006';
END;
$$;
CREATE TRIGGER converge_workflow_runs_no_delete BEFORE DELETE ON converge_workflow_runs
    FOR EACH ROW EXECUTE FUNCTION converge_workflow_no_delete();
CREATE TRIGGER converge_workflow_steps_no_delete BEFORE DELETE ON converge_workflow_steps
    FOR EACH ROW EXECUTE FUNCTION converge_workflow_no_delete();
CREATE OR REPLACE FUNCTION converge_runs_no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'runs are never deleted' USING ERRCODE = 'CV006';
END;
$$;
DROP FUNCTION converge_pruning();
