ALTER TABLE converge_streams DROP COLUMN IF EXISTS latest_at;
