package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"github.com/converge-run/converge/config"
	"github.com/converge-run/converge/target"
	"github.com/converge-run/converge/test/testkit"
)

// TestExecTargetWithoutSecretEnv: the exec target buildKinds makes from
// the configuration runs its command without the variables every
// secret_env and signing_secret_env of the configuration names, nor
// converge's own (CONVERGE_ADMIN_TOKEN, DATABASE_URL, PGPASSWORD), and
// with the rest of the worker's environment. Not parallel: it sets the
// process's environment.
func TestExecTargetWithoutSecretEnv(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "dump.sh")
	syscall.ForkLock.Lock() // no parallel fork inherits the descriptor (ETXTBSY)
	err := os.WriteFile(script, []byte("#!/bin/sh\nenv > \"$OUT\"\n"), 0o755)
	syscall.ForkLock.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	path := testkit.ConfigFile(t, `kinds:
  build:
    target: {http: {url: http://127.0.0.1:9000/build, signing_secret_env: BUILD_SIGNING}}
  deploy:
    target: {exec: {command: [`+script+`]}}
sources:
  github:
    type: github
    secret_env: GH_HOOK_SECRET
    rules:
      - when: 'true'
        kind: deploy
        resource: body.repository.full_name
        version: auto
notifications:
  - url: http://127.0.0.1:9999/notify
    secret_env: NOTIFY_KEY
    on: [run.held]
`)
	env := map[string]string{
		"BUILD_SIGNING":        "whsec_c2lnbmluZy1zM2NyZXQtMDEyMw==",
		"GH_HOOK_SECRET":       "gh-s3cret",
		"NOTIFY_KEY":           "whsec_bm90aWZ5LXMzY3JldC0wMTIzNA==",
		"CONVERGE_ADMIN_TOKEN": "admin-s3cret",
		"DATABASE_URL":         "postgres://u:db-s3cret@127.0.0.1:1/x",
		"PGPASSWORD":           "pg-s3cret",
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	out := filepath.Join(dir, "env.txt")
	t.Setenv("OUT", out)
	t.Setenv("DEPLOY_REGION", "eu-west-1")

	cfg, err := config.Load(path, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	kinds, err := buildKinds(cfg, cfg.KindPolicies())
	if err != nil {
		t.Fatal(err)
	}
	req := target.Request{EventID: uuid.New(), RunID: uuid.New(), Attempt: 1, Kind: "deploy", Resource: "app", Version: 1}
	if _, err := kinds["deploy"].Target.Call(t.Context(), req); err != nil {
		t.Fatalf("Call: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "="); ok {
			got[k] = v
		}
	}
	for k := range env {
		if v, ok := got[k]; ok {
			t.Errorf("the command inherited %s=%q", k, v)
		}
	}
	if got["DEPLOY_REGION"] != "eu-west-1" || got["PATH"] != os.Getenv("PATH") || got["CONVERGE_RUN_ID"] != req.RunID.String() {
		t.Errorf("DEPLOY_REGION %q, PATH %q, CONVERGE_RUN_ID %q: want the worker's and the call's", got["DEPLOY_REGION"], got["PATH"], got["CONVERGE_RUN_ID"])
	}
}
