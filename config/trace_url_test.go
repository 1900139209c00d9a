package config_test

import (
	"errors"
	"testing"

	"github.com/converge-run/converge/config"
)

// TestTraceURL checks ui.trace_url: a template with {trace_id} on an http
// or https URL is kept as given; anything else stops start-up naming the
// key.
func TestTraceURL(t *testing.T) {
	t.Parallel()
	cfg, err := load(t, "ui: {trace_url: 'http://127.0.0.1:16686/trace/{trace_id}'}\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.UI.TraceURL != "http://127.0.0.1:16686/trace/{trace_id}" {
		t.Errorf("ui.trace_url = %q", cfg.UI.TraceURL)
	}
	if cfg, err := load(t, "listen: 127.0.0.1:8080\n", nil); err != nil || cfg.UI.TraceURL != "" {
		t.Errorf("without ui: %v, trace_url %q; want none", err, cfg.UI.TraceURL)
	}
	for _, bad := range []string{
		"http://127.0.0.1:16686/trace/",   // no {trace_id}
		"/trace/{trace_id}",               // not absolute
		"javascript:alert(1)//{trace_id}", // not http
		"ftp://viewer/{trace_id}",         // not http
		"http://[::1/{trace_id}",          // not a URL
	} {
		_, err := load(t, "ui: {trace_url: '"+bad+"'}\n", nil)
		var ke *config.KeyError
		if !errors.As(err, &ke) || ke.Key != "ui.trace_url" {
			t.Errorf("ui.trace_url %q: %v, want an error naming ui.trace_url", bad, err)
		}
	}
	_, err = load(t, "ui: {trace_link: x}\n", nil)
	if err == nil {
		t.Error("ui.trace_link (unknown) loaded")
	}
}
