package main

import (
	"crypto/sha256"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/converge-run/converge/test/pgtest"
)

// tokTestName returns a token name unique to this run.
func tokTestName(prefix string) string { return prefix + "-" + uuid.NewString()[:8] }

// tokCreate runs `token create` and returns the token: the last line of
// standard output, alone.
func tokCreate(t *testing.T, vars map[string]string, name, role string) string {
	t.Helper()
	stdout, stderr, err := secRun(t, vars, "token", "create", "--name", name, "--role", role)
	if err != nil {
		t.Fatalf("token create: %v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	token := lines[len(lines)-1]
	if !regexp.MustCompile(`^cvg_[A-Za-z0-9_-]{43}$`).MatchString(token) {
		t.Fatalf("last line of stdout %q is not a token alone", token)
	}
	if !strings.HasSuffix(stdout, token+"\n") {
		t.Fatalf("stdout %q does not end with the token's line", stdout)
	}
	secNoSecrets(t, map[string]string{"token create's stderr": stderr}, token)
	return token
}

// TestTokenCreate checks `converge token create`: the token is the last
// line of standard output, alone; only its SHA-256 is stored; the creation
// is audited; and the token works at once with its role.
func TestTokenCreate(t *testing.T) {
	t.Parallel()
	databaseURL := pgtest.URL(t)
	vars := map[string]string{"DATABASE_URL": databaseURL}
	name := tokTestName("ci")
	token := tokCreate(t, vars, name, "submitter")

	pool := pgtest.Pool(t)
	var hash []byte
	var role, row string
	err := pool.QueryRow(t.Context(), `SELECT hash, role, t::text FROM converge_tokens t WHERE name = $1`, name).Scan(&hash, &role, &row)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256([]byte(token)); string(hash) != string(sum[:]) || role != "submitter" {
		t.Errorf("stored hash %x role %s, want the token's SHA-256 and submitter", hash, role)
	}
	secNoSecrets(t, map[string]string{"the token's row": row}, token)

	var actor, auditRole string
	err = pool.QueryRow(t.Context(), `SELECT actor, role FROM converge_audit WHERE action = 'token.create' AND targets @> $1::jsonb`,
		`["`+name+`"]`).Scan(&actor, &auditRole)
	if err != nil {
		t.Fatalf("audit of token.create: %v", err)
	}
	if actor != "cli" || auditRole != "operator" {
		t.Errorf("audit actor %s role %s, want cli operator", actor, auditRole)
	}

	p := secStart(t, map[string]string{"DATABASE_URL": databaseURL}, "api")
	if r := secDo(t, http.MethodGet, p.url+"/v1/events", token, ""); r.status != http.StatusOK {
		t.Errorf("GET /v1/events with the new token = %d %s", r.status, r.body)
	}
	if r := secDo(t, http.MethodGet, p.url+"/v1/audit", token, ""); r.status != http.StatusForbidden {
		t.Errorf("GET /v1/audit as submitter = %d %s, want 403", r.status, r.body)
	}
}

// TestTokenCreateRefused checks the usage errors (exit status 2) and a taken
// name (exit status 1), none of which prints a token.
func TestTokenCreateRefused(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"DATABASE_URL": pgtest.URL(t)}
	taken := tokTestName("taken")
	tokCreate(t, vars, taken, "viewer")
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"no role", []string{"--name", tokTestName("x")}, 2},
		{"bad role", []string{"--name", tokTestName("x"), "--role", "admin"}, 2},
		{"role in capitals", []string{"--name", tokTestName("x"), "--role", "Operator"}, 2},
		{"no name", []string{"--role", "viewer"}, 2},
		{"empty name", []string{"--name", "", "--role", "viewer"}, 2},
		{"name with a space", []string{"--name", "a b", "--role", "viewer"}, 2},
		{"name with a newline", []string{"--name", "a\nb", "--role", "viewer"}, 2},
		{"name too long", []string{"--name", strings.Repeat("a", 101), "--role", "viewer"}, 2},
		{"reserved name", []string{"--name", "admin", "--role", "viewer"}, 2},
		{"taken name", []string{"--name", taken, "--role", "viewer"}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, err := secRun(t, vars, append([]string{"token", "create"}, c.args...)...)
			if err == nil {
				t.Fatalf("token create %q succeeded: %s", c.args, stdout)
			}
			if got := exitCode(err, &strings.Builder{}); got != c.code {
				t.Errorf("exit status %d, want %d (%v)", got, c.code, err)
			}
			if strings.Contains(stdout+stderr, "cvg_") {
				t.Errorf("a refused create printed a token: %s %s", stdout, stderr)
			}
		})
	}
}

