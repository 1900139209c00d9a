package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/converge-run/converge"
)

// defaultURL is the API the clients talk to without --url or CONVERGE_URL.
const defaultURL = "http://127.0.0.1:8080"

// apiClient is a client of converge's HTTP API.
type apiClient struct {
	base  string
	token string
	http  *http.Client
	// problems, with --json, gets the problem body of a failed request;
	// printed is then set (env.problemPrinted).
	problems io.Writer
	printed  *bool
	// traceParent is $TRACEPARENT, sent as the traceparent header: a
	// command run inside a trace (a CI step, an exec target) makes the
	// runs it creates join it.
	traceParent string
}

// clientFlags are the flags every API client command has.
type clientFlags struct {
	url   string
	token string
	json  bool
}

// add gives cmd and its subcommands the client flags.
func (f *clientFlags) add(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.url, "url", "", "API base URL (default $CONVERGE_URL, else "+defaultURL+")")
	cmd.PersistentFlags().StringVar(&f.token, "token", "", "API token (default $CONVERGE_TOKEN)")
	cmd.PersistentFlags().BoolVar(&f.json, "json", false, "print the API's JSON answer instead of a table")
}

// client is the API client of f: --url, else $CONVERGE_URL, else
// defaultURL; --token, else $CONVERGE_TOKEN.
func (e *env) client(f *clientFlags) (*apiClient, error) {
	base := f.url
	if base == "" {
		base = e.getenv("CONVERGE_URL")
	}
	if base == "" {
		base = defaultURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &usageError{fmt.Errorf("--url must be an http(s) URL, like %s", defaultURL)}
	}
	if u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return nil, &usageError{fmt.Errorf("--url must be the server's base URL, without a query or fragment, like %s", defaultURL)}
	}
	token := f.token
	if token == "" {
		token = e.getenv("CONVERGE_TOKEN")
	}
	if strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		// It could not be sent as a header; the server's tokens are
		// printable ASCII.
		return nil, &usageError{fmt.Errorf("--token (or $CONVERGE_TOKEN) must be printable ASCII without spaces")}
	}
	c := &apiClient{base: strings.TrimRight(base, "/"), token: token, http: &http.Client{Timeout: time.Minute},
		traceParent: e.getenv("TRACEPARENT")}
	if f.json {
		c.problems, c.printed = e.stdout, &e.problemPrinted
	}
	return c, nil
}

// do sends a request with a JSON body (none when body is nil) and returns
// the answer's body; a non-2xx answer is a *problemError (with --json,
// its problem body is printed on c.problems).
func (c *apiClient) do(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.traceParent != "" {
		req.Header.Set("traceparent", c.traceParent)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.unavailable(fmt.Errorf("cannot reach the converge API at %s: %w", redactURL(c.base), errors.Unwrap(err)))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, c.unavailable(fmt.Errorf("read the answer of %s %s: %w", method, path, err))
	}
	if resp.StatusCode/100 != 2 {
		p, line := answerProblem(resp, data)
		if c.problems != nil {
			fmt.Fprintln(c.problems, string(line))
			c.notePrinted()
		}
		return nil, p
	}
	return data, nil
}

// unavailable returns err, a request that got no answer (the API
// unreachable, the connection lost), after printing, with --json, the
// problem body of it: unavailable (503), the slug the API answers when it
// cannot serve, with err as the detail.
func (c *apiClient) unavailable(err error) error {
	if c.problems != nil {
		printProblem(c.problems, &converge.AppError{Code: converge.EUNAVAILABLE, Message: err.Error()})
		c.notePrinted()
	}
	return err
}

// notePrinted records that a problem body was printed for the command.
func (c *apiClient) notePrinted() {
	if c.printed != nil {
		*c.printed = true
	}
}

// callAPI sends method path (with query, and body as JSON when not nil)
// through the API client of f, and returns the answer as it came (what
// --json prints) and decoded into a T.
func callAPI[T any](ctx context.Context, e *env, f *clientFlags, method, path string, query url.Values, body any) ([]byte, *T, error) {
	c, err := e.client(f)
	if err != nil {
		return nil, nil, err
	}
	data, err := c.do(ctx, method, path, query, body)
	if err != nil {
		return nil, nil, err
	}
	v := new(T)
	if err := json.Unmarshal(data, v); err != nil {
		return nil, nil, fmt.Errorf("read the answer: %w", err)
	}
	return data, v, nil
}

// redactURL returns u without its password, for messages.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "the configured URL"
	}
	return p.Redacted()
}
