package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Superuser is the role a private cluster is initialized with; Server.URL
// connects as it.
const Superuser = "postgres"

// confFile is the file, inside the data folder, that Start rewrites at every
// start with the settings it owns (address, port, socket folder,
// durability). postgresql.conf includes it last, so it wins.
const confFile = "converge.conf"

// logFile is the server log inside the data folder.
const logFile = "server.log"

// defaultStartTimeout bounds start-up when ctx has no deadline.
const defaultStartTimeout = 60 * time.Second

// readyTimeout bounds the wait for connections once pg_ctl reports the
// server started.
const readyTimeout = 20 * time.Second

// maxSocketPath is the longest unix socket path PostgreSQL accepts, less
// some room (sun_path holds 108 bytes).
const maxSocketPath = 100

// ErrNoBinaries is returned (wrapped) by Start when the machine has no
// PostgreSQL binaries it can use.
var ErrNoBinaries = errors.New("no PostgreSQL binaries (initdb, pg_ctl) found")

// StartOptions configures Start.
type StartOptions struct {
	// Dir is the data folder. It is created when missing; a folder that
	// already holds a cluster is reused with all its data.
	Dir string

	// Port is the TCP port to listen on, on 127.0.0.1 only; 0 picks a free
	// one.
	Port int

	// Ephemeral turns durability off (fsync, synchronous_commit,
	// full_page_writes) for clusters whose data may be lost, such as tests'.
	Ephemeral bool

	// Settings are extra postgresql.conf lines ("name = value"), written
	// after the ones Start owns, for example a benchmark's
	// "max_wal_size = '8GB'". Start does not check them: a bad one makes
	// the server refuse to start, with the log's tail in Start's error.
	Settings []string

	// BinDir is the folder holding initdb and pg_ctl. When empty they are
	// looked up on PATH and then under /usr/lib/postgresql/*/bin, newest
	// version first; a reused data folder picks the binaries of its version.
	BinDir string
}

// Server is a private PostgreSQL cluster started by Start. Its methods are
// safe for concurrent use.
type Server struct {
	dir    string
	binDir string
	port   int
	cred   *syscall.Credential

	mu      sync.Mutex
	stopped bool
}

// Start starts a private PostgreSQL cluster in opts.Dir, initializing it
// first (trust authentication, superuser "postgres", UTF8, locale C) unless
// the folder already holds one. The server listens on 127.0.0.1 only, on
// opts.Port or a free port, with its unix socket inside the data folder.
// Start returns once the server accepts connections. If a server is already
// running on the data folder (left behind by a process that died), Start
// adopts it.
//
// When the calling process runs as root, the cluster runs as the operating
// system user postgres: Start gives it the data folder and adds the search
// (o+x) permission to any parent folder that user could not otherwise pass
// through.
func Start(ctx context.Context, opts StartOptions) (*Server, error) {
	if opts.Dir == "" {
		return nil, errors.New("start postgres: no data folder given")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("start postgres: data folder: %w", err)
	}
	s := &Server{dir: dir}
	if os.Geteuid() == 0 {
		s.cred, err = postgresCredential()
		if err != nil {
			return nil, fmt.Errorf("start postgres as root: %w", err)
		}
	}
	version := dataVersion(dir)
	if opts.BinDir != "" {
		s.binDir = opts.BinDir
	} else if s.binDir, err = s.locateBinDir(ctx, version); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	if err := s.prepareDir(); err != nil {
		return nil, fmt.Errorf("start postgres in %s: %w", dir, err)
	}
	if version == "" {
		if err := s.initdb(ctx, opts.Ephemeral); err != nil {
			return nil, fmt.Errorf("start postgres in %s: %w", dir, err)
		}
	}
	if err := s.ensureInclude(); err != nil {
		return nil, fmt.Errorf("start postgres in %s: %w", dir, err)
	}

	timeout := defaultStartTimeout
	if deadline, ok := ctx.Deadline(); ok {
		timeout = time.Until(deadline)
	}
	if port, ok := s.runningPort(ctx); ok {
		s.port = port
	} else if err := s.start(ctx, opts, timeout); err != nil {
		return nil, fmt.Errorf("start postgres in %s: %w", dir, err)
	}
	// pg_ctl has seen the server ready (or it was running already), so a
	// server that still refuses connections after readyTimeout is not
	// reachable at all.
	if err := waitReady(ctx, s.URL("postgres"), min(timeout, readyTimeout)); err != nil {
		stopErr := s.Stop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("start postgres in %s: %w%s", dir, errors.Join(err, stopErr), s.logTail())
	}
	return s, nil
}

// URL is the connection URL of database dbname on the server, as its
// superuser, for example
// "postgres://postgres@127.0.0.1:54321/postgres?sslmode=disable".
func (s *Server) URL(dbname string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", Superuser, s.port, url.PathEscape(dbname))
}

// Port is the TCP port the server listens on.
func (s *Server) Port() int {
	return s.port
}

// Dir is the data folder.
func (s *Server) Dir() string {
	return s.dir
}

