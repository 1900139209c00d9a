package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// TestReasonFlagIsUsage: a --reason the API refuses (over 1000 characters,
// not valid UTF-8) is a usage error of every command that takes one: exit
// 2 and, under --json, the server's own problem naming reason, before any
// request is sent; 1000 characters are sent (the server then answers for
// the dead letter, 404).
func TestReasonFlagIsUsage(t *testing.T) {
	t.Parallel()
	admin := store.NewTokenSecret()
	p := secStart(t, map[string]string{"DATABASE_URL": pgtest.URL(t), "CONVERGE_ADMIN_TOKEN": admin}, "api")
	vars := map[string]string{"CONVERGE_URL": p.url, "CONVERGE_TOKEN": admin}
	const id = "01a24268-a25a-7895-b0db-fc5edf076d27"
	long := strings.Repeat("r", 1001)
	b, _ := json.Marshal(map[string]string{"reason": long})
	res := secDo(t, http.MethodPost, p.url+"/v1/dead-letters/"+id+"/discard", admin, string(b))
	var server usageProblemBody
	if res.status != http.StatusUnprocessableEntity || json.Unmarshal([]byte(res.body), &server) != nil || len(server.Errors) != 1 {
		t.Fatalf("the server on a 1001-character reason: %d %s, want 422", res.status, res.body)
	}
	for _, reason := range []string{long, "bad \xff byte"} {
		for _, args := range [][]string{
			{"dlq", "discard", id}, {"dlq", "redrive", id}, {"dlq", "discard", id, id}, {"dlq", "redrive", "--dry-run", id},
			{"dlq", "purge"}, {"runs", "approve", id}, {"runs", "reject", id},
			{"quarantine", "release", "build", "app/web"}, {"workflow", "cancel", id},
		} {
			args := append(append([]string{}, args...), "--reason", reason, "--json")
			stdout, stderr, err := secRun(t, vars, args...)
			cli, perr := oneProblem(stdout)
			if code := exitCode(err, &strings.Builder{}); code != 2 || perr != nil || cli.Type != server.Type || cli.Status != server.Status ||
				len(cli.Errors) != 1 || cli.Errors[0] != server.Errors[0] {
				t.Errorf("converge %.60q: exit %d, stdout %q (%v), stderr %q; want 2 and the server's problem %s", args, code, stdout, perr, stderr, res.body)
			}
		}
	}
	stdout, _, err := secRun(t, vars, "dlq", "discard", id, "--reason", strings.Repeat("é", 1000), "--json")
	if code := exitCode(err, &strings.Builder{}); code != 1 || !strings.Contains(stdout, "not-found") {
		t.Errorf("a 1000-character reason: exit %d, stdout %q; want 1 and the server's 404", code, stdout)
	}
}
