package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/telemetry"
)

// deliveryRuleJSON is one matching rule's part of a hook's answer.
type deliveryRuleJSON struct {
	Rule        int                      `json:"rule"`
	Outcome     converge.DeliveryOutcome `json:"outcome"`
	Event       *converge.Event          `json:"event,omitempty"`
	WorkflowRun *workflowRun             `json:"workflow_run,omitempty"`
}

// deliveryAnswer is the answer to POST /hooks/{source}.
type deliveryAnswer struct {
	Delivery *converge.Delivery `json:"delivery"`
	Accepted []deliveryRuleJSON `json:"accepted"`
}

// handleHook receives a delivery of an event source (SPEC §12). The body
// is read up to max_payload_bytes (413 past it, without reading the rest)
// and handed to Config.Hooks, which verifies the signature before
// anything else: 202 with what the matching rules started, 200 for a
// delivery sent again (the bytes of its first answer, which the delivery
// row keeps: res.Answer). A GitHub ping is a delivery as any other.
func (s *Server) handleHook(w http.ResponseWriter, r *http.Request) {
	// Every problem written below is counted as a rejected event
	// (countHookRejection), as countEventRejections counts those of POST
	// /v1/events.
	o := &eventOutcome{}
	r = r.WithContext(context.WithValue(r.Context(), eventOutcomeKey{}, o))
	defer s.countHookRejection(o)
	if s.cfg.Hooks == nil {
		writeProblem(w, r, converge.Errorf(converge.ENOTFOUND, "no source %.64q", chi.URLParam(r, "source")))
		return
	}
	if err := unsupportedEncoding(r); err != nil {
		writeProblem(w, r, err)
		return
	}
	limit := s.cfg.MaxPayloadBytes
	tooLarge := converge.Errorf(converge.ETOOLARGE, "the body is over max_payload_bytes (%d)", limit)
	if r.ContentLength > limit {
		writeProblem(w, r, tooLarge)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeProblem(w, r, tooLarge)
		return
	}
	if err != nil {
		writeProblem(w, r, converge.Errorf(converge.EMALFORMED, "read body: %s", err))
		return
	}
	name := chi.URLParam(r, "source")
	ctx, span := telemetry.StartDelivery(r.Context(), name)
	res, err := s.cfg.Hooks(ctx, name, r.Header, body)
	telemetry.EndDelivery(span, res, err)
	s.countDelivery(name, res)
	if err != nil {
		if res != nil && converge.ErrorCode(err) == converge.EMAPPINGFAILED {
			o.kind = res.RejectedKind
		}
		s.writeError(w, r, err)
		return
	}
	status := http.StatusAccepted
	if res.Replay {
		status = http.StatusOK
	}
	body = res.Answer
	if body == nil { // no renderer given, or recorded before answers were kept
		if body, err = DeliveryAnswerJSON(res); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	// The body echoes the sender's payload: nosniff, as every other JSON
	// answer (writeJSON), on the first answer and its replays alike.
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// DeliveryAnswerJSON is the body of the answer to a recorded delivery
// (SPEC §12): {"delivery", "accepted": [{"rule", "outcome", "event"?,
// "workflow_run"?}]}, encoded as writeJSON encodes. The receiver renders
// it in the delivery's transaction (source.ReceiverParams.Answer) and the
// delivery keeps it, so that the same delivery sent again is answered
// with exactly these bytes.
func DeliveryAnswerJSON(res *converge.DeliveryResult) ([]byte, error) {
	out := deliveryAnswer{Delivery: res.Delivery, Accepted: make([]deliveryRuleJSON, len(res.Accepted))}
	for i, a := range res.Accepted {
		out.Accepted[i] = deliveryRuleJSON{Rule: a.Rule, Outcome: a.Outcome, Event: a.Event}
		if a.WorkflowRun != nil {
			wr := newWorkflowRun(a.WorkflowRun)
			out.Accepted[i].WorkflowRun = &wr
		}
	}
	var buf bytes.Buffer
	if err := encodeJSON(&buf, out); err != nil { // as writeJSON: no HTML escaping
		return nil, fmt.Errorf("encode delivery answer: %w", err)
	}
	return buf.Bytes(), nil
}

// countHookRejection counts a problem answered to POST /hooks/{source}
// in converge_events_rejected_total, as countEventRejections counts those
// of POST /v1/events: a 4xx answer, by its problem slug, under the kind of
// the rule whose mapping failed (o.kind), or unknown (a rule that starts a
// workflow, or a refusal before any rule: signature, media type, body).
func (s *Server) countHookRejection(o *eventOutcome) {
	if o.code == "" {
		return
	}
	if status, _ := problemCode(o.code); status >= 400 && status < 500 {
		s.cfg.Metrics.EventRejected(o.kind, o.code)
	}
}

// countDelivery counts a delivery recorded for the first time (a redelivery
// answered with its first answer and a refused call are not deliveries
// recorded): its status, and the events it accepted, with the
// source's name as their source (the workflow runs it started are counted
// by the store, as every workflow run status). A rule's stale-version or version-conflict outcome is a
// rejected event, counted under the rule's kind (unknown for a rule that
// starts a workflow), as POST /v1/events counts its 409 of that slug.
func (s *Server) countDelivery(source string, res *converge.DeliveryResult) {
	if res == nil || res.Replay || res.Delivery == nil {
		return
	}
	s.cfg.Metrics.DeliveryReceived(source, string(res.Delivery.Status))
	for _, a := range res.Accepted {
		if a.Outcome == converge.OutcomeStaleVersion || a.Outcome == converge.OutcomeVersionConflict {
			s.cfg.Metrics.EventRejected(a.Kind, string(a.Outcome))
		}
		if a.Outcome != converge.OutcomeAccepted {
			continue
		}
		if a.Event != nil {
			s.cfg.Metrics.EventAccepted(a.Event.Kind, source)
		}
		if a.WorkflowRun != nil {
			for _, st := range a.WorkflowRun.Steps {
				if st.EventID != nil {
					s.cfg.Metrics.EventAccepted(st.Kind, telemetry.SourceWorkflow)
				}
			}
		}
	}
}

// ParseDeliveryListParams reads the query of GET /v1/deliveries.
func ParseDeliveryListParams(r *http.Request) (converge.DeliveryListParams, error) {
	var p converge.DeliveryListParams
	if err := queryParams(r, "source", "status", "cursor", "limit"); err != nil {
		return p, err
	}
	q := r.URL.Query()
	p.Source = q.Get("source")
	if len(p.Source) > 63 || strings.ContainsRune(p.Source, 0) {
		return p, invalid("source", "must be a source name")
	}
	switch st := converge.DeliveryStatus(q.Get("status")); st {
	case "", converge.DeliveryAccepted, converge.DeliveryIgnored, converge.DeliveryRejected:
		p.Status = st
	default:
		return p, invalid("status", fmt.Sprintf("must be one of accepted, ignored, rejected, not %q", truncate(string(st), 40)))
	}
	var err error
	p.Cursor, p.Limit, err = parsePage(q)
	return p, err
}

func (s *Server) handleDeliveryList(w http.ResponseWriter, r *http.Request) {
	serveList(s, w, r, ParseDeliveryListParams, s.store.DeliveryList)
}

func (s *Server) handleDeliveryGet(w http.ResponseWriter, r *http.Request) {
	serveGet(s, w, r, s.store.DeliveryGet)
}
