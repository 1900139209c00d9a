package stress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/invariant"
	"github.com/converge-run/converge/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// kindConfig is one kind of a cluster's configuration.
type kindConfig struct {
	Name        string
	MaxAttempts int
	Initial     time.Duration
	Max         time.Duration
	Concurrency int
	Timeout     time.Duration
	// QuarantineAfter is the kind's quarantine_after (0: off).
	QuarantineAfter int
}

// clusterConfig sets up a cluster.
type clusterConfig struct {
	Kinds       []kindConfig
	RescueAfter time.Duration
	// PoolMaxConns is each process's pool size (PostgreSQL is shared).
	PoolMaxConns int
	// Workflows, when set, is the configuration's workflows: section
	// (YAML, without the key), written as is.
	Workflows string
	// Extra, when set, is appended to every process's configuration as is
	// (whole top-level sections: retention).
	Extra string
}

// cluster is converge as separate OS processes on one fresh database, with
// a fake target served by the test process.
type cluster struct {
	t      *testing.T
	cfg    clusterConfig
	dir    string
	dbURL  string
	token  string
	target *invariant.Target
	srv    *http.Server
	tgtURL string
	pool   *pgxpool.Pool
	client *http.Client

	api     *cvproc.Process
	apiURL  string
	mu      sync.Mutex
	workers []*cvproc.Process
	// dbHost, when set for a process name, replaces the database's
	// host:port in that process's configuration (a proxy).
	dbHost map[string]string
	logged sync.Once
	// pollOnly lists processes whose River does not LISTEN: it polls for
	// jobs and for remote cancellations (every 2s), as behind PgBouncer.
	pollOnly map[string]bool
}

// newCluster builds the binary, creates the database and serves tgt; it
// starts no process.
func newCluster(t *testing.T, tgt *invariant.Target, cfg clusterConfig) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	dbURL := pgtest.NewDatabase(t)
	cvproc.Build(t)
	if cfg.PoolMaxConns == 0 {
		cfg.PoolMaxConns = 8
	}
	c := &cluster{t: t, cfg: cfg, dir: t.TempDir(), dbURL: dbURL, token: randomToken(), target: tgt,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.srv = &http.Server{Handler: tgt, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = c.srv.Serve(ln) }()
	c.tgtURL = "http://" + ln.Addr().String()

	c.pool = pgtest.OpenPool(t, dbURL, 3)
	// Cleanups run last-in first-out: processes stop (registered later)
	// before the target and the pool close, and the database is dropped
	// last (registered first, by NewDatabase).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.srv.Shutdown(ctx)
	})
	t.Cleanup(c.stopAll)
	return c
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return "cvg_" + hex.EncodeToString(b)
}

// writeConfig writes the configuration of one process; the target URL of
// its kinds ends in /<kind>/<name>, which tells the target which process
// called.
func (c *cluster) writeConfig(name string) (string, error) {
	u, err := url.Parse(c.dbURL)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	if h := c.dbHost[name]; h != "" {
		u.Host = h
	}
	c.mu.Unlock()
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(c.cfg.PoolMaxConns))
	u.RawQuery = q.Encode()
	var b strings.Builder
	fmt.Fprintf(&b, "listen: 127.0.0.1:0\ndatabase_url: %q\nrescue_after: %s\nshutdown_timeout: 5s\nlog_level: info\n",
		u.String(), c.cfg.RescueAfter)
	c.mu.Lock()
	pollOnly := c.pollOnly[name]
	c.mu.Unlock()
	fmt.Fprintf(&b, "river:\n  fetch_cooldown: 5ms\n  fetch_poll_interval: 100ms\n  poll_only: %t\nkinds:\n", pollOnly)
	for _, k := range c.cfg.Kinds {
		fmt.Fprintf(&b, "  %s:\n    target:\n      http: {url: %q, timeout: %s}\n    max_attempts: %d\n    backoff: {initial: %s, max: %s}\n    concurrency: %d\n",
			k.Name, c.tgtURL+"/"+k.Name+"/"+name, k.Timeout, k.MaxAttempts, k.Initial, k.Max, k.Concurrency)
		if k.QuarantineAfter > 0 {
			fmt.Fprintf(&b, "    quarantine_after: %d\n", k.QuarantineAfter)
		}
	}
	if c.cfg.Workflows != "" {
		fmt.Fprintf(&b, "workflows:\n%s", c.cfg.Workflows)
	}
	b.WriteString(c.cfg.Extra)
	path := filepath.Join(c.dir, name+".yaml")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// start runs `converge <mode>` as name and waits until it is ready: the
