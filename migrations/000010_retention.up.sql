-- Retention (SPEC §13). Pruning deletes whole terminal rows and changes
-- none (G6). Until now nothing could delete runs, workflow runs or steps;
-- now the prune path can, and only it: its transaction sets
-- converge.pruning to 'on' (SET LOCAL, so it ends with the transaction),
-- and even then the database refuses to delete a run that is not terminal
-- (queued, held, running, retrying) or a workflow run without finished_at.
-- Events, attempts, deliveries and audit entries, which nothing deleted
-- before either, get the same guard.

-- converge_pruning reports whether this transaction is a pruning pass's.
CREATE FUNCTION converge_pruning() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT coalesce(current_setting('converge.pruning', true), '') = 'on';
$$;

-- Runs: only a terminal run, only on the prune path.
CREATE OR REPLACE FUNCTION converge_runs_no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF converge_pruning() AND OLD.status IN ('succeeded', 'failed', 'superseded', 'cancelled') THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'run % is % and cannot be deleted (only retention deletes terminal runs)', OLD.id, OLD.status
        USING ERRCODE = 'CV006';
END;
$$;

-- Workflow runs: only a final one (finished_at set), only on the prune
-- path; its steps likewise, while their workflow run is final.
CREATE FUNCTION converge_workflow_runs_no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF converge_pruning() AND OLD.finished_at IS NOT NULL THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'workflow run % is % and cannot be deleted (only retention deletes final workflow runs)', OLD.id, OLD.status
        USING ERRCODE = 'CV006';
END;
$$;
CREATE FUNCTION converge_workflow_steps_no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF converge_pruning() AND EXISTS (SELECT 1 FROM converge_workflow_runs
                                       WHERE id = OLD.workflow_run_id AND finished_at IS NOT NULL) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'step % of workflow run % cannot be deleted (only retention deletes final workflow runs)', OLD.name, OLD.workflow_run_id
        USING ERRCODE = 'CV006';
END;
$$;
DROP TRIGGER converge_workflow_runs_no_delete ON converge_workflow_runs;
DROP TRIGGER converge_workflow_steps_no_delete ON converge_workflow_steps;
DROP FUNCTION converge_workflow_no_delete();
CREATE TRIGGER converge_workflow_runs_no_delete BEFORE DELETE ON converge_workflow_runs
    FOR EACH ROW EXECUTE FUNCTION converge_workflow_runs_no_delete();
CREATE TRIGGER converge_workflow_steps_no_delete BEFORE DELETE ON converge_workflow_steps
    FOR EACH ROW EXECUTE FUNCTION converge_workflow_steps_no_delete();

-- Events, deliveries and audit entries: only on the prune path (an event
-- still has its runs until they are deleted, and the foreign keys keep it
-- while any remains).
CREATE FUNCTION converge_prune_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF converge_pruning() THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% rows are deleted only by retention', TG_TABLE_NAME USING ERRCODE = 'CV006';
END;
$$;
CREATE TRIGGER converge_events_no_delete BEFORE DELETE ON converge_events
    FOR EACH ROW EXECUTE FUNCTION converge_prune_only();
CREATE TRIGGER converge_deliveries_no_delete BEFORE DELETE ON converge_deliveries
    FOR EACH ROW EXECUTE FUNCTION converge_prune_only();
CREATE TRIGGER converge_audit_no_delete BEFORE DELETE ON converge_audit
    FOR EACH ROW EXECUTE FUNCTION converge_prune_only();

-- Attempts: a finished attempt only on the prune path; an attempt still in
-- flight (outcome NULL) never there (its call may still end and be
-- recorded), but it may be taken back by the finish of a worker that is
-- shutting down (store/finish.go), as before.
CREATE FUNCTION converge_attempts_no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF converge_pruning() = (OLD.outcome IS NOT NULL) THEN
        RETURN OLD;
    END IF;
    IF OLD.outcome IS NULL THEN
        RAISE EXCEPTION 'attempt % of run % is in flight and cannot be pruned', OLD.number, OLD.run_id
            USING ERRCODE = 'CV006';
    END IF;
    RAISE EXCEPTION 'attempt % of run % is finished and cannot be deleted (only retention deletes it)', OLD.number, OLD.run_id
        USING ERRCODE = 'CV006';
END;
$$;
CREATE TRIGGER converge_attempts_no_delete BEFORE DELETE ON converge_attempts
    FOR EACH ROW EXECUTE FUNCTION converge_attempts_no_delete();

-- Dead letters: the prune path never deletes an open one (an operator's
-- purge deletes discarded ones, as before).
CREATE FUNCTION converge_dead_letters_no_prune_open() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF converge_pruning() AND OLD.status = 'open' THEN
        RAISE EXCEPTION 'dead letter % is open and cannot be pruned', OLD.id USING ERRCODE = 'CV006';
    END IF;
    RETURN OLD;
END;
$$;
CREATE TRIGGER converge_dead_letters_no_prune_open BEFORE DELETE ON converge_dead_letters
    FOR EACH ROW EXECUTE FUNCTION converge_dead_letters_no_prune_open();

-- What a pass walks: an event's dead letters, resolved dead letters by
-- resolution, final workflow runs by finish.
CREATE INDEX converge_dead_letters_event ON converge_dead_letters (event_id);
CREATE INDEX converge_dead_letters_resolved ON converge_dead_letters (resolved_at) WHERE status <> 'open';
CREATE INDEX converge_workflow_runs_finished ON converge_workflow_runs (finished_at) WHERE finished_at IS NOT NULL;

-- The lease that keeps pruning passes (the periodic job, converge prune)
-- from overlapping: one row, held by a pass until it ends or expires_at
-- passes (a pass renews it after every batch).
CREATE TABLE converge_prune_lease (
    id         boolean     PRIMARY KEY DEFAULT true CHECK (id),
    holder     uuid,
    expires_at timestamptz
);
INSERT INTO converge_prune_lease (id) VALUES (true);
