package telemetry

// ScrapeSQLForTest is the scrape query on today's schema (migration 000014:
// held runs, quarantines, the dead letter counts and the run counts), for
// EXPLAIN.
func ScrapeSQLForTest() string {
	return scrapeSQL(dbSchema{quarantine: true, held: true, deadLetterCounts: true, runCounts: true})
}