// API until /readyz answers 200.
func (c *cluster) start(mode, name string) *cvproc.Process {
	c.t.Helper()
	p, err := c.startE(mode, name)
	if err != nil {
		c.t.Fatal(err)
	}
	if mode == "api" {
		cvproc.WaitHTTP(c.t, c.apiURL+"/readyz", 30*time.Second)
	}
	return p
}

// startE is start for goroutines other than the test's (the killer): it
// returns an error, and waits only for the process to log that it
// listens (or, for a worker, that its workers started).
func (c *cluster) startE(mode, name string) (*cvproc.Process, error) {
	cfgPath, err := c.writeConfig(name)
	if err != nil {
		return nil, err
	}
	p, err := cvproc.Spawn(cvproc.Options{
		Args: []string{mode, "--config", cfgPath},
		Env:  cvproc.Env("CONVERGE_ADMIN_TOKEN=" + c.token),
		Name: name,
	})
	if err != nil {
		return nil, err
	}
	ready := []string{"listening"}
	if mode == "worker" {
		ready = append(ready, "workers started")
	}
	rec, err := p.WaitLog(60*time.Second, ready...)
	if err != nil {
		_ = p.Kill()
		return nil, fmt.Errorf("%w\n%s", err, cvproc.LastLines(p.Stderr(), 40))
	}
	if mode == "api" {
		addr, _ := rec["addr"].(string)
		c.apiURL = "http://" + addr
		c.api = p
	} else {
		c.mu.Lock()
		c.workers = append(c.workers, p)
		c.mu.Unlock()
	}
	return p, nil
}

func (c *cluster) stopAll() {
	c.mu.Lock()
	ws := append([]*cvproc.Process(nil), c.workers...)
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(w.Stop)
	}
	wg.Wait()
	if c.api != nil {
		c.api.Stop()
	}
	c.logged.Do(func() {
		if w := warnings(append(ws, c.api)); len(w) > 0 {
			c.t.Logf("warnings and errors in the process logs: %v", w)
		}
	})
	if c.t.Failed() {
		for _, p := range append(ws, c.api) {
			if p != nil {
				c.t.Logf("--- last lines of %s:\n%s", p.Name(), cvproc.LastLines(p.Stderr(), 30))
			}
		}
	}
}

// warnings counts the WARN and ERROR records of the processes' logs by
// message.
func warnings(procs []*cvproc.Process) map[string]int {
	counts := map[string]int{}
	for _, p := range procs {
		if p == nil {
			continue
		}
		sc := bufio.NewScanner(strings.NewReader(p.Stderr()))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var rec struct {
				Level string `json:"level"`
				Msg   string `json:"msg"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && (rec.Level == "WARN" || rec.Level == "ERROR") {
				counts[rec.Level+" "+rec.Msg]++
			}
		}
	}
	return counts
}

// liveWorkers returns the workers that have not exited.
func (c *cluster) liveWorkers() []*cvproc.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*cvproc.Process
	for _, w := range c.workers {
		if w.Running() {
			out = append(out, w)
		}
	}
	return out
}

// problem is the part of a problem body the tests read.
type problem struct {
	Type          string `json:"type"`
	LatestVersion *int64 `json:"latest_version"`
}

func (p problem) slug() string { return strings.TrimPrefix(p.Type, "urn:converge:problem:") }

// do sends a request with the admin token and decodes a JSON answer into
// out (when not nil and the status is 2xx) or a problem.
func (c *cluster) do(ctx context.Context, method, path string, body any, out any) (int, problem, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, problem{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.apiURL+path, rd)
	if err != nil {
		return 0, problem{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, problem{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, problem{}, err
	}
	var pr problem
	if resp.StatusCode >= 300 {
		_ = json.Unmarshal(data, &pr)
		return resp.StatusCode, pr, nil
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, pr, fmt.Errorf("decode %s %s: %w: %s", method, path, err, data)
		}
	}
	return resp.StatusCode, pr, nil
}

// acceptAnswer is the body of a 200 or 202 from POST /v1/events.
type acceptAnswer struct {
	Event struct {
		ID uuid.UUID `json:"id"`
	} `json:"event"`
	Run struct {
		ID     uuid.UUID `json:"id"`
		Status string    `json:"status"`
	} `json:"run"`
	SupersededRuns []uuid.UUID `json:"superseded_runs"`
}

// submit posts one event and records the answer.
func (c *cluster) submit(ctx context.Context, kind, resource string, version int64, payload any) (invariant.Submission, acceptAnswer, error) {
	s := invariant.Submission{Kind: kind, Resource: resource, Version: version, Payload: invariant.CompactJSON(payload)}
	var ans acceptAnswer
	status, pr, err := c.do(ctx, http.MethodPost, "/v1/events",
		map[string]any{"kind": kind, "resource": resource, "version": version, "payload": payload}, &ans)
	if err != nil {
		return s, ans, err
	}
	s.Status, s.Problem, s.EventID, s.SupersededRuns = status, pr.slug(), ans.Event.ID, ans.SupersededRuns
	return s, ans, nil
}

// settled reports whether converge has nothing left to do: every stream
// applied its latest version (or, with allowUnconverged, at least ended its
// latest run), no run is unfinished and no attempt is open.
func (c *cluster) settled(ctx context.Context, allowUnconverged bool) (bool, string, error) {
	var behind, unfinished, open int
	err := c.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM converge_streams WHERE applied_version IS DISTINCT FROM latest_version),
		(SELECT count(*) FROM converge_runs WHERE status IN ('queued', 'running', 'retrying')),
		(SELECT count(*) FROM converge_attempts WHERE outcome IS NULL)`).Scan(&behind, &unfinished, &open)
	if err != nil {
		return false, "", err
	}
	state := fmt.Sprintf("%d streams behind, %d runs unfinished, %d attempts open", behind, unfinished, open)
	return (behind == 0 || allowUnconverged) && unfinished == 0 && open == 0, state, nil
}

// waitSettled polls settled until it holds or the timeout passes.
func (c *cluster) waitSettled(ctx context.Context, timeout time.Duration, allowUnconverged bool) {
	c.t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	var state string
	for {
		ok, s, err := c.settled(ctx, allowUnconverged)
		if err != nil {
			c.t.Fatalf("poll: %v", err)
		}
		if ok {
			return
		}
		state = s
		select {
		case <-tick.C:
		case <-deadline:
			c.t.Fatalf("not settled after %s: %s\n%s", timeout, state, c.unfinished(ctx))
		case <-ctx.Done():
			c.t.Fatalf("not settled when the test's context ended: %s", state)
		}
	}
}

// abandonedErrors counts abandoned attempts by error message.
func (c *cluster) abandonedErrors(ctx context.Context) string {
	rows, err := c.pool.Query(ctx, `SELECT coalesce(error->>'message', ''), count(*) FROM converge_attempts
		WHERE outcome = 'abandoned' GROUP BY 1 ORDER BY 2 DESC`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var msg string
		var n int
		if err := rows.Scan(&msg, &n); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "\n  %d× %s", n, msg)
	}
	return b.String()
}

