package source

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

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
		if d.Type != converge.SourceGitHub && !d.BearerToken {
			k, err := StandardKey(d.Secret)
			if err != nil {
				return nil, &RuleError{Source: d.Name, Rule: SourceField, Field: "secret_env",
					Err: fmt.Errorf("the secret is not a Standard Webhooks secret (base64, with or without whsec_): %w", err)}
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
	// Authenticate resolves a bearer token to its actor, as the API does
	// (api.Server.Authenticate), for the sources authenticated by a token
	// (SourceDef.BearerToken); without it their deliveries are refused.
	Authenticate func(ctx context.Context, token string) (*converge.Actor, error)
	// MaxPayloadBytes is the largest payload a rule may build, as for a
	// payload submitted to the API (max_payload_bytes); 0 is the
	// configuration's default, DefaultMaxPayloadBytes.
	MaxPayloadBytes int64
	// Answer renders the answer to a recorded delivery (api.DeliveryAnswerJSON):
	// the bytes are kept with the delivery, so that a redelivery is
	// answered with exactly them (store.DeliveryRecordParams.Answer).
	// Without it, a redelivery's events and workflow runs are read again.
	Answer func(*converge.DeliveryResult) ([]byte, error)
}

// DefaultMaxPayloadBytes is max_payload_bytes when not configured (SPEC §4).
const DefaultMaxPayloadBytes = 262144

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
	if p.MaxPayloadBytes <= 0 {
		p.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	return &Receiver{set: set, p: p}
}

// Receive handles one delivery to source name: it verifies the signature
// before anything else, reads the body, evaluates the rules and records
// the delivery with what they start. Errors carry application codes:
// ENOTFOUND (no such source), EBADSIGNATURE, EUNSUPPORTEDMEDIA,
// EMALFORMED, EINVALID (no delivery id; a body the rules cannot read as
// sent: decodeBody), EMAPPINGFAILED (after the rejected delivery row was
// written).
func (r *Receiver) Receive(ctx context.Context, name string, h http.Header, body []byte) (*converge.DeliveryResult, error) {
	src, ok := r.set.sources[name]
	if !ok {
		return nil, converge.Errorf(converge.ENOTFOUND, "no source %.64q", name)
	}
	switch {
	case src.def.BearerToken:
		if err := r.authenticate(ctx, h); err != nil {
			return nil, err
		}
	case src.def.Type == converge.SourceGitHub:
		if err := VerifyGitHub(src.key, h.Get("X-Hub-Signature-256"), body); err != nil {
			return nil, err
		}
	default:
		if err := VerifyStandard(src.key, h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature"), body, r.p.Now()); err != nil {
			return nil, err
		}
	}
	d, err := src.parse(h, body)
	if err != nil {
		return nil, err
	}
	if msg := deliveryIDProblem(d.id); msg != "" {
		return nil, &converge.AppError{Code: converge.EINVALID,
			Message: "the delivery has no id (X-GitHub-Delivery, webhook-id or the CloudEvent id) of 1 to 200 characters of valid UTF-8 without NUL",
			Fields:  []converge.FieldError{{Field: src.idField(), Message: msg}}}
	}

	vars := map[string]any{"body": d.doc, "headers": d.headers}
	p := store.DeliveryRecordParams{Source: name, DeliveryID: d.id, Headers: storedHeaders(d.headers), Answer: r.p.Answer}
	p.Body, _ = json.Marshal(d.doc) // parsed from JSON: it encodes
	for i, rl := range src.rules {
		m, err := rl.eval(i, vars)
		if err == nil && m != nil && int64(len(m.Payload)) > r.p.MaxPayloadBytes {
			err = mappingFailed(i, "payload", fmt.Sprintf("is %d bytes, over max_payload_bytes (%d)", len(m.Payload), r.p.MaxPayloadBytes))
		}
		if err == nil && m != nil && m.Workflow != "" {
			// The workflow's steps must resolve to valid keys, of streams
			// of their own, for the resource (as POST /v1/workflow-runs's
			// 422 naming resource).
			if def := r.p.Workflows[m.Workflow]; def != nil {
				if _, serr := def.StepResources(m.Resource); serr != nil {
					err = mappingFailed(i, "resource", serr.Error())
				}
			}
		}
		if appErr, ok := err.(*converge.AppError); ok {
			p.Failure, p.FailureKind = appErr, rl.def.Kind
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

// authenticate checks the bearer token of a delivery to a source
// authenticated by a token: any valid token (every role includes
// submitter), or the API's 401 unauthorized.
func (r *Receiver) authenticate(ctx context.Context, h http.Header) error {
	if r.p.Authenticate == nil {
		return converge.Errorf(converge.EUNAUTHORIZED, "tokens are not checked here")
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(h.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return converge.Errorf(converge.EUNAUTHORIZED, "a bearer token is required")
	}
	_, err := r.p.Authenticate(ctx, strings.TrimSpace(token))
	return err
}

// parsed is a delivery's body and headers as the rules see them.
type parsed struct {
	doc     any
	headers map[string]string
	id      string
}

// idField names where the source's deliveries carry their id, as a
// validation error's field: the header (lower-case, as rules see it) or,
// for a CloudEvent, its id attribute.
func (src *compiledSource) idField() string {
	switch src.def.Type {
	case converge.SourceGitHub:
		return "x-github-delivery"
	case converge.SourceCloudEvents:
		return "id"
	default:
		return "webhook-id"
	}
}

// parse reads a delivery of the source (its signature checked or not):
// the body (for a CloudEvent, in structured form), the headers with
// lower-case names and the delivery id. A GitHub ping is a delivery as
// any other: the rules see it (headers["x-github-event"] == "ping").
func (src *compiledSource) parse(h http.Header, body []byte) (*parsed, error) {
	d := &parsed{}
	switch src.def.Type {
	case converge.SourceGitHub:
		d.id = h.Get("X-GitHub-Delivery")
	default:
		d.id = h.Get("Webhook-Id")
	}
	switch src.def.Type {
	case converge.SourceCloudEvents:
		ev, id, err := cloudEvent(h, body)
		if err != nil {
			return nil, err
		}
		d.doc, d.id = ev, id
	default:
		if !jsonMedia(mediaType(h)) {
			return nil, unsupported("the body must be application/json or application/*+json")
		}
		if err := decodeBody(body, &d.doc); err != nil {
			return nil, err
		}
	}
	d.headers = make(map[string]string, len(h))
	for k, vs := range h {
		d.headers[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	return d, nil
}

// unstoredHeaders are the headers a delivery row does not keep:
// credentials and signatures.
var unstoredHeaders = map[string]bool{
	"authorization": true, "cookie": true, "proxy-authorization": true,
	"x-hub-signature": true, "x-hub-signature-256": true, "webhook-signature": true,
}

// storedHeaders are the headers of a delivery as its row keeps them.
func storedHeaders(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		if !unstoredHeaders[k] {
			out[k] = v
		}
	}
	return out
}

// item is the store's item for a mapping, with its kinds' run policies;
// its runs are created under traceParent (the delivery's span).
func (r *Receiver) item(m *Mapping, traceParent string) store.DeliveryItem {
	if m.Kind != "" {
		ev := store.NewEventAcceptParams(converge.EventSubmission{Kind: m.Kind, Resource: m.Resource, Version: m.Version, Payload: m.Payload},
			r.p.Kinds[m.Kind], traceParent)
		return store.DeliveryItem{Rule: m.Rule, Event: &ev}
	}
	def := r.p.Workflows[m.Workflow]
	return store.DeliveryItem{Rule: m.Rule, Workflow: &store.WorkflowRunStartParams{
		WorkflowRunStart: converge.WorkflowRunStart{Workflow: m.Workflow, Resource: m.Resource, Version: m.Version, Payload: m.Payload},
		Definition:       def, Policies: store.StepPolicies(def, r.p.Kinds), TraceParent: traceParent,
	}}
}

// deliveryIDProblem says what is wrong with a delivery's id, or "": it is
// 1 to 200 characters of valid UTF-8 without NUL, as the deliveries table
// stores it and a text filter takes it (SPEC §4).
func deliveryIDProblem(id string) string {
	switch {
	case id == "":
		return "is required"
	case !utf8.ValidString(id) || strings.ContainsRune(id, 0):
		return "must be valid UTF-8 without NUL characters"
	case utf8.RuneCountInString(id) > 200:
		return "is over 200 characters"
	}
	return ""
}
