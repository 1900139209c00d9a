package faults

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
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/converge-run/converge/test/cvproc"
	"github.com/converge-run/converge/test/invariant"
)

// stackConfig sets up converge's processes.
type stackConfig struct {
	RescueAfter time.Duration
	// Kinds is the configuration's kinds: section body (YAML, indented
	// two spaces), with %[1]s for the target's base URL and %[2]s for the
	// process's name; a kind "build" by default.
	Kinds string
	// Workflows is the workflows: section body, if any.
	Workflows string
	// PollOnly makes the workers' River poll instead of LISTEN.
	PollOnly bool
	// PoolMaxConns is each process's pool size.
	PoolMaxConns int
	// Extra is more top-level YAML.
	Extra string
	// Handler, when set, is served as the target instead of the
	// recording one.
	Handler http.Handler
}

const defaultKinds = `  build:
    target:
      http: {url: "%[1]s/build/%[2]s", timeout: 20s}
    max_attempts: 1000
    backoff: {initial: 20ms, max: 500ms}
    concurrency: 8
    debounce: 0s
`

// proc is one converge process of the stack by name; it is restarted
// under the same name.
type proc struct {
	name, mode string
	p          *cvproc.Process
	// killed is set when the test killed or stopped it on purpose.
	killed bool
	// logs are the logs of its earlier incarnations.
	logs []string
	// addr is where it serves /metrics (host:port).
	addr string
}

// exit is a converge process that ended without the test asking.
type exit struct {
	Name string
	Err  string
	Tail string
}

// stack is converge's processes on a private cluster, with a recording
// target served by the test process.
type stack struct {
	t      *testing.T
	pg     *pgCluster
	cfg    stackConfig
	dir    string
	token  string
	target *invariant.Target
	tgtURL string
	client *http.Client

	mu     sync.Mutex
	procs  map[string]*proc
	apiURL string
	exits  []exit
}

