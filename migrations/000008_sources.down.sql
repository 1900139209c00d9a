DROP TABLE converge_deliveries;
