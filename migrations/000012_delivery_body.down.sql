ALTER TABLE converge_deliveries DROP COLUMN body, DROP COLUMN headers;