// newStack serves tgt and prepares the processes' configuration; it
// starts no process.
func newStack(t *testing.T, pg *pgCluster, tgt *invariant.Target, cfg stackConfig) *stack {
	t.Helper()
	if cfg.Kinds == "" {
		cfg.Kinds = defaultKinds
	}
	if cfg.PoolMaxConns == 0 {
		cfg.PoolMaxConns = 8
	}
	s := &stack{t: t, pg: pg, cfg: cfg, dir: t.TempDir(), token: "cvg_" + randomHex(24), target: tgt,
		procs:  map[string]*proc{},
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = tgt
	if cfg.Handler != nil {
		h = cfg.Handler
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	s.tgtURL = "http://" + ln.Addr().String()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	t.Cleanup(s.stopAll)
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// dbPassword is a password put in the processes' database URL (the
// cluster trusts every local connection, so it is never checked): the
// suite checks that no log shows it.
const dbPassword = "faults-db-secret-7c1d"

func (s *stack) writeConfig(name string) (string, error) {
	u, err := url.Parse(s.pg.URL())
	if err != nil {
		return "", err
	}
	u.User = url.UserPassword(u.User.Username(), dbPassword)
	q := u.Query()
	q.Set("pool_max_conns", fmt.Sprint(s.cfg.PoolMaxConns))
	u.RawQuery = q.Encode()
	var b strings.Builder
	rescue := s.cfg.RescueAfter
	if rescue == 0 {
		rescue = 10 * time.Second
	}
	fmt.Fprintf(&b, "listen: 127.0.0.1:0\ndatabase_url: %q\nrescue_after: %s\nshutdown_timeout: 5s\nlog_level: info\n", u.String(), rescue)
	fmt.Fprintf(&b, "river:\n  fetch_cooldown: 5ms\n  fetch_poll_interval: 100ms\n  poll_only: %t\n", s.cfg.PollOnly)
	fmt.Fprintf(&b, "kinds:\n"+s.cfg.Kinds, s.tgtURL, name)
	if s.cfg.Workflows != "" {
		fmt.Fprintf(&b, "workflows:\n%s", s.cfg.Workflows)
	}
	b.WriteString(s.cfg.Extra)
	path := filepath.Join(s.dir, name+".yaml")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// start runs `converge <mode>` as name and waits until it logs that it
// listens (and, for a worker, that its workers started).
func (s *stack) start(mode, name string) error {
	path, err := s.writeConfig(name)
	if err != nil {
		return err
	}
	p, err := cvproc.Spawn(cvproc.Options{Args: []string{mode, "--config", path},
		Env: cvproc.Env("CONVERGE_ADMIN_TOKEN=" + s.token), Name: name})
	if err != nil {
		return err
	}
	s.mu.Lock()
	pr := s.procs[name]
	if pr == nil {
		pr = &proc{name: name, mode: mode}
		s.procs[name] = pr
	} else if pr.p != nil {
		pr.logs = append(pr.logs, pr.p.Stderr())
	}
	pr.p, pr.killed = p, false
	s.mu.Unlock()
	ready := []string{"listening"}
	if mode == "worker" {
		ready = []string{"workers started"}
	}
	rec, err := p.WaitLog(90*time.Second, ready...)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, cvproc.LastLines(p.Stderr(), 30))
	}
	if mode != "api" {
		rec, _ = p.WaitLog(time.Second, "listening")
	}
	addr, _ := rec["addr"].(string)
	s.mu.Lock()
	pr.addr = addr
	if mode == "api" {
		s.apiURL = "http://" + addr
	}
	s.mu.Unlock()
	return nil
}

// metric returns the sum of the samples of a counter on process name's
// /metrics whose labels include every label given ("kind=\"build\"").
func (s *stack) metric(ctx context.Context, name, metric string, labels ...string) (float64, error) {
	s.mu.Lock()
	addr := s.procs[name].addr
	s.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		var v float64
		if i := strings.LastIndexByte(line, ' '); ok && i > 0 {
			if _, err := fmt.Sscan(line[i+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum, nil
}

// mustStart is start that fails the test.
func (s *stack) mustStart(mode, name string) {
	s.t.Helper()
	if err := s.start(mode, name); err != nil {
		s.t.Fatal(err)
	}
}

// proc returns the process named name.
func (s *stack) proc(name string) *cvproc.Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pr := s.procs[name]; pr != nil {
		return pr.p
	}
	return nil
}

// names returns the names of the processes of mode, sorted.
func (s *stack) names(mode string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n, pr := range s.procs {
		if pr.mode == mode {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// kill sends SIGKILL to process name and waits until it is gone.
func (s *stack) kill(name string) error {
	s.mu.Lock()
	pr := s.procs[name]
	pr.killed = true
	p := pr.p
	s.mu.Unlock()
	return p.Kill()
}

// signal sends sig to process name.
func (s *stack) signal(name string, sig syscall.Signal) error {
	return syscall.Kill(s.proc(name).Pid(), sig)
}

// reap records every process that exited without being killed and
// returns their names; the caller restarts them.
func (s *stack) reap() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	names := mapKeys(s.procs)
	slices.Sort(names)
	for _, n := range names {
		pr := s.procs[n]
		if pr.p != nil && !pr.p.Running() && !pr.killed {
			s.exits = append(s.exits, exit{Name: n, Err: fmt.Sprint(pr.p.Err()), Tail: cvproc.LastLines(pr.p.Stderr(), 5)})
			pr.killed = true // counted once
			out = append(out, n)
		}
	}
	return out
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Exits returns the processes that exited by themselves so far.
func (s *stack) Exits() []exit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.exits)
}

// logs returns every log written so far by every process, each
// incarnation's, by process name.
func (s *stack) logs() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]string{}
	for n, pr := range s.procs {
		out[n] = slices.Clone(pr.logs)
		if pr.p != nil {
			out[n] = append(out[n], pr.p.Stderr())
		}
	}
	return out
}

func (s *stack) stopAll() {
	s.mu.Lock()
	var ps []*cvproc.Process
	for _, pr := range s.procs {
		if pr.p != nil {
			ps = append(ps, pr.p)
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() {
			_ = syscall.Kill(p.Pid(), syscall.SIGCONT)
			p.Stop()
		})
	}
	wg.Wait()
	if s.t.Failed() {
		for _, p := range ps {
			s.t.Logf("--- last lines of %s:\n%s", p.Name(), cvproc.LastLines(p.Stderr(), 25))
		}
	}
}

// API is the api process's base URL.
func (s *stack) API() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.apiURL
}

// answer is an HTTP answer with its body read.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request with the admin token.
func (s *stack) do(ctx context.Context, method, path string, body any) (*answer, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.API()+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &answer{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// logRecords returns the JSON records of a log.
func logRecords(log string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

// submitUntilAccepted posts an event until it is answered 202 or 200 (an
// outage's 500 or 503, or a broken connection, is tried again), for up
// to a minute, and returns the last answer.
func (s *stack) submitUntilAccepted(ctx context.Context, kind, resource string, version int64, payload any) (*answer, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		a, err := s.do(ctx, http.MethodPost, "/v1/events", map[string]any{"kind": kind, "resource": resource, "version": version, "payload": payload})
		if err == nil && (a.status == http.StatusAccepted || a.status == http.StatusOK) {
			return a, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err == nil {
				err = fmt.Errorf("answered %d: %s", a.status, a.body)
			}
			return a, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
