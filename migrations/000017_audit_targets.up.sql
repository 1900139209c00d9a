-- The audit entries that name a target (GET /v1/audit?target=, the
-- dashboard's stream history: who approved, rejected or cancelled a run,
-- who released a quarantine): targets ?| array[...] through this index.
-- Operator actions are rare writes; the index costs them one GIN entry
-- per target.
CREATE INDEX converge_audit_targets ON converge_audit USING gin (targets);
