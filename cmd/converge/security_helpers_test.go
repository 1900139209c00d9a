package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/converge-run/converge/test/testkit"
)

// secEnv returns a getenv of vars (and nothing else of the environment).
func secEnv(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// secRun runs the command line in process, as main does, and returns its
// output and error.
func secRun(t *testing.T, vars map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	err = run(ctx, args, secEnv(vars), &out, &errOut)
	if err != nil {
		// What main would print.
		exitCode(err, &errOut)
	}
	return out.String(), errOut.String(), err
}

// secRunUntil is secRun for serving commands, which run until stopped: it
// ends the command once its log holds one of msgs, or after d.
func secRunUntil(t *testing.T, d time.Duration, msgs []string, vars map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut testkit.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, secEnv(vars), &out, &errOut) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for err == nil {
		select {
		case err = <-done:
			if err != nil {
				exitCode(err, &errOut)
			}
			return out.String(), errOut.String(), err
		case <-tick.C:
			for _, m := range msgs {
				if strings.Contains(errOut.String(), m) {
					cancel()
				}
			}
		}
	}
	return out.String(), errOut.String(), err
}

// secProc is a `converge serve|api|worker` running in process.
type secProc struct {
	url    string // http://addr, for API processes
	stdout *testkit.Buffer
	logs   *testkit.Buffer // stderr: the JSON log
	stop   func()
}

// secStart runs `converge args...` in process until the test ends and, for
// a process with an API, waits until it listens.
func secStart(t *testing.T, vars map[string]string, args ...string) *secProc {
	t.Helper()
	if vars["CONVERGE_LISTEN"] == "" {
		vars["CONVERGE_LISTEN"] = "127.0.0.1:0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &secProc{stdout: &testkit.Buffer{}, logs: &testkit.Buffer{}}
	// exited is closed when run has returned runErr.
	var runErr error
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		runErr = run(ctx, args, secEnv(vars), p.stdout, p.logs)
	}()
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-exited:
				if runErr != nil {
					t.Errorf("converge %s: %v\n%s", strings.Join(args, " "), runErr, p.logs)
				}
			case <-time.After(time.Minute):
				t.Errorf("converge %s did not stop", strings.Join(args, " "))
			}
		})
	}
	t.Cleanup(p.stop)
	if args[0] == "worker" {
		return p
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(p.logs.String(), "\n") {
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" && rec.Addr != "" {
				p.url = "http://" + rec.Addr
				return p
			}
		}
		select {
		case <-exited:
			t.Fatalf("converge %s exited: %v\n%s", strings.Join(args, " "), runErr, p.logs)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("converge %s did not listen in time:\n%s", strings.Join(args, " "), p.logs)
	return nil
}

// secResponse is an HTTP answer with its body read.
type secResponse struct {
	status int
	header http.Header
	body   string
}

// secDo sends a request with an optional bearer token and JSON body.
func secDo(t *testing.T, method, url, token, body string) secResponse {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("%s %s: read: %v", method, url, err)
	}
	return secResponse{status: resp.StatusCode, header: resp.Header, body: string(data)}
}

// secNoSecrets fails when any secret appears in any of the texts.
func secNoSecrets(t *testing.T, texts map[string]string, secrets ...string) {
	t.Helper()
	for where, text := range texts {
		for _, s := range secrets {
			if s != "" && strings.Contains(text, s) {
				t.Errorf("%s contains the secret %q:\n%s", where, s, text)
			}
		}
	}
}
