DROP TRIGGER converge_workflow_runs_status_note ON converge_workflow_runs;
DROP FUNCTION converge_workflow_runs_status_note();
ALTER TABLE converge_workflow_runs DROP COLUMN trace_parent;
ALTER TABLE converge_runs DROP COLUMN trace_link, DROP COLUMN trace_parent;
