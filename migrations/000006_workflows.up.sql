-- Workflows (SPEC §10): a workflow run walks a DAG of steps, each an event
-- of its own stream.
CREATE TABLE converge_workflow_runs (
    id          uuid        PRIMARY KEY,
    workflow    text        NOT NULL,
    resource    text        NOT NULL,
    version     bigint      NOT NULL CHECK (version > 0),
    payload     jsonb       NOT NULL,
    status      text        NOT NULL CHECK (status IN ('running', 'waiting', 'succeeded', 'failed', 'superseded', 'cancelled')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    UNIQUE (workflow, resource, version),
    -- running and waiting are never final; succeeded, superseded and
    -- cancelled always are; failed is final once finished_at is set.
    CHECK (status NOT IN ('running', 'waiting') OR finished_at IS NULL),
    CHECK (status NOT IN ('succeeded', 'superseded', 'cancelled') OR finished_at IS NOT NULL)
);
CREATE INDEX converge_workflow_runs_id ON converge_workflow_runs (id DESC);
CREATE INDEX converge_workflow_runs_workflow_id ON converge_workflow_runs (workflow, id DESC);
CREATE INDEX converge_workflow_runs_resource_id ON converge_workflow_runs (resource, id DESC);
CREATE INDEX converge_workflow_runs_status_id ON converge_workflow_runs (status, id DESC);

-- One row per step of a workflow run. state is the step's own progress:
-- pending (its needs have not all succeeded), accepted (event_id is its
-- event; the step's status is that event's latest run's), skipped (the
-- workflow run ended first) or superseded (its stream had already
-- accepted the version, so it was never accepted).
CREATE TABLE converge_workflow_steps (
    workflow_run_id uuid   NOT NULL REFERENCES converge_workflow_runs (id),
    name            text   NOT NULL,
    position        integer NOT NULL,
    kind            text   NOT NULL,
    resource        text   NOT NULL,
    needs           text[] NOT NULL DEFAULT '{}',
    state           text   NOT NULL CHECK (state IN ('pending', 'accepted', 'skipped', 'superseded')),
    -- The run policy of the step's kind when the workflow run started, so
    -- that the step is accepted with it later without the configuration.
    max_attempts    integer NOT NULL,
    debounce_us     bigint  NOT NULL DEFAULT 0,
    event_id        uuid   UNIQUE REFERENCES converge_events (id),
    PRIMARY KEY (workflow_run_id, name),
    CHECK ((state = 'accepted') = (event_id IS NOT NULL))
);

ALTER TABLE converge_events ADD COLUMN workflow_run_id uuid REFERENCES converge_workflow_runs (id);
CREATE INDEX converge_events_workflow_run ON converge_events (workflow_run_id) WHERE workflow_run_id IS NOT NULL;
-- A step's runs (its first and every redrive) carry the workflow run too, so
-- that the triggers below are entered only for runs of a workflow step.
ALTER TABLE converge_runs ADD COLUMN workflow_run_id uuid;

-- A workflow run whose finished_at is set never changes again, and neither
-- do its steps (SPEC §10, enforced here as G6 is for runs).
CREATE FUNCTION converge_workflow_runs_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'workflow run % is final (%) and cannot change', OLD.id, OLD.status
        USING ERRCODE = 'CV006';
END;
$$;
CREATE TRIGGER converge_workflow_runs_final BEFORE UPDATE ON converge_workflow_runs
    FOR EACH ROW WHEN (OLD.finished_at IS NOT NULL)
    EXECUTE FUNCTION converge_workflow_runs_final();

CREATE FUNCTION converge_workflow_steps_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM converge_workflow_runs
                WHERE id = OLD.workflow_run_id AND finished_at IS NOT NULL) THEN
        RAISE EXCEPTION 'step % of workflow run % is final and cannot change', OLD.name, OLD.workflow_run_id
            USING ERRCODE = 'CV006';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER converge_workflow_steps_final BEFORE UPDATE ON converge_workflow_steps
    FOR EACH ROW EXECUTE FUNCTION converge_workflow_steps_final();

CREATE FUNCTION converge_workflow_no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'workflow runs and steps are never deleted' USING ERRCODE = 'CV006';
END;
$$;
CREATE TRIGGER converge_workflow_runs_no_delete BEFORE DELETE ON converge_workflow_runs
    FOR EACH ROW EXECUTE FUNCTION converge_workflow_no_delete();
CREATE TRIGGER converge_workflow_steps_no_delete BEFORE DELETE ON converge_workflow_steps
    FOR EACH ROW EXECUTE FUNCTION converge_workflow_no_delete();

-- workflow_run_end makes workflow run w final with status st, skipping its
-- pending steps, unless it is final already.
CREATE FUNCTION converge_workflow_run_end(w uuid, st text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM converge_workflow_runs WHERE id = w AND finished_at IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE converge_workflow_steps SET state = 'skipped' WHERE workflow_run_id = w AND state = 'pending';
    UPDATE converge_workflow_runs SET status = st, finished_at = now() WHERE id = w;
END;
$$;

-- A step's run ending failed, superseded or cancelled moves its workflow run,
-- whichever code path (or process) ended it: failed (resumable while the
-- dead letter is open), superseded or cancelled (final). Successes are
-- handled by the finish transaction, which accepts the next steps.
CREATE FUNCTION converge_runs_workflow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'failed' THEN
        UPDATE converge_workflow_runs SET status = 'failed'
         WHERE id = NEW.workflow_run_id AND finished_at IS NULL AND status IN ('running', 'waiting');
    ELSE
        PERFORM converge_workflow_run_end(NEW.workflow_run_id, NEW.status);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER converge_runs_workflow AFTER UPDATE OF status ON converge_runs
    FOR EACH ROW WHEN (NEW.workflow_run_id IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status
                       AND NEW.status IN ('failed', 'superseded', 'cancelled'))
    EXECUTE FUNCTION converge_runs_workflow();

-- A step's dead letter: redriven puts its failed workflow run back to
-- running; discarded or superseded makes it final.
CREATE FUNCTION converge_dead_letters_workflow() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w uuid;
BEGIN
    SELECT workflow_run_id INTO w FROM converge_runs WHERE id = NEW.run_id;
    IF w IS NULL THEN
        RETURN NULL;
    END IF;
    IF NEW.status = 'redriven' THEN
        UPDATE converge_workflow_runs SET status = 'running'
         WHERE id = w AND finished_at IS NULL AND status = 'failed';
    ELSE
        -- The step will never succeed now: the workflow run ends failed,
        -- even when a sibling's redrive had set it running again.
        PERFORM converge_workflow_run_end(w, 'failed');
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER converge_dead_letters_workflow AFTER UPDATE OF status ON converge_dead_letters
    FOR EACH ROW WHEN (OLD.status = 'open' AND NEW.status IN ('redriven', 'discarded', 'superseded'))
    EXECUTE FUNCTION converge_dead_letters_workflow();