// TestTokenList checks that `converge token list` shows names, roles,
// creation, last use and revocation, and never a token.
func TestTokenList(t *testing.T) {
	t.Parallel()
	databaseURL := pgtest.URL(t)
	vars := map[string]string{"DATABASE_URL": databaseURL}
	used, unused := tokTestName("used"), tokTestName("unused")
	usedToken := tokCreate(t, vars, used, "operator")
	unusedToken := tokCreate(t, vars, unused, "viewer")

	p := secStart(t, map[string]string{"DATABASE_URL": databaseURL}, "api")
	if r := secDo(t, http.MethodGet, p.url+"/v1/audit", usedToken, ""); r.status != http.StatusOK {
		t.Fatalf("GET /v1/audit = %d %s", r.status, r.body)
	}

	stdout, stderr, err := secRun(t, vars, "token", "list")
	if err != nil {
		t.Fatalf("token list: %v\n%s", err, stderr)
	}
	lines := strings.Split(stdout, "\n")
	if !regexp.MustCompile(`^NAME\s+ROLE\s+CREATED\s+LAST USED\s+REVOKED$`).MatchString(strings.TrimSpace(lines[0])) {
		t.Errorf("header = %q", lines[0])
	}
	stamp := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`
	wantRows := map[string]*regexp.Regexp{
		used:   regexp.MustCompile(`^` + used + `\s+operator\s+` + stamp + `\s+` + stamp + `\s+-$`),
		unused: regexp.MustCompile(`^` + unused + `\s+viewer\s+` + stamp + `\s+-\s+-$`),
	}
	for name, re := range wantRows {
		found := false
		for _, line := range lines {
			if strings.HasPrefix(line, name+" ") {
				found = true
				if !re.MatchString(strings.TrimSpace(line)) {
					t.Errorf("row %q does not match %s", line, re)
				}
			}
		}
		if !found {
			t.Errorf("no row for %s in:\n%s", name, stdout)
		}
	}
	secNoSecrets(t, map[string]string{"token list": stdout + stderr}, usedToken, unusedToken)
	if strings.Contains(stdout, "cvg_") {
		t.Errorf("token list shows something like a token:\n%s", stdout)
	}
}

// TestTokenRevoke checks that `converge token revoke` takes effect at once
// in an API process that already served the token (there is no cache), is
// audited, and is refused for an unknown or already revoked name.
func TestTokenRevoke(t *testing.T) {
	t.Parallel()
	databaseURL := pgtest.URL(t)
	vars := map[string]string{"DATABASE_URL": databaseURL}
	name := tokTestName("rev")
	token := tokCreate(t, vars, name, "operator")

	p := secStart(t, map[string]string{"DATABASE_URL": databaseURL}, "api")
	for range 3 {
		if r := secDo(t, http.MethodGet, p.url+"/v1/events", token, ""); r.status != http.StatusOK {
			t.Fatalf("before revoke: %d %s", r.status, r.body)
		}
	}
	stdout, stderr, err := secRun(t, vars, "token", "revoke", "--name", name)
	if err != nil {
		t.Fatalf("token revoke: %v\n%s", err, stderr)
	}
	secNoSecrets(t, map[string]string{"token revoke": stdout + stderr}, token)
	r := secDo(t, http.MethodGet, p.url+"/v1/events", token, "")
	if r.status != http.StatusUnauthorized || !strings.Contains(r.body, `"urn:converge:problem:unauthorized"`) {
		t.Fatalf("the first request after revoke = %d %s, want 401 unauthorized", r.status, r.body)
	}

	pool := pgtest.Pool(t)
	var n int
	err = pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_audit WHERE action = 'token.revoke' AND actor = 'cli' AND targets @> $1::jsonb`,
		`["`+name+`"]`).Scan(&n)
	if err != nil || n != 1 {
		t.Errorf("token.revoke audit entries = %d (%v), want 1", n, err)
	}

	for _, again := range []string{name, tokTestName("never")} {
		_, stderr, err := secRun(t, vars, "token", "revoke", "--name", again)
		if err == nil || exitCode(err, &strings.Builder{}) != 1 || !strings.Contains(stderr, "no active token named") {
			t.Errorf("revoke %s: %v %s, want exit status 1 and no active token", again, err, stderr)
		}
	}
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_tokens WHERE name = $1 AND revoked_at IS NOT NULL`, name).Scan(&n); err != nil || n != 1 {
		t.Errorf("revoked rows = %d (%v)", n, err)
	}

	// The name may also be given as an argument; giving none is a usage error.
	byArg := tokTestName("arg")
	tokCreate(t, vars, byArg, "viewer")
	if _, stderr, err := secRun(t, vars, "token", "revoke", byArg); err != nil {
		t.Fatalf("token revoke %s: %v\n%s", byArg, err, stderr)
	}
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM converge_tokens WHERE name = $1 AND revoked_at IS NOT NULL`, byArg).Scan(&n); err != nil || n != 1 {
		t.Errorf("revoked rows for %s = %d (%v), want 1", byArg, n, err)
	}
	if _, _, err := secRun(t, vars, "token", "revoke"); err == nil || exitCode(err, &strings.Builder{}) != 2 {
		t.Errorf("token revoke without a name: %v, want exit status 2", err)
	}
}
