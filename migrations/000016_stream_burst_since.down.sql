ALTER TABLE converge_streams DROP COLUMN IF EXISTS burst_since;
