-- The trace context each run was created under (SPEC §14): the W3C
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
