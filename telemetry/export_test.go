package telemetry

// ScrapeSQLForTest is the scrape query on today's schema (migration 000007:
// the dead letter counts), for EXPLAIN.
func ScrapeSQLForTest() string { return scrapeSQL(dbSchema{deadLetterCounts: true}) }
