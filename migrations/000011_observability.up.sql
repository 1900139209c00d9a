-- Tracing (SPEC §14). The trace context each run was created under (SPEC §14): the W3C
-- traceparent of the accept's span for run 1, of the redrive request's for
-- a redriven run, of the workflow run's start for a workflow step. A
-- worker's attempt spans are children of it, whichever process runs them
-- and however much later, so a run's attempts join the trace of its
-- creation. trace_link is the trace context a redriven run links to (the
-- failed run's). NULL when tracing was off.
ALTER TABLE converge_runs ADD COLUMN trace_parent text, ADD COLUMN trace_link text;
-- A workflow run's own context, given to every step it accepts (the roots
-- at its start, the later steps when their needs succeed), so that one
-- workflow run is one trace.
ALTER TABLE converge_workflow_runs ADD COLUMN trace_parent text;

-- converge_workflow_runs_total{workflow,status} (SPEC §14) counts workflow
-- runs entering succeeded, failed, superseded or cancelled. Those changes
-- are made by triggers as well as by code, in many transactions; this
-- trigger notes each in a transaction-local setting
-- (converge.workflow_statuses, lines of "workflow status"), which the
-- transactions that can make them read before committing (store's
-- workflowStatusesSQL) to count them once, after the commit. A transaction
-- that never reads it loses nothing but the count.
CREATE FUNCTION converge_workflow_runs_status_note() RETURNS trigger LANGUAGE plpgsql AS $$
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
