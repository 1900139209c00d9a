-- Event sources (SPEC §12): one row per delivery a source posted, keyed by
-- the source's own delivery id, so that a redelivery is answered with the
-- first answer instead of being accepted again.
CREATE TABLE converge_deliveries (
    id               uuid        PRIMARY KEY,
    source           text        NOT NULL,
    delivery_id      text        NOT NULL,
    received_at      timestamptz NOT NULL DEFAULT now(),
    status           text        NOT NULL CHECK (status IN ('accepted', 'ignored', 'rejected')),
    matched_rules    integer[]   NOT NULL DEFAULT '{}',
    event_ids        uuid[]      NOT NULL DEFAULT '{}',
    workflow_run_ids uuid[]      NOT NULL DEFAULT '{}',
    -- error is the mapping-failed problem of a rejected delivery.
    error            jsonb,
    -- answer is the first answer's per-rule outcomes:
    -- [{"rule", "outcome", "event_id"?, "workflow_run_id"?}].
    answer           jsonb       NOT NULL DEFAULT '[]',
    UNIQUE (source, delivery_id)
);
CREATE INDEX converge_deliveries_id ON converge_deliveries (id DESC);
CREATE INDEX converge_deliveries_source_id ON converge_deliveries (source, id DESC);
