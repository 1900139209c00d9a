-- Leaner writes on the hot path (issue #8).
--
-- An event's status is its latest run's status. It was copied into the
-- event row by a trigger on every status change of a run, which rewrote the
-- event and its five indexes twice per attempt. Readers now take it from the
-- run with the highest number (the unique index (event_id, number) finds it),
-- so the copy, its trigger and latest_run_id (used only by that trigger) go.
DROP TRIGGER converge_runs_event_status ON converge_runs;
DROP FUNCTION converge_runs_event_status();
DROP INDEX converge_events_status_id;
ALTER TABLE converge_events DROP COLUMN status, DROP COLUMN latest_run_id;

-- Listing events by a status that few runs have: walk that status's runs
-- instead of every event. succeeded and superseded, the statuses most runs
-- end in, are found quickly from the events side and are left out, so that
-- a run's last status change adds nothing to this index.
CREATE INDEX converge_runs_unsettled_event ON converge_runs (status, event_id DESC)
    WHERE status IN ('queued', 'running', 'retrying', 'failed', 'cancelled');

-- G6 is enforced as before, but the trigger function is entered only for a
-- run that is already terminal (the WHEN clause is evaluated without it).
DROP TRIGGER converge_runs_one_shot ON converge_runs;
CREATE TRIGGER converge_runs_one_shot BEFORE UPDATE ON converge_runs
    FOR EACH ROW WHEN (OLD.status IN ('succeeded', 'failed', 'superseded', 'cancelled'))
    EXECUTE FUNCTION converge_runs_one_shot();
