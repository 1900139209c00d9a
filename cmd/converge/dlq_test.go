package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/test/pgtest"
)

// TestDLQBulkSkippedJSON: a bulk redrive or discard in which dead letters
// are skipped fails (exit 1) and, with --json, prints the API's answer as
// the one JSON document on standard output, naming what was skipped: no
// made-up internal problem after it.
func TestDLQBulkSkippedJSON(t *testing.T) {
	t.Parallel()
	admin := store.NewTokenSecret()
	p := secStart(t, map[string]string{"DATABASE_URL": pgtest.URL(t), "CONVERGE_ADMIN_TOKEN": admin}, "api")
	vars := map[string]string{"CONVERGE_URL": p.url, "CONVERGE_TOKEN": admin}
	ids := []string{"01a24268-a25a-7895-b0db-fc5edf076d27", "01a24268-a25a-7895-b0db-fc5edf076d28"}
	for _, action := range []string{"redrive", "discard"} {
		stdout, stderr, err := secRun(t, vars, append([]string{"dlq", action, "--json"}, ids...)...)
		dec := json.NewDecoder(strings.NewReader(stdout))
		var res converge.DeadLetterBulkResult
		derr := dec.Decode(&res)
		var more json.RawMessage
		extra := dec.Decode(&more)
		if code := exitCode(err, &strings.Builder{}); code != 1 || derr != nil || len(res.Skipped) != 2 || len(res.Done) != 0 || extra != io.EOF {
			t.Errorf("dlq %s of 2 unknown ids --json: exit %d, stdout %q (%v, then %v), stderr %q; want 1 and one answer with both skipped",
				action, code, stdout, derr, extra, stderr)
		}
		if !strings.Contains(stderr, "2 of 2 dead letters were skipped") {
			t.Errorf("dlq %s: stderr %q, want what was skipped", action, stderr)
		}
	}
}
