package telemetry

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultScrapeTimeout bounds the database query of one scrape.
const DefaultScrapeTimeout = 2 * time.Second

// DatabaseCollectorParams are the options of NewDatabaseCollector.
type DatabaseCollectorParams struct {
	// Kinds are the configured kinds: each is exported at zero. Rows of
	// any other kind are added up under "unknown".
	Kinds []string
	// Timeout bounds the query of one scrape; DefaultScrapeTimeout when 0.
	Timeout time.Duration
}

// DatabaseCollector is a prometheus.Collector of the gauges read from the
// database: converge_runs{kind,status} (runs in each status, unfinished and
// terminal), converge_dead_letters_open{kind} and
// converge_streams_quarantined{kind}.
// Every process reports the same values, since they are read from the
// database and not from the process's memory.
//
// Each scrape runs one query, bounded by Timeout. When it fails, the
// collector reports the values of the last scrape that succeeded (zeros
// before the first) and counts the failure in converge_scrape_errors_total,
// so a database hiccup neither empties the dashboard nor fires absent()
// alerts; alert on the error counter to notice stale values.
type DatabaseCollector struct {
	pool    *pgxpool.Pool
	kinds   labelSet
	timeout time.Duration

	runsDesc, deadDesc, quarantinedDesc *prometheus.Desc
	errors                              prometheus.Counter

	mu sync.Mutex // serializes scrapes and guards the fields below
	// schema is what the scrape query may use; nil until detected (once,
	// by the first scrape that reaches the database).
	schema *dbSchema
	last   dbValues
}

// dbSchema is what the database's schema has of the parts that later
// migrations add.
type dbSchema struct {
	// quarantine: converge_streams has quarantined_at (issue 16).
	quarantine bool
	// held: a run may be held (its status check allows 'held', §11).
	held bool
	// deadLetterCounts: converge_dead_letter_counts exists (migration
	// 000007), the open dead letters by kind kept by triggers.
	deadLetterCounts bool
	// runCounts: converge_run_counts exists (migration 000014), the
	// terminal runs by kind and status kept by triggers, in rows of
	// deltas.
	runCounts bool
}

// detectSchemaSQL reads dbSchema.
const detectSchemaSQL = `
SELECT EXISTS (SELECT 1 FROM pg_attribute
                WHERE attrelid = to_regclass('converge_streams')
                  AND attname = 'quarantined_at' AND NOT attisdropped),
       EXISTS (SELECT 1 FROM pg_constraint
                WHERE conrelid = to_regclass('converge_runs') AND contype = 'c'
                  AND pg_get_constraintdef(oid) LIKE '%''held''%'),
       to_regclass('converge_dead_letter_counts') IS NOT NULL,
       to_regclass('converge_run_counts') IS NOT NULL`

// dbValues are the gauges of one scrape, by folded kind.
type dbValues struct {
	runs        map[[2]string]float64 // {kind, status}
	deadLetters map[string]float64
	quarantined map[string]float64
}

// NewDatabaseCollector returns the collector of the database gauges on
// pool. Register it once per process (prometheus.Registerer.MustRegister).
func NewDatabaseCollector(pool *pgxpool.Pool, p DatabaseCollectorParams) *DatabaseCollector {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultScrapeTimeout
	}
	return &DatabaseCollector{
		pool:    pool,
		kinds:   newLabelSet(UnknownLabel, p.Kinds),
		timeout: timeout,
		runsDesc: prometheus.NewDesc("converge_runs",
			"Runs in the database, by kind and status (queued, held, running, retrying and the terminal succeeded, failed, superseded, cancelled); the same from every process.",
			[]string{"kind", "status"}, nil),
		deadDesc: prometheus.NewDesc("converge_dead_letters_open",
			"Open dead letters in the database, by kind; the same from every process.",
			[]string{"kind"}, nil),
		quarantinedDesc: prometheus.NewDesc("converge_streams_quarantined",
			"Quarantined streams in the database, by kind; the same from every process.",
			[]string{"kind"}, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "converge_scrape_errors_total",
			Help: "Scrapes whose database query failed; the database gauges then repeat the last values read.",
		}),
	}
}

// Describe implements prometheus.Collector.
func (c *DatabaseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.runsDesc
	ch <- c.deadDesc
	ch <- c.quarantinedDesc
	c.errors.Describe(ch)
}

// Collect implements prometheus.Collector: it runs the scrape query and
// sends every series, at zero for each configured kind and status without
// rows.
func (c *DatabaseCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if v, err := c.read(ctx); err != nil {
		c.errors.Inc()
	} else {
		c.last = v
	}
	v := c.last
	for _, k := range c.kindValues(v) {
		for _, s := range RunStatuses {
			ch <- prometheus.MustNewConstMetric(c.runsDesc, prometheus.GaugeValue, v.runs[[2]string{k, s}], k, s)
		}
		ch <- prometheus.MustNewConstMetric(c.deadDesc, prometheus.GaugeValue, v.deadLetters[k], k)
		ch <- prometheus.MustNewConstMetric(c.quarantinedDesc, prometheus.GaugeValue, v.quarantined[k], k)
	}
	c.errors.Collect(ch)
}

