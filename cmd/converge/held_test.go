package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// TestHeldCommands runs "runs approve|reject", "quarantine
// list|release" and "audit list --target" against an API process.
func TestHeldCommands(t *testing.T) {
	t.Parallel()
	databaseURL := pgtest.URL(t)
	admin := store.NewTokenSecret()
	p := secStart(t, map[string]string{"DATABASE_URL": databaseURL, "CONVERGE_ADMIN_TOKEN": admin}, "api")
	vars := map[string]string{"CONVERGE_URL": p.url, "CONVERGE_TOKEN": admin}
	resource := "app/" + uuid.NewString()[:8]
	if _, stderr, err := secRun(t, vars, "submit", "--kind", "build", "--resource", resource, "--version", "1"); err != nil {
		t.Fatalf("submit: %v %s", err, stderr)
	}
	conn, err := pgx.Connect(context.Background(), databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(t.Context(), `UPDATE converge_streams SET failed_streak = 2, quarantined_at = now()
		WHERE kind = 'build' AND resource = $1`, resource); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := secRun(t, vars, "submit", "--kind", "build", "--resource", resource, "--version", "2", "--json")
	if err != nil {
		t.Fatalf("submit: %v %s", err, stderr)
	}
	var acc struct {
		Run struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"run"`
	}
	if err := json.Unmarshal([]byte(stdout), &acc); err != nil || acc.Run.Status != "held" {
		t.Fatalf("submit to a quarantined stream: %v %s", err, stdout)
	}

	stdout, stderr, err = secRun(t, vars, "quarantine", "list")
	if err != nil || !strings.Contains(stdout, resource) || !strings.Contains(stdout, acc.Run.ID) {
		t.Fatalf("quarantine list: %v\n%s%s", err, stdout, stderr)
	}
	_, stderr, err = secRun(t, vars, "runs", "approve", acc.Run.ID)
	if err == nil || !strings.Contains(stderr, "not-held") && !strings.Contains(stderr, "not held") {
		t.Fatalf("approve of a run held by quarantine only: %v %s", err, stderr)
	}
	stdout, stderr, err = secRun(t, vars, "quarantine", "release", "build", resource, "--reason", "fixed")
	if err != nil || !strings.Contains(stdout, acc.Run.ID) || !strings.Contains(stdout, "queued") {
		t.Fatalf("quarantine release: %v\n%s%s", err, stdout, stderr)
	}
	if _, _, err := secRun(t, vars, "quarantine", "release", "build", resource); err == nil {
		t.Fatal("a second release succeeded")
	}
	// The audit log by target: the release, by the stream it names.
	stdout, stderr, err = secRun(t, vars, "audit", "list", "--target", "build/"+resource)
	if lines := strings.Split(strings.TrimSpace(stdout), "\n"); err != nil || len(lines) != 2 ||
		!strings.Contains(lines[1], "quarantine.release") || !strings.Contains(lines[1], "admin") || !strings.Contains(lines[1], "fixed") {
		t.Fatalf("audit list --target build/%s: %v\n%s%s", resource, err, stdout, stderr)
	}
	if _, stderr, err := secRun(t, vars, "audit", "list", "--target", strings.Repeat("x", 265)); err == nil || !strings.Contains(stderr, "target") {
		t.Fatalf("audit list with an over-long target: %v %s", err, stderr)
	}
	if _, _, err := secRun(t, vars, "runs"); err == nil {
		t.Fatal("runs without a command succeeded")
	}
}

// TestDevReleaseStepOrder: converge dev's release workflow lists its steps
// in the order the README, its banner and docs/workflows.md write them
// (build, staging, canary, prod), as a configuration file's would be, not
// in name order (canary before staging).
func TestDevReleaseStepOrder(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("dev starts workers and a demo target")
	}
	admin := store.NewTokenSecret()
	p := secStart(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "CONVERGE_ADMIN_TOKEN": admin},
		"dev", "--listen", "127.0.0.1:0", "--demo-latency", "1ms")
	r := secDo(t, http.MethodPost, p.url+"/v1/workflow-runs", admin, `{"workflow":"release","resource":"app/web","version":1}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("start release = %d %s", r.status, r.body)
	}
	var got struct {
		WorkflowRun struct {
			Steps []struct {
				Name string `json:"name"`
			} `json:"steps"`
		} `json:"workflow_run"`
	}
	if err := json.Unmarshal([]byte(r.body), &got); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got.WorkflowRun.Steps {
		names = append(names, s.Name)
	}
	if want := "build,staging,canary,prod"; strings.Join(names, ",") != want {
		t.Errorf("steps %v, want %s", names, want)
	}
}
