package target

import (
	"slices"
	"strings"
)

// commandEnv returns environ (KEY=value entries, the worker's environment)
// without converge's own variables, which hold its credentials: those
// named CONVERGE_* (the admin token, the configuration's path...),
// DATABASE_URL and DATABASE_DIRECT_URL (with the database password), the
// libpq variables (PG followed by an upper-case letter: PGPASSWORD,
// PGHOST, PGPASSFILE, PGSERVICE...), the OTLP exporter's headers
// (OTEL_EXPORTER_OTLP_HEADERS and its _TRACES_, _METRICS_ and _LOGS_
// forms, which often carry the collector's credentials), and those named
// in hidden (the configuration's secret_env variables). Everything else
// (PATH, HOME, cloud credentials, KUBECONFIG, the other OTEL_* variables,
// TRACEPARENT...) is kept, in order. The result has room
// for extra more entries (Env and the per-call variables).
func commandEnv(environ, hidden []string, extra int) []string {
	env := make([]string, 0, len(environ)+extra)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !hiddenEnvName(name, hidden) {
			env = append(env, kv)
		}
	}
	return env
}

// hiddenEnvName reports whether the variable name is one commandEnv
// removes.
func hiddenEnvName(name string, hidden []string) bool {
	switch {
	case strings.HasPrefix(name, "CONVERGE_"), name == "DATABASE_URL", name == "DATABASE_DIRECT_URL":
		return true
	case len(name) > 2 && name[0] == 'P' && name[1] == 'G' && name[2] >= 'A' && name[2] <= 'Z':
		return true
	case name == "OTEL_EXPORTER_OTLP_HEADERS", name == "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
		name == "OTEL_EXPORTER_OTLP_METRICS_HEADERS", name == "OTEL_EXPORTER_OTLP_LOGS_HEADERS":
		return true
	}
	return slices.Contains(hidden, name)
}
