package target

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/converge-run/converge"
)

// TestHTTPRedactsCredentials checks that the configured credentials (header
// values, with and without their scheme, and the URL's password and query
// values) never reach an error or an output, even from a target that
// repeats them, and that the headers are still sent.
func TestHTTPRedactsCredentials(t *testing.T) {
	t.Parallel()
	const (
		bearer = "tok-Secret-0123456789"
		apiKey = "key-Secret-abcdef"
		pass   = "pw-Secret-é/?&"
		query  = "qs-Secret-42"
	)
	secrets := []string{bearer, apiKey, pass, url.QueryEscape(pass), query, `pw-Secret-é/?\u0026`}
	for _, status := range []int{http.StatusOK, http.StatusUnauthorized, http.StatusServiceUnavailable} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "Bearer "+bearer || r.Header.Get("X-Api-Key") != apiKey {
					t.Errorf("headers not sent: %v", r.Header)
				}
				user, pw, _ := r.BasicAuth()
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_ = json.NewEncoder(w).Encode(map[string]string{
					"echo_auth": r.Header.Get("Authorization"), "echo_token": strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "),
					"echo_key": r.Header.Get("X-Api-Key"), "echo_url": r.URL.String(), "echo_query": r.URL.Query().Get("token"),
					"echo_basic": user + ":" + pw,
				})
			})
			u, _ := url.Parse(srv.URL + "/hook?token=" + url.QueryEscape(query))
			u.User = url.UserPassword("svc", pass)
			h := newHTTP(t, HTTPConfig{URL: u.String(), Headers: map[string]string{
				"Authorization": "Bearer " + bearer, "X-Api-Key": apiKey, "Accept": "json",
			}})
			res, err := h.Call(t.Context(), testRequest())
			var text string
			if status == http.StatusOK {
				if err != nil {
					t.Fatalf("Call: %v", err)
				}
				if !json.Valid(res.Output) || !strings.Contains(string(res.Output), "***") {
					t.Errorf("output %s, want JSON with the credentials redacted", res.Output)
				}
				text = string(res.Output)
			} else {
				var ae *converge.AttemptError
				if err == nil || !errors.As(err, &ae) {
					t.Fatalf("Call: %v, want an attempt error", err)
				}
				text = ae.Err.Message + " " + err.Error()
				if !strings.Contains(text, "***") || !strings.Contains(text, "echo_auth") {
					t.Errorf("error %q, want the answer with the credentials redacted", text)
				}
			}
			for _, s := range secrets {
				if strings.Contains(text, s) {
					t.Errorf("%q appears in %s", s, text)
				}
			}
		})
	}
}
