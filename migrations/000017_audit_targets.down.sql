DROP INDEX IF EXISTS converge_audit_targets;
