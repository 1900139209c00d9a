-- A workflow run with finished_at set never changes again (SPEC §10), and
-- neither does what it shows: each step's run is the one its event had
-- when the workflow run ended. A step's run is otherwise read as its
-- event's latest, so a step's dead letter redriven after its workflow run
-- ended (a cancelled failed run whose dead letter stayed open, or a
-- superseded one's) would show the new run on the final workflow run.
-- final_run is the number of that run, kept when the workflow run ends;
-- NULL while it runs, and for a step never accepted. (The run itself may
-- still end after it: an accepted sibling runs on as a plain event, and
-- its step shows how that run ended.)
ALTER TABLE converge_workflow_steps ADD COLUMN final_run integer;

CREATE FUNCTION converge_workflow_runs_keep_step_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE converge_workflow_steps s
       SET final_run = (SELECT max(r.number) FROM converge_runs r WHERE r.event_id = s.event_id)
     WHERE s.workflow_run_id = NEW.id AND s.state = 'accepted';
    RETURN NEW;
END;
$$;
-- BEFORE the row is final: the steps of a final workflow run cannot change
-- (converge_workflow_steps_final).
CREATE TRIGGER converge_workflow_runs_keep_step_runs BEFORE UPDATE OF finished_at ON converge_workflow_runs
    FOR EACH ROW WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL)
    EXECUTE FUNCTION converge_workflow_runs_keep_step_runs();

-- The workflow runs that ended before this migration: the step's latest
-- run created when the workflow run ended or before (a run created later is
-- a redrive after the end).
ALTER TABLE converge_workflow_steps DISABLE TRIGGER converge_workflow_steps_final;
UPDATE converge_workflow_steps s
   SET final_run = coalesce(
           (SELECT max(r.number) FROM converge_runs r WHERE r.event_id = s.event_id AND r.created_at <= w.finished_at),
           (SELECT max(r.number) FROM converge_runs r WHERE r.event_id = s.event_id))
  FROM converge_workflow_runs w
 WHERE w.id = s.workflow_run_id AND w.finished_at IS NOT NULL AND s.state = 'accepted';
ALTER TABLE converge_workflow_steps ENABLE TRIGGER converge_workflow_steps_final;
