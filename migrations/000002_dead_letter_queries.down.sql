-- The pg_trgm extension is left installed: other objects may use it.
DROP INDEX IF EXISTS converge_dead_letters_error_trgm;
DROP INDEX IF EXISTS converge_dead_letters_discarded;
DROP INDEX IF EXISTS converge_dead_letters_list_resource;
DROP INDEX IF EXISTS converge_dead_letters_list_reason;
DROP INDEX IF EXISTS converge_dead_letters_list_kind;
DROP INDEX IF EXISTS converge_dead_letters_list;

CREATE INDEX converge_dead_letters_status_id ON converge_dead_letters (status, id DESC);
CREATE INDEX converge_dead_letters_status_kind_id ON converge_dead_letters (status, kind, id DESC);
CREATE INDEX converge_dead_letters_status_reason_id ON converge_dead_letters (status, reason, id DESC);
CREATE INDEX converge_dead_letters_status_resource ON converge_dead_letters (status, resource text_pattern_ops, id DESC);

CREATE OR REPLACE FUNCTION converge_runs_dead_letter() RETURNS trigger LANGUAGE plpgsql AS $$
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
