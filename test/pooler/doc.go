// Package pooler tests converge behind a real PgBouncer in transaction
// mode (database.pooler: transaction, SPEC §15), through the real binary:
// migrations over direct_url, events with payloads accepted (replays
// compared as jsonb), runs that succeed with their output, dead letters
// and redrives, River polling (no direct_url) or listening over
// direct_url, timeouts set per transaction. It skips when pgbouncer is not
// installed (scripts/ensure-deps.sh installs it), unless
// TEST_REQUIRE_PGBOUNCER=1.
package pooler
