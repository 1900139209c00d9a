package source

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/telemetry"
)

// Set is the configured sources with their rules compiled.
type Set struct {
	sources map[string]*compiledSource
}

type compiledSource struct {
	def   converge.SourceDef
	key   []byte // the HMAC key
	rules []*rule
}

// Compile compiles and type-checks every rule of defs: a broken
// expression is a *RuleError naming it (config.Keyed makes it the
// *config.KeyError start-up stops with).
func Compile(defs []converge.SourceDef) (*Set, error) {
	env, err := celEnv()
	if err != nil {
		return nil, err
	}
	set := &Set{sources: map[string]*compiledSource{}}
	for _, d := range defs {
		cs := &compiledSource{def: d, key: []byte(d.Secret)}
		if d.Type != converge.SourceGitHub {
			k, err := StandardKey(d.Secret)
			if err != nil {
				return nil, &RuleError{Source: d.Name, Rule: -1, Field: "secret_env", Err: err}
			}
			cs.key = k
		}
		for i, r := range d.Rules {
			cr, err := compileRule(env, d.Name, i, r)
			if err != nil {
				return nil, err
			}
			cs.rules = append(cs.rules, cr)
		}
		set.sources[d.Name] = cs
	}
	return set, nil
}

// ReceiverParams configures a Receiver.
type ReceiverParams struct {
	Store     *store.Store
	Kinds     converge.KindPolicies
	Workflows map[string]*converge.Workflow
	// Now is the clock webhook-timestamp is checked against (time.Now).
	Now func() time.Time
}

// Receiver receives deliveries for a Set.
type Receiver struct {
	set *Set
	p   ReceiverParams
}

// Receiver returns the receiver of the set's deliveries.
func (set *Set) Receiver(p ReceiverParams) *Receiver {
	if p.Now == nil {
		p.Now = time.Now
	}
	return &Receiver{set: set, p: p}
}

// Receive handles one delivery to source name: it verifies the signature
// before anything else, reads the body, evaluates the rules and records
// the delivery with what they start. Errors carry application codes:
// ENOTFOUND (no such source), EBADSIGNATURE, EUNSUPPORTEDMEDIA,
// EMALFORMED, EINVALID (no delivery id), EMAPPINGFAILED (after the
// rejected delivery row was written).
func (r *Receiver) Receive(ctx context.Context, name string, h http.Header, body []byte) (*converge.DeliveryResult, error) {
	src, ok := r.set.sources[name]
	if !ok {
		return nil, converge.Errorf(converge.ENOTFOUND, "no source %q", name)
	}
	var deliveryID string
	switch src.def.Type {
	case converge.SourceGitHub:
		if err := VerifyGitHub(src.key, h.Get("X-Hub-Signature-256"), body); err != nil {
			return nil, err
		}
		deliveryID = h.Get("X-GitHub-Delivery")
	default:
		if err := VerifyStandard(src.key, h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature"), body, r.p.Now()); err != nil {
			return nil, err
		}
		deliveryID = h.Get("Webhook-Id")
	}

	var doc any
	switch src.def.Type {
	case converge.SourceCloudEvents:
		ev, id, err := cloudEvent(h, body)
		if err != nil {
			return nil, err
		}
		doc, deliveryID = ev, id
	default:
		if !jsonMedia(mediaType(h)) {
			return nil, unsupported("the body must be application/json or application/*+json")
		}
		if src.def.Type == converge.SourceGitHub && h.Get("X-GitHub-Event") == "ping" {
			return &converge.DeliveryResult{Ping: true}, nil
		}
		if err := json.Unmarshal(body, &doc); err != nil {
			return nil, malformed(err)
		}
	}
	if deliveryID == "" || len(deliveryID) > 200 {
		return nil, &converge.AppError{Code: converge.EINVALID, Message: "the delivery has no id (X-GitHub-Delivery, webhook-id or the CloudEvent id) of at most 200 characters"}
	}

	headers := make(map[string]string, len(h))
	for k, vs := range h {
		headers[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	vars := map[string]any{"body": doc, "headers": headers}
	p := store.DeliveryRecordParams{Source: name, DeliveryID: deliveryID}
	for i, rl := range src.rules {
		m, err := rl.eval(i, vars)
		if appErr, ok := err.(*converge.AppError); ok {
			p.Failure = appErr
			p.Items = nil
			break
		}
		if m == nil {
			continue
		}
		p.Items = append(p.Items, r.item(m, telemetry.TraceParent(ctx)))
	}
	res, err := r.p.Store.DeliveryRecord(ctx, p)
	if err != nil {
		return nil, err
	}
	if res.Delivery.Status == converge.DeliveryRejected && !res.Replay {
		var e struct {
			Detail string                `json:"detail"`
			Errors []converge.FieldError `json:"errors"`
		}
		_ = json.Unmarshal(res.Delivery.Error, &e)
		return res, &converge.AppError{Code: converge.EMAPPINGFAILED, Message: e.Detail, Fields: e.Errors}
	}
	return res, nil
}

// item is the store's item for a mapping, with its kinds' run policies;
// its runs are created under traceParent (the delivery's span).
func (r *Receiver) item(m *Mapping, traceParent string) store.DeliveryItem {
	if m.Kind != "" {
		pol := r.p.Kinds[m.Kind]
		return store.DeliveryItem{Rule: m.Rule, Event: &store.EventAcceptParams{
			EventSubmission: converge.EventSubmission{Kind: m.Kind, Resource: m.Resource, Version: m.Version, Payload: m.Payload},
			MaxAttempts:     pol.MaxAttempts, Debounce: pol.Debounce, TraceParent: traceParent,
		}}
	}
	def := r.p.Workflows[m.Workflow]
	pols := make(map[string]store.StepPolicy, len(def.Steps))
	for _, st := range def.Steps {
		k := r.p.Kinds[st.Kind]
		pols[st.Kind] = store.StepPolicy{MaxAttempts: k.MaxAttempts, Debounce: k.Debounce}
	}
	return store.DeliveryItem{Rule: m.Rule, Workflow: &store.WorkflowRunStartParams{
		WorkflowRunStart: converge.WorkflowRunStart{Workflow: m.Workflow, Resource: m.Resource, Version: m.Version, Payload: m.Payload},
		Definition:       def, Policies: pols, TraceParent: traceParent,
	}}
}