// Stop stops the server with pg_ctl stop -m fast, which disconnects clients
// and shuts down cleanly, and waits until it has. Stopping a stopped server
// does nothing.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	out, err := s.pgctl(ctx, "stop", "-D", s.dir, "-m", "fast", "-w", "-t", "60", "-s")
	if err != nil {
		if _, running := s.runningPort(ctx); running {
			return fmt.Errorf("stop postgres in %s: %w: %s", s.dir, err, out)
		}
	}
	s.stopped = true
	return nil
}

// start picks a port, writes the settings and runs pg_ctl start. When the
// port was picked here and turns out taken by the time the server binds it,
// it tries again with another.
func (s *Server) start(ctx context.Context, opts StartOptions, timeout time.Duration) error {
	const attempts = 3
	for attempt := 1; ; attempt++ {
		port := opts.Port
		if port == 0 {
			var err error
			if port, err = freePort(); err != nil {
				return err
			}
		}
		if err := s.writeConf(port, opts.Ephemeral, opts.Settings); err != nil {
			return err
		}
		secs := strconv.Itoa(max(1, int(timeout.Seconds())))
		out, err := s.pgctl(ctx, "start", "-D", s.dir, "-l", filepath.Join(s.dir, logFile), "-w", "-t", secs, "-s")
		if err == nil {
			s.port = port
			return nil
		}
		tail := s.logTail()
		if opts.Port == 0 && attempt < attempts && strings.Contains(tail, "could not bind") {
			continue
		}
		return fmt.Errorf("pg_ctl start: %w: %s%s", err, bytes.TrimSpace(out), tail)
	}
}

// initdb initializes the data folder.
func (s *Server) initdb(ctx context.Context, ephemeral bool) error {
	args := []string{
		"-D", s.dir,
		"--username", Superuser,
		"--auth", "trust",
		"--encoding", "UTF8",
		"--locale", "C",
		"--no-instructions",
	}
	if ephemeral {
		args = append(args, "--no-sync")
	}
	if out, err := s.run(ctx, "initdb", args...); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// ensureInclude makes postgresql.conf include confFile, once.
func (s *Server) ensureInclude() error {
	path := filepath.Join(s.dir, "postgresql.conf")
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read postgresql.conf: %w", err)
	}
	line := "include_if_exists = '" + confFile + "'"
	if bytes.Contains(b, []byte(line)) {
		return nil
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open postgresql.conf: %w", err)
	}
	_, err = fmt.Fprintf(f, "\n# Settings owned by converge's pgserver, rewritten at every start.\n%s\n", line)
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("write postgresql.conf: %w", err)
	}
	return nil
}

// writeConf writes confFile for a start on port.
func (s *Server) writeConf(port int, ephemeral bool, settings []string) error {
	var b strings.Builder
	b.WriteString("# Written by converge's pgserver at every start: changes here are lost.\n")
	b.WriteString("listen_addresses = '127.0.0.1'\n")
	fmt.Fprintf(&b, "port = %d\n", port)
	socket := filepath.Join(s.dir, fmt.Sprintf(".s.PGSQL.%d", port))
	if len(socket) <= maxSocketPath {
		fmt.Fprintf(&b, "unix_socket_directories = %s\n", confQuote(s.dir))
	} else {
		// The path is too long for a unix socket: TCP only.
		b.WriteString("unix_socket_directories = ''\n")
	}
	if ephemeral {
		b.WriteString("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
	}
	for _, line := range settings {
		if strings.ContainsAny(line, "\r\n") {
			return fmt.Errorf("setting %q: one line per setting", line)
		}
		b.WriteString(line + "\n")
	}
	path := filepath.Join(s.dir, confFile)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", confFile, err)
	}
	if s.cred != nil {
		if err := os.Chown(path, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("chown %s: %w", confFile, err)
		}
	}
	return nil
}

// confQuote quotes v as a postgresql.conf string.
func confQuote(v string) string {
	v = strings.ReplaceAll(v, `\`, `\\`)
	v = strings.ReplaceAll(v, `'`, `''`)
	return "'" + v + "'"
}

// runningPort reports the port of a server already running on the data
// folder, read from postmaster.pid.
func (s *Server) runningPort(ctx context.Context) (int, bool) {
	if _, err := s.pgctl(ctx, "status", "-D", s.dir); err != nil {
		return 0, false
	}
	b, err := os.ReadFile(filepath.Join(s.dir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0, false
	}
	port, err := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err != nil {
		return 0, false
	}
	return port, true
}

// prepareDir creates the data folder and, when running as root, hands it to
// the postgres user and makes sure that user can reach it.
func (s *Server) prepareDir() error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("create data folder: %w", err)
	}
	if s.cred == nil {
		return nil
	}
	if err := makeTraversable(filepath.Dir(s.dir), s.cred); err != nil {
		return err
	}
	uid, gid := int(s.cred.Uid), int(s.cred.Gid)
	return filepath.WalkDir(s.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("give data folder to postgres: %w", err)
		}
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("give data folder to postgres: %w", err)
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == gid {
			return nil
		}
		if err := os.Lchown(path, uid, gid); err != nil {
			return fmt.Errorf("give data folder to postgres: %w", err)
		}
		return nil
	})
}

