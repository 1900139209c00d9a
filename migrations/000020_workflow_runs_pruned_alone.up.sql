-- Retention (SPEC §13): a final workflow run is pruned retention.workflow_runs
-- after it ended, and an event is kept while a kept workflow run refers to
-- it, not the other way round: a workflow run whose step events are kept
-- (its streams' latest accepted or applied versions) goes alone, and those
-- events keep its id in workflow_run_id, the record of where they came
-- from (as a dead letter keeps its run's id). An event is never changed
-- (G6), so the reference stays without a foreign key; an event of a pruned
-- workflow run is pruned as any plain event once it may be.
ALTER TABLE converge_events DROP CONSTRAINT IF EXISTS converge_events_workflow_run_id_fkey;
