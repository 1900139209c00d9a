package telemetry

// ScrapeSQLForTest is the scrape query on today's schema, for EXPLAIN.
func ScrapeSQLForTest() string { return scrapeSQL(dbSchema{}) }