// makeTraversable adds the search permission for others to dir and each of
// its parents that the user of cred could not pass through otherwise.
func makeTraversable(dir string, cred *syscall.Credential) error {
	for {
		info, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("check access to %s: %w", dir, err)
		}
		if !canSearch(info, cred) {
			if err := os.Chmod(dir, info.Mode().Perm()|0o001); err != nil {
				return fmt.Errorf("let postgres reach the data folder through %s: %w", dir, err)
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}

// canSearch reports whether the user of cred may pass through the folder
// described by info.
func canSearch(info fs.FileInfo, cred *syscall.Credential) bool {
	perm := info.Mode().Perm()
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return perm&0o001 != 0
	}
	switch {
	case st.Uid == cred.Uid:
		return perm&0o100 != 0
	case st.Gid == cred.Gid || slices.Contains(cred.Groups, st.Gid):
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// postgresCredential is the credential of the postgres operating-system
// user.
func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("look up user postgres (PostgreSQL refuses to run as root): %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user postgres uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user postgres gid %q: %w", u.Gid, err)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				cred.Groups = append(cred.Groups, uint32(g))
			}
		}
	}
	return cred, nil
}

// dataVersion is the major version recorded in dir/PG_VERSION, or "" when
// dir holds no cluster.
func dataVersion(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "PG_VERSION"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// locateBinDir finds the folder holding initdb and pg_ctl: PATH first, then
// /usr/lib/postgresql/*/bin from the newest version down. With want set (the
// major version of an existing cluster) it picks the first folder of that
// version.
func (s *Server) locateBinDir(ctx context.Context, want string) (string, error) {
	var dirs []string
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			p = resolved
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(matches, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	dirs = append(dirs, matches...)

	var found []string
	for _, d := range dirs {
		if slices.Contains(found, d) || !isExecutable(filepath.Join(d, "pg_ctl")) || !isExecutable(filepath.Join(d, "initdb")) {
			continue
		}
		if want == "" {
			return d, nil
		}
		found = append(found, d)
		if major, err := s.binMajor(ctx, d); err == nil && major == want {
			return d, nil
		}
	}
	if want == "" {
		return "", fmt.Errorf("%w on PATH or under /usr/lib/postgresql/*/bin", ErrNoBinaries)
	}
	return "", fmt.Errorf("%w: the data folder holds a PostgreSQL %s cluster, and none of the binaries found is of that version (looked in %s)", ErrNoBinaries, want, strings.Join(found, ", "))
}

// binMajor is the major version of the pg_ctl in dir: "15" for 15.4, "9.6"
// for 9.6.24.
func (s *Server) binMajor(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "pg_ctl"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("pg_ctl --version: %w", err)
	}
	// "pg_ctl (PostgreSQL) 15.19 (Debian 15.19-0+deb12u1)"
	fields := strings.Fields(string(out))
	if len(fields) < 3 {
		return "", fmt.Errorf("pg_ctl --version: unexpected output %q", out)
	}
	parts := strings.Split(fields[2], ".")
	if n, err := strconv.Atoi(parts[0]); err == nil && n < 10 && len(parts) > 1 {
		return parts[0] + "." + parts[1], nil
	}
	return parts[0], nil
}

// compareVersions compares dotted version strings numerically.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

// isExecutable reports whether path is a regular file with an execute bit.
func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0
}

// pgctl runs pg_ctl with args.
func (s *Server) pgctl(ctx context.Context, args ...string) ([]byte, error) {
	return s.run(ctx, "pg_ctl", args...)
}

// run runs the PostgreSQL program name from the binary folder as the
// cluster's user, and returns its combined output.
func (s *Server) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, name), args...)
	cmd.Dir = "/"
	cmd.Env = environ()
	cmd.Stdout = &out
	cmd.Stderr = &out
	// pg_ctl start leaves the server running; it redirects the server's
	// output to the log, but should anything keep our pipe open, don't
	// wait for it.
	cmd.WaitDelay = 5 * time.Second
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	err := cmd.Run()
	return out.Bytes(), err
}

// environ is the environment for PostgreSQL programs: ours without the PG*
// variables, which would override the explicit settings, and with the C
// locale for predictable messages.
func environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "LANG=C")
}

// logTail is the end of the server log, formatted to follow an error
// message, or "" when there is none.
func (s *Server) logTail() string {
	f, err := os.Open(filepath.Join(s.dir, logFile))
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	const n = 2048
	if info, err := f.Stat(); err == nil && info.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return ""
	}
	return "\nserver log (end):\n" + string(b)
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls databaseURL until it accepts connections or timeout
// passes.
func waitReady(ctx context.Context, databaseURL string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ping(ctx, databaseURL, 2*time.Second)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for postgres to accept connections: %w", err)
		case <-tick.C:
		}
	}
}