// unfinished describes up to 20 unfinished runs and their River jobs, for
// a failure message.
func (c *cluster) unfinished(ctx context.Context) string {
	rows, err := c.pool.Query(ctx, `SELECT r.resource, r.version, r.status, r.attempts, r.job_id,
			coalesce(j.state::text, '-'), coalesce(extract(epoch FROM now() - j.attempted_at)::text, '-'),
			coalesce(j.attempted_by[array_length(j.attempted_by, 1)], '-')
		FROM converge_runs r LEFT JOIN river_job j ON j.id = r.job_id
		WHERE r.status IN ('queued', 'running', 'retrying') ORDER BY r.resource LIMIT 20`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var res, status, jobState, age, by string
		var version int64
		var attempts int
		var job *int64
		if err := rows.Scan(&res, &version, &status, &attempts, &job, &jobState, &age, &by); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "  %s@%d %s attempts=%d job=%v job_state=%s attempted %ss ago by %s\n", res, version, status, attempts, deref(job), jobState, age, by)
	}
	return b.String()
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// check runs the invariant checker and fails the test on violations.
func (c *cluster) check(ctx context.Context, p invariant.Params) *invariant.Report {
	c.t.Helper()
	if n := len(c.target.InFlight()); n > 0 {
		c.t.Errorf("%d calls still in flight at the target", n)
	}
	p.Calls = c.target.Calls()
	rep, err := invariant.Check(ctx, c.pool, p)
	if err != nil {
		c.t.Fatalf("check: %v", err)
	}
	if rep.AbandonedAttempts > 0 {
		c.t.Logf("abandoned attempts by error: %s", c.abandonedErrors(ctx))
	}
	c.t.Logf("checker: %s", rep.Summary())
	byRule := map[string]int{}
	for _, v := range rep.Violations {
		byRule[v.Rule]++
	}
	if len(byRule) > 0 {
		c.t.Errorf("violations by rule: %v", byRule)
	}
	for i, v := range rep.Violations {
		if i == 50 {
			c.t.Errorf("... and %d more violations", len(rep.Violations)-50)
			break
		}
		c.t.Errorf("violation: %s", v)
	}
	return rep
}

// allProcesses returns the api and every worker process started so far,
// killed ones included.
func (c *cluster) allProcesses() []*cvproc.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := append([]*cvproc.Process(nil), c.workers...)
	if c.api != nil {
		out = append(out, c.api)
	}
	return out
}
