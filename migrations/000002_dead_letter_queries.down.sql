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
