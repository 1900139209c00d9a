-- Dashboard sessions. The cookie holds a random secret; only its SHA-256
-- hash is stored. A session made with a stored token ends when that token is
-- revoked (token_id is NULL for the admin token from the environment).
CREATE TABLE converge_sessions (
    id_hash      bytea       PRIMARY KEY,
    actor        text        NOT NULL,
    role         text        NOT NULL CHECK (role IN ('submitter', 'viewer', 'operator')),
    token_id     uuid        REFERENCES converge_tokens (id) ON DELETE CASCADE,
    csrf_token   text        NOT NULL,
    flash        jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX converge_sessions_expires_at ON converge_sessions (expires_at);

-- The dashboard's overview lists the recent supersessions.
CREATE INDEX converge_runs_superseded_finished ON converge_runs (finished_at DESC) WHERE status = 'superseded';
