-- NOT VALID: events of workflow runs pruned meanwhile keep their ids.
ALTER TABLE converge_events ADD CONSTRAINT converge_events_workflow_run_id_fkey
    FOREIGN KEY (workflow_run_id) REFERENCES converge_workflow_runs (id) NOT VALID;
