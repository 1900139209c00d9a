-- Fills converge_dead_letters with 1,000,000 generated rows for looking at
-- the list queries' plans (docs/dead-letters.md). Run it on a scratch
-- database migrated with `converge migrate up`, never on a real one: it
-- drops the dead letters' foreign keys so that no events or runs are needed.
--
--   psql "$DATABASE_URL" -f scripts/dead-letters-1m.sql
--
-- Shape: 90 days of dead letters; status open 25%, redriven 25%, discarded
-- 35%, superseded 15%; kind build 60%, deploy 35%, test 5%; 20,000
-- resources under app/ (50%), staging/ (30%), prod/ (20%); reason
-- attempts_exhausted 85%, permanent_error 15%; error texts from six
-- families, one of them rare (0.1%).
ALTER TABLE converge_dead_letters DROP CONSTRAINT IF EXISTS converge_dead_letters_event_id_fkey;
ALTER TABLE converge_dead_letters DROP CONSTRAINT IF EXISTS converge_dead_letters_run_id_fkey;
TRUNCATE converge_dead_letters;

CREATE TEMP TABLE gen AS
SELECT g,
       now() - (random() * interval '90 days') AS created_at,
       random() AS r_status, random() AS r_kind, random() AS r_res, random() AS r_reason, random() AS r_err
  FROM generate_series(1, 1000000) AS g;

INSERT INTO converge_dead_letters (id, event_id, run_id, kind, resource, version, reason, attempts,
                                   error, errors, error_text, payload, status, created_at, resolved_at, resolved_by,
                                   superseded_by_version)
SELECT -- a version 7 UUID from created_at, so that ids follow time as they do in production
       encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
              PLACING substring(int8send((extract(epoch FROM created_at) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
              52, 1), 53, 1), 'hex')::uuid,
       gen_random_uuid(), gen_random_uuid(),
       kind, resource, g, reason, attempts,
       jsonb_build_object('class', CASE WHEN reason = 'permanent_error' THEN 'permanent' ELSE 'transient' END, 'message', msg),
       jsonb_build_array(jsonb_build_object('class', 'transient', 'message', msg),
                         jsonb_build_object('class', 'transient', 'message', msg)),
       msg,
       jsonb_build_object('commit', md5(g::text), 'image', resource),
       status, created_at,
       CASE WHEN status <> 'open' THEN created_at + interval '1 hour' END,
       CASE WHEN status IN ('redriven', 'discarded') THEN 'oncall' WHEN status = 'superseded' THEN 'converge' END,
       CASE WHEN status = 'superseded' THEN g + 1 END
  FROM (
    SELECT g, created_at,
           CASE WHEN r_status < 0.25 THEN 'open' WHEN r_status < 0.50 THEN 'redriven'
                WHEN r_status < 0.85 THEN 'discarded' ELSE 'superseded' END AS status,
           CASE WHEN r_kind < 0.60 THEN 'build' WHEN r_kind < 0.95 THEN 'deploy' ELSE 'test' END AS kind,
           CASE WHEN r_res < 0.5 THEN 'app/' WHEN r_res < 0.8 THEN 'staging/' ELSE 'prod/' END
             || 'svc-' || lpad((floor(power(random(), 2) * 20000))::int::text, 5, '0') AS resource,
           CASE WHEN r_reason < 0.85 THEN 'attempts_exhausted' ELSE 'permanent_error' END AS reason,
           CASE WHEN r_reason < 0.85 THEN 10 ELSE 1 END AS attempts,
           CASE WHEN r_err < 0.30 THEN 'http status 503: upstream connect error or disconnect/reset before headers (' || substr(md5(g::text), 1, 8) || ')'
                WHEN r_err < 0.55 THEN 'dial tcp 10.0.' || (g % 250) || '.' || (g % 97) || ':443: connect: connection refused'
                WHEN r_err < 0.75 THEN 'http status 500: internal server error, trace id ' || md5(g::text)
                WHEN r_err < 0.90 THEN 'context deadline exceeded (timeout after 30s)'
                WHEN r_err < 0.999 THEN 'exit status 2: manifest invalid: field ' || substr(md5(g::text), 1, 6) || ' is not allowed'
                ELSE 'x509: certificate has expired or is not yet valid: current time is after ' || to_char(created_at, 'YYYY-MM-DD') END AS msg
      FROM gen
  ) AS t;

VACUUM ANALYZE converge_dead_letters;
