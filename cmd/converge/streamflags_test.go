package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// TestStreamFlagsAgreeWithAPI checks that submit refuses, before sending,
// the flags whose body a real API process answers 422 for, naming the same
// fields with the same messages (the kind's message differs: the CLI
// checks a kind's form, the server whether it is configured).
func TestStreamFlagsAgreeWithAPI(t *testing.T) {
	t.Parallel()
	admin := store.NewTokenSecret()
	p := secStart(t, map[string]string{"DATABASE_URL": pgtest.URL(t), "CONVERGE_ADMIN_TOKEN": admin}, "api")
	vars := map[string]string{"CONVERGE_URL": p.url, "CONVERGE_TOKEN": admin}
	for _, c := range []struct {
		kind, resource string
		version        int64
		payload        string
	}{
		{"build", "app", 0, ""},
		{"build", "app", -1, ""},
		{"build", "/app", 1, ""},
		{"build", "", 1, ""},
		{"build", "a b", 1, ""},
		{"build", strings.Repeat("r", 201), 1, ""},
		{"Build", "app", 1, ""},
		{"build", "app", 1, "[1]"},
		{"build", "app", 1, `{"a":"\u0000"}`},
		{"build", "app", 1, strings.Repeat("[", 200) + strings.Repeat("]", 200)},
		{"-x", ".app", 0, "7"},
	} {
		body := map[string]any{"kind": c.kind, "resource": c.resource, "version": c.version}
		args := []string{"submit", "--kind", c.kind, "--resource", c.resource, "--version", strconv.FormatInt(c.version, 10), "--json"}
		if c.payload != "" {
			body["payload"] = json.RawMessage(c.payload)
			args = append(args, "--payload", c.payload)
		}
		b, _ := json.Marshal(body)
		res := secDo(t, http.MethodPost, p.url+"/v1/events", admin, string(b))
		var server usageProblemBody
		if res.status != http.StatusUnprocessableEntity || json.Unmarshal([]byte(res.body), &server) != nil {
			t.Errorf("POST %s: %d %s, want 422", b, res.status, res.body)
			continue
		}
		stdout, stderr, err := secRun(t, vars, args...)
		cli, perr := oneProblem(stdout)
		if code := exitCode(err, &strings.Builder{}); code != 2 || perr != nil || cli.Type != server.Type || cli.Status != server.Status {
			t.Errorf("converge %q: exit %d, stdout %q (%v), stderr %q; want 2 and the server's problem %s", args, code, stdout, perr, stderr, res.body)
			continue
		}
		if len(cli.Errors) != len(server.Errors) {
			t.Errorf("converge %q: errors %+v, the server's %+v", args, cli.Errors, server.Errors)
			continue
		}
		for i, fe := range cli.Errors {
			if se := server.Errors[i]; fe.Field != se.Field || fe.Field != "kind" && fe.Message != se.Message {
				t.Errorf("converge %q: error %+v, the server's %+v", args, fe, se)
			}
		}
	}
	// What the server alone knows is left to it: exit 1 with its problem.
	stdout, _, err := secRun(t, vars, "submit", "--kind", "no-such-kind", "--resource", "app", "--version", "1", "--json")
	if code := exitCode(err, &strings.Builder{}); code != 1 || !strings.Contains(stdout, `unknown kind \"no-such-kind\"`) {
		t.Errorf("an unknown kind: exit %d, stdout %q; want 1 and the server's problem", code, stdout)
	}
}
