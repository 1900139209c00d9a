DROP TRIGGER IF EXISTS converge_runs_one_shot ON converge_runs;
CREATE TRIGGER converge_runs_one_shot BEFORE UPDATE ON converge_runs
    FOR EACH ROW EXECUTE FUNCTION converge_runs_one_shot();

DROP INDEX IF EXISTS converge_runs_unsettled_event;

ALTER TABLE converge_events ADD COLUMN status text, ADD COLUMN latest_run_id uuid;
UPDATE converge_events e SET status = r.status, latest_run_id = r.id
  FROM (SELECT DISTINCT ON (event_id) event_id, id, status FROM converge_runs ORDER BY event_id, number DESC) r
 WHERE r.event_id = e.id;
UPDATE converge_events SET status = 'queued' WHERE status IS NULL;
ALTER TABLE converge_events ALTER COLUMN status SET NOT NULL;
CREATE INDEX converge_events_status_id ON converge_events (status, id DESC);

-- As in 000001.
CREATE FUNCTION converge_runs_event_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE converge_events SET status = NEW.status, latest_run_id = NEW.id
     WHERE id = NEW.event_id
       AND (latest_run_id IS NULL OR latest_run_id = NEW.id OR latest_run_id < NEW.id)
       AND (status IS DISTINCT FROM NEW.status OR latest_run_id IS DISTINCT FROM NEW.id);
    RETURN NULL;
END;
$$;
CREATE TRIGGER converge_runs_event_status AFTER INSERT OR UPDATE OF status ON converge_runs
    FOR EACH ROW EXECUTE FUNCTION converge_runs_event_status();