// kindValues are the configured kinds, and "unknown" when v has rows of
// kinds not configured.
func (c *DatabaseCollector) kindValues(v dbValues) []string {
	ks := c.kinds.values
	_, a := v.deadLetters[UnknownLabel]
	_, b := v.quarantined[UnknownLabel]
	unknownRun := false
	for _, s := range RunStatuses {
		if _, ok := v.runs[[2]string{UnknownLabel, s}]; ok {
			unknownRun = true
		}
	}
	if (a || b || unknownRun) && !slices.Contains(ks, UnknownLabel) {
		ks = append(ks[:len(ks):len(ks)], UnknownLabel)
	}
	return ks
}

// scrapeSQL is the one query of a scrape: unfinished runs by kind and
// status, terminal runs by kind and status (when the counts exist), open
// dead letters by kind, and (when the column exists) quarantined streams
// by kind.
//
// The run statuses listed are the predicate of the partial index
// converge_runs_one_active up to migration 000012 (queued, running,
// retrying, and held once runs can be held), and finished_at IS NULL is
// its predicate from 000013 on (the same runs, by a check of 000001), so
// on every schema the planner reads the unfinished runs, at most one per
// stream, from that index and never walks the history of finished ones.
// Terminal runs are read from converge_run_counts (migration 000014): rows
// of deltas, summed here, that statement triggers on converge_runs insert
// and the worker processes' compaction (store.RunCountsCompact, every
// 30 s) folds into one per kind and terminal status; before that
// migration the terminal statuses are not read and export 0, since
// counting them would walk the whole history on every scrape. Open dead letters are read from
// converge_dead_letter_counts, one row per kind kept by triggers on
// converge_dead_letters (migration 000007); before that migration they are
// counted from the rows, which costs a visit of every open one. See docs/observability.md and docs/benchmarks.md for the cost.
func scrapeSQL(s dbSchema) string {
	statuses := `'queued', 'running', 'retrying'`
	if s.held {
		statuses = `'queued', 'held', 'running', 'retrying'`
	}
	q := `
SELECT 'runs' AS gauge, kind, status, count(*)
  FROM converge_runs WHERE finished_at IS NULL AND status IN (` + statuses + `)
 GROUP BY kind, status
UNION ALL
`
	if s.runCounts {
		q += `SELECT 'runs', kind, status, sum(n)::bigint
  FROM converge_run_counts
 GROUP BY kind, status HAVING sum(n) <> 0
UNION ALL
`
	}
	if s.deadLetterCounts {
		q += `SELECT 'dead_letters', kind, '', open
  FROM converge_dead_letter_counts WHERE open <> 0`
	} else {
		q += `SELECT 'dead_letters', kind, '', count(*)
  FROM converge_dead_letters WHERE status = 'open'
 GROUP BY kind`
	}
	if s.quarantine {
		q += `
UNION ALL
SELECT 'quarantined', kind, '', count(*)
  FROM converge_streams WHERE quarantined_at IS NOT NULL
 GROUP BY kind`
	}
	return q
}

// read runs the scrape query, after detecting, the first time, what the
// schema has (dbSchema).
func (c *DatabaseCollector) read(ctx context.Context) (dbValues, error) {
	if c.schema == nil {
		var sc dbSchema
		if err := c.pool.QueryRow(ctx, detectSchemaSQL).Scan(&sc.quarantine, &sc.held, &sc.deadLetterCounts, &sc.runCounts); err != nil {
			return dbValues{}, fmt.Errorf("detect the schema of the database gauges: %w", err)
		}
		c.schema = &sc
	}
	rows, err := c.pool.Query(ctx, scrapeSQL(*c.schema))
	if err != nil {
		return dbValues{}, fmt.Errorf("scrape database gauges: %w", err)
	}
	defer rows.Close()
	v := dbValues{runs: map[[2]string]float64{}, deadLetters: map[string]float64{}, quarantined: map[string]float64{}}
	for rows.Next() {
		var gauge, kind, status string
		var n int64
		if err := rows.Scan(&gauge, &kind, &status, &n); err != nil {
			return dbValues{}, fmt.Errorf("scrape database gauges: %w", err)
		}
		k := c.kinds.fold(kind)
		switch gauge {
		case "runs":
			v.runs[[2]string{k, status}] += float64(n)
		case "dead_letters":
			v.deadLetters[k] += float64(n)
		case "quarantined":
			v.quarantined[k] += float64(n)
		}
	}
	if err := rows.Err(); err != nil {
		return dbValues{}, fmt.Errorf("scrape database gauges: %w", err)
	}
	return v, nil
}
