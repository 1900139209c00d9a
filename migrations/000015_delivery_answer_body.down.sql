ALTER TABLE converge_deliveries DROP COLUMN answer_body;
