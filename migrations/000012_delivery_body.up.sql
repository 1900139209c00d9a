-- A delivery keeps what its rules were evaluated on (SPEC §12), so that
-- the dashboard's delivery page can show what each rule would start for
-- it: body is the parsed body as the rules see it (for a CloudEvent, the
-- event in structured form) as JSON text (text, not jsonb: jsonb refuses
-- the \u0000 escape a JSON body may hold); headers are the request's
-- headers with lower-case names, without credentials (authorization,
-- cookies) and signatures. Rows written before have neither.
ALTER TABLE converge_deliveries ADD COLUMN body text, ADD COLUMN headers jsonb;
