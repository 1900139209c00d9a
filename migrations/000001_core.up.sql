-- converge_uuid_v7 returns a time-ordered UUID (RFC 9562 version 7), for rows
-- the database creates itself.
CREATE FUNCTION converge_uuid_v7() RETURNS uuid LANGUAGE sql VOLATILE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1), 'hex')::uuid;
$$;

-- Streams: one row per (kind, resource). The row is the lock that serializes
-- acceptance, and its lease columns hold "one attempt in flight" (G3).
CREATE TABLE converge_streams (
    kind             text        NOT NULL,
    resource         text        NOT NULL,
    latest_version   bigint      NOT NULL,
    applied_version  bigint,
    applied_at       timestamptz,
    lease_run_id     uuid,
    lease_attempt    integer,
    lease_expires_at timestamptz,
    PRIMARY KEY (kind, resource)
);

CREATE TABLE converge_events (
    id            uuid        PRIMARY KEY,
    kind          text        NOT NULL,
    resource      text        NOT NULL,
    version       bigint      NOT NULL CHECK (version > 0),
    payload       jsonb       NOT NULL,
    status        text        NOT NULL,
    latest_run_id uuid,
    received_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (kind, resource, version)
);
CREATE INDEX converge_events_kind_id ON converge_events (kind, id DESC);
CREATE INDEX converge_events_stream_id ON converge_events (kind, resource, id DESC);
CREATE INDEX converge_events_resource_id ON converge_events (resource, id DESC);
CREATE INDEX converge_events_status_id ON converge_events (status, id DESC);

CREATE TABLE converge_runs (
    id              uuid        PRIMARY KEY,
    event_id        uuid        NOT NULL REFERENCES converge_events (id),
    number          integer     NOT NULL,
    kind            text        NOT NULL,
    resource        text        NOT NULL,
    version         bigint      NOT NULL,
    status          text        NOT NULL CHECK (status IN ('queued', 'running', 'retrying', 'succeeded', 'failed', 'superseded', 'cancelled')),
    attempts        integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL,
    next_attempt_at timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz,
    error           jsonb,
    output          jsonb,
    job_id          bigint,
    UNIQUE (event_id, number),
    CHECK ((status IN ('succeeded', 'failed', 'superseded', 'cancelled')) = (finished_at IS NOT NULL))
);
-- At most one unfinished run per stream: accepting a newer version ends the
-- older ones in the same transaction.
CREATE UNIQUE INDEX converge_runs_one_active ON converge_runs (kind, resource)
    WHERE status IN ('queued', 'running', 'retrying');
CREATE INDEX converge_runs_stream ON converge_runs (kind, resource, created_at DESC);

CREATE TABLE converge_attempts (
    run_id      uuid        NOT NULL REFERENCES converge_runs (id),
    number      integer     NOT NULL,
    outcome     text CHECK (outcome IN ('succeeded', 'transient_error', 'permanent_error', 'cancelled', 'abandoned')),
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    duration_ms bigint,
    error       jsonb,
    PRIMARY KEY (run_id, number)
);

-- G6: a terminal run never changes its status, finished_at, error or output.
CREATE FUNCTION converge_runs_one_shot() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status IN ('succeeded', 'failed', 'superseded', 'cancelled') AND (
        NEW.status IS DISTINCT FROM OLD.status OR
        NEW.finished_at IS DISTINCT FROM OLD.finished_at OR
        NEW.error IS DISTINCT FROM OLD.error OR
        NEW.output IS DISTINCT FROM OLD.output) THEN
        RAISE EXCEPTION 'run % is % and cannot change', OLD.id, OLD.status
            USING ERRCODE = 'CV006';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER converge_runs_one_shot BEFORE UPDATE ON converge_runs
    FOR EACH ROW EXECUTE FUNCTION converge_runs_one_shot();
CREATE FUNCTION converge_runs_no_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'runs are never deleted' USING ERRCODE = 'CV006';
END;
$$;
CREATE TRIGGER converge_runs_no_delete BEFORE DELETE ON converge_runs
    FOR EACH ROW EXECUTE FUNCTION converge_runs_no_delete();

-- An event's status is the status of its latest run.
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

CREATE TABLE converge_dead_letters (
    id                    uuid        PRIMARY KEY,
    event_id              uuid        NOT NULL REFERENCES converge_events (id),
    run_id                uuid        NOT NULL UNIQUE REFERENCES converge_runs (id),
    kind                  text        NOT NULL,
    resource              text        NOT NULL,
    version               bigint      NOT NULL,
    reason                text        NOT NULL CHECK (reason IN ('permanent_error', 'attempts_exhausted')),
    attempts              integer     NOT NULL,
    error                 jsonb,
    errors                jsonb       NOT NULL DEFAULT '[]',
    error_text            text        NOT NULL DEFAULT '',
    payload               jsonb       NOT NULL,
    status                text        NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'redriven', 'discarded', 'superseded')),
    created_at            timestamptz NOT NULL DEFAULT now(),
    resolved_at           timestamptz,
    resolved_by           text,
    superseded_by_version bigint
);
CREATE INDEX converge_dead_letters_status_id ON converge_dead_letters (status, id DESC);
CREATE INDEX converge_dead_letters_status_kind_id ON converge_dead_letters (status, kind, id DESC);
CREATE INDEX converge_dead_letters_status_reason_id ON converge_dead_letters (status, reason, id DESC);
CREATE INDEX converge_dead_letters_status_resource ON converge_dead_letters (status, resource text_pattern_ops, id DESC);
CREATE INDEX converge_dead_letters_stream ON converge_dead_letters (kind, resource, version) WHERE status = 'open';

-- A dead letter exists exactly when a run ends failed, whichever code path
-- (or process) ended it: the database writes it in the same statement.
CREATE FUNCTION converge_runs_dead_letter() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO converge_dead_letters (id, event_id, run_id, kind, resource, version, reason, attempts,
                                       error, errors, error_text, payload)
    SELECT converge_uuid_v7(), NEW.event_id, NEW.id, NEW.kind, NEW.resource, NEW.version,
           CASE WHEN NEW.error->>'class' = 'permanent' THEN 'permanent_error' ELSE 'attempts_exhausted' END,
           NEW.attempts, NEW.error,
           coalesce((SELECT jsonb_agg(a.error ORDER BY a.number) FROM converge_attempts a
                      WHERE a.run_id = NEW.id AND a.error IS NOT NULL), '[]'::jsonb),
           coalesce(NEW.error->>'message', ''), e.payload
      FROM converge_events e WHERE e.id = NEW.event_id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER converge_runs_dead_letter AFTER UPDATE OF status ON converge_runs
    FOR EACH ROW WHEN (NEW.status = 'failed' AND OLD.status IS DISTINCT FROM 'failed')
    EXECUTE FUNCTION converge_runs_dead_letter();

CREATE TABLE converge_tokens (
    id           uuid        PRIMARY KEY,
    name         text        NOT NULL UNIQUE,
    role         text        NOT NULL CHECK (role IN ('submitter', 'viewer', 'operator')),
    hash         bytea       NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);

CREATE TABLE converge_audit (
    id         uuid        PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    actor      text        NOT NULL,
    role       text        NOT NULL,
    action     text        NOT NULL,
    targets    jsonb       NOT NULL DEFAULT '[]',
    reason     text,
    request_id text,
    detail     jsonb
);
