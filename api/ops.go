package api

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"net/http"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

//go:embed openapi.json
var openAPIDoc []byte

// ErrSchemaNotCurrent is what Config.SchemaCurrent returns (wrapped) when
// the schema really is behind (or ahead of) this binary; any other error of
// it is a database that could not be asked.
var ErrSchemaNotCurrent = errors.New("schema not current")

// readyProbeTimeout bounds each statement and lock wait of the readiness
// probe: a database that cannot answer a one-row read within it is too
// slow to serve.
const readyProbeTimeout = time.Second

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadyz answers 200 when the database answers, takes writes, serves
// converge_streams within readyProbeTimeout and the schema is current, and
// otherwise 503 with the reason (SPEC §15): database unreachable, database
// read-only, database too slow, or schema not current.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*readyProbeTimeout)
	defer cancel()
	reason := s.store.Probe(ctx, readyProbeTimeout)
	if reason == "" && s.cfg.SchemaCurrent != nil {
		switch err := s.cfg.SchemaCurrent(ctx); {
		case errors.Is(err, ErrSchemaNotCurrent):
			reason = "schema not current"
		case err != nil:
			reason = store.ReasonUnreachable
			if errors.Is(err, context.DeadlineExceeded) {
				reason = store.ReasonTooSlow
			}
		}
	}
	if reason != "" {
		writeNotReady(w, r, reason)
		return
	}
	s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ready"})
}

// readyProblem is the 503 of /readyz: the unavailable problem, whose
// detail is the reason, with the reason again as a member of its own.
type readyProblem struct {
	Problem
	Reason string `json:"reason"`
}

// writeNotReady answers /readyz 503 unavailable for reason (SPEC §4: every
// error is a problem body; §15: with the real reason), with Retry-After.
func writeNotReady(w http.ResponseWriter, r *http.Request, reason string) {
	status, title := problemCode(converge.EUNAVAILABLE)
	p := readyProblem{Problem: Problem{Type: ProblemType(converge.EUNAVAILABLE), Title: title, Status: status,
		Detail: reason, RequestID: requestID(r)}, Reason: reason}
	var buf bytes.Buffer
	_ = encodeJSON(&buf, p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Retry-After", RetryAfterUnavailable)
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDoc)
}
