ALTER TABLE converge_workflow_runs DROP COLUMN trace_parent;
ALTER TABLE converge_runs DROP COLUMN trace_link, DROP COLUMN trace_parent;
