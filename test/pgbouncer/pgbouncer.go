package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// ErrNoBinary is returned (wrapped) by Start when the machine has no
// pgbouncer binary.
var ErrNoBinary = errors.New("no pgbouncer binary (apt-get install pgbouncer; scripts/ensure-deps.sh does)")

// Bouncer is a running PgBouncer.
type Bouncer struct {
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// binary finds pgbouncer on PATH or in /usr/sbin.
func binary() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", ErrNoBinary
}

// Start runs a PgBouncer in transaction mode that forwards every database
// to the server of upstreamURL (its host and port) and returns once it
// accepts connections. Stop it with Stop.
func Start(ctx context.Context, upstreamURL string) (*Bouncer, error) {
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(upstreamURL)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: upstream url: %w", err)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "5432"
	}
	dir, err := os.MkdirTemp("", "converge-pgbouncer-")
	if err != nil {
		return nil, err
	}
	b := &Bouncer{dir: dir, done: make(chan struct{})}
	if b.port, err = freePort(); err != nil {
		return nil, err
	}
	users := []string{"postgres", "root"}
	if name := u.User.Username(); name != "" && name != "postgres" && name != "root" {
		users = append(users, name)
	}
	var userlist strings.Builder
	for _, name := range users {
		fmt.Fprintf(&userlist, "%q \"\"\n", name)
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
stats_users = %s
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 40
max_db_connections = 0
server_reset_query =
ignore_startup_parameters = extra_float_digits
stats_period = 1
logfile = %s
pidfile = %s
`, host, port, b.port, filepath.Join(dir, "userlist.txt"), strings.Join(users, ","), strings.Join(users, ","),
		filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	if err := os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(userlist.String()), 0o644); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(cfg, []byte(ini), 0o644); err != nil {
		return nil, err
	}
	args := []string{cfg}
	if os.Geteuid() == 0 {
		// PgBouncer refuses to run as root: it switches to postgres, who
		// must be able to write its log and pid files.
		pg, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgbouncer as root needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
		args = []string{"-u", "postgres", cfg}
	}
	b.cmd = exec.Command(bin, args...)
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	go func() {
		_ = b.cmd.Wait()
		close(b.done)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", b.Addr(), time.Second)
		if err == nil {
			_ = conn.Close()
			return b, nil
		}
		select {
		case <-b.done:
			return nil, fmt.Errorf("pgbouncer exited at start: %s", b.Log())
		case <-ctx.Done():
			b.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Stop()
			return nil, fmt.Errorf("pgbouncer does not accept connections on %s: %s", b.Addr(), b.Log())
		}
	}
}

// Addr is the address PgBouncer listens on.
func (b *Bouncer) Addr() string { return "127.0.0.1:" + strconv.Itoa(b.port) }

// URL returns databaseURL (a URL of the upstream server) pointed at
// PgBouncer instead: same user, database and parameters.
func (b *Bouncer) URL(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return databaseURL
	}
	u.Host = b.Addr()
	return u.String()
}

// Log is PgBouncer's log so far.
func (b *Bouncer) Log() string {
	data, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
	return string(data)
}

// Stop stops PgBouncer (SIGINT: a safe shutdown, then SIGKILL after 5 s)
// and removes its folder.
func (b *Bouncer) Stop() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-b.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.done
		}
	}
	_ = os.RemoveAll(b.dir)
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Transactions is PgBouncer's count of transactions served so far, from
// its admin console (SHOW STATS, over the simple protocol; the counts are
// refreshed every second, stats_period).
func (b *Bouncer) Transactions(ctx context.Context) (int64, error) {
	conn, err := pgx.Connect(ctx, "postgres://postgres@"+b.Addr()+"/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol")
	if err != nil {
		return 0, fmt.Errorf("pgbouncer admin console: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	rows, err := conn.Query(ctx, "SHOW STATS")
	if err != nil {
		return 0, fmt.Errorf("SHOW STATS: %w", err)
	}
	defer rows.Close()
	var total int64
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return 0, err
		}
		for i, f := range rows.FieldDescriptions() {
			if f.Name != "total_xact_count" {
				continue
			}
			switch v := vals[i].(type) {
			case int64:
				total += v
			case pgtype.Numeric:
				if n, err := v.Int64Value(); err == nil {
					total += n.Int64
				}
			}
		}
	}
	return total, rows.Err()
}
