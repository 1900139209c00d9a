-- Dead-letter lists are ordered newest first by (created_at, id) and always
-- filter on status (open by default). Each index below leads with status,
-- ends with (created_at DESC, id DESC), and so serves one filter in index
-- order, with since/until as a range on created_at and the page's cursor as
-- a keyset bound; other filters are checked on the rows walked. See
-- docs/dead-letters.md for the plans at 1,000,000 rows.
DROP INDEX IF EXISTS converge_dead_letters_status_id;
DROP INDEX IF EXISTS converge_dead_letters_status_kind_id;
DROP INDEX IF EXISTS converge_dead_letters_status_reason_id;
DROP INDEX IF EXISTS converge_dead_letters_status_resource;

CREATE INDEX converge_dead_letters_list ON converge_dead_letters (status, created_at DESC, id DESC);
CREATE INDEX converge_dead_letters_list_kind ON converge_dead_letters (status, kind, created_at DESC, id DESC);
CREATE INDEX converge_dead_letters_list_reason ON converge_dead_letters (status, reason, kind, created_at DESC, id DESC);
-- A resource prefix is a range of this index (text_pattern_ops compares
-- bytes, so a prefix is contiguous whatever the collation).
CREATE INDEX converge_dead_letters_list_resource ON converge_dead_letters (status, resource text_pattern_ops, created_at DESC);
-- Purge walks discarded dead letters by the time they were discarded.
CREATE INDEX converge_dead_letters_discarded ON converge_dead_letters (resolved_at) WHERE status = 'discarded';

-- q (a case-insensitive substring of the error) uses a trigram index when
-- the pg_trgm extension can be had: already installed, or installable by
-- this role (it is a trusted extension since PostgreSQL 13, so the
-- database's owner may create it). Without it the same query runs as a
-- filter on the rows the other conditions select; nothing fails.
DO $$
DECLARE
    ext_schema text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm')
       AND EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm') THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS pg_trgm;
        EXCEPTION WHEN OTHERS THEN
            RAISE NOTICE 'pg_trgm is not available (%); dead-letter search by error text runs without an index', SQLERRM;
        END;
    END IF;
    SELECT n.nspname INTO ext_schema
      FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'pg_trgm';
    IF ext_schema IS NOT NULL THEN
        EXECUTE format('CREATE INDEX converge_dead_letters_error_trgm ON converge_dead_letters USING gin (error_text %I.gin_trgm_ops)', ext_schema);
    END IF;
END;
$$;

-- error_text, what q searches, holds the last error's message on its first
-- line (the dashboard groups failure causes by it) and then every other
-- distinct message of the run's attempts, one per line: a dead letter
-- matches the text of any of its errors.
CREATE OR REPLACE FUNCTION converge_runs_dead_letter() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO converge_dead_letters (id, event_id, run_id, kind, resource, version, reason, attempts,
                                       error, errors, error_text, payload)
    SELECT converge_uuid_v7(), NEW.event_id, NEW.id, NEW.kind, NEW.resource, NEW.version,
           CASE WHEN NEW.error->>'class' = 'permanent' THEN 'permanent_error' ELSE 'attempts_exhausted' END,
           NEW.attempts, NEW.error,
           coalesce(a.errors, '[]'::jsonb),
           concat_ws(E'\n', NEW.error->>'message', a.others),
           e.payload
      FROM converge_events e,
           LATERAL (SELECT jsonb_agg(x.error ORDER BY x.number) AS errors,
                           string_agg(DISTINCT x.error->>'message', E'\n')
                               FILTER (WHERE x.error->>'message' IS DISTINCT FROM NEW.error->>'message') AS others
                      FROM converge_attempts x
                     WHERE x.run_id = NEW.id AND x.error IS NOT NULL) AS a
     WHERE e.id = NEW.event_id;
    RETURN NULL;
END;
$$;
