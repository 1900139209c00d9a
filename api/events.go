package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
	"github.com/converge-run/converge/telemetry"
)

// envelopeBytes is room for the fields around the payload.
const envelopeBytes = 16 << 10

// eventRequest is the body of POST /v1/events.
type eventRequest struct {
	Kind     *string         `json:"kind"`
	Resource *string         `json:"resource"`
	Version  json.RawMessage `json:"version"`
	Payload  json.RawMessage `json:"payload"`
}

// DecodeEvent reads and validates the body of POST /v1/events. kinds are the
// configured kinds; maxPayload the payload limit in bytes.
func DecodeEvent(body io.Reader, kinds converge.KindPolicies, maxPayload int64) (*converge.EventSubmission, error) {
	sub, _, err := decodeEvent(body, kinds, maxPayload)
	return sub, err
}

// decodeEvent is DecodeEvent that also returns the configured kind the body
// names, "" when it names none (or could not be parsed), even when the body
// is refused: converge_events_rejected_total counts a refusal under it.
func decodeEvent(body io.Reader, kinds converge.KindPolicies, maxPayload int64) (*converge.EventSubmission, string, error) {
	var req eventRequest
	// configured is the kind the body names when it is a configured one.
	configured := func() string {
		if req.Kind == nil {
			return ""
		}
		if _, ok := kinds.Lookup(*req.Kind); !ok {
			return ""
		}
		return *req.Kind
	}
	if err := decodeStrictJSON(body, maxPayload, &req); err != nil {
		// A field of the wrong type or an unknown field still leaves the
		// object's other fields decoded; a body that is not JSON does not.
		if converge.ErrorCode(err) == converge.EINVALID {
			return nil, configured(), err
		}
		return nil, "", err
	}
	var fields fieldErrors
	sub := &converge.EventSubmission{}
	switch {
	case req.Kind == nil:
		fields.add("kind", "is required")
	default:
		if _, ok := kinds.Lookup(*req.Kind); !ok {
			fields.add("kind", fmt.Sprintf("unknown kind %q", truncate(*req.Kind, 64)))
			break
		}
		sub.Kind = *req.Kind
	}
	var err error
	sub.Resource, sub.Version, sub.Payload, err = streamFields(req.Resource, req.Version, req.Payload, maxPayload, &fields)
	if err != nil {
		return nil, sub.Kind, err
	}
	if err := fields.err(); err != nil {
		return nil, sub.Kind, err
	}
	return sub, sub.Kind, nil
}

// decodePayload checks the payload field of a request: absent is {}; else
// a JSON object of at most maxPayload bytes (ETOOLARGE) that passes
// CheckPayloadJSON. A problem with the field is returned as its message.
func decodePayload(raw json.RawMessage, maxPayload int64) (json.RawMessage, string, error) {
	switch p := bytes.TrimSpace(raw); {
	case raw == nil:
		return json.RawMessage(`{}`), "", nil
	case len(p) == 0 || p[0] != '{':
		return nil, "must be a JSON object", nil
	case int64(len(p)) > maxPayload:
		return nil, "", converge.Errorf(converge.ETOOLARGE, "the payload is %d bytes, over the limit of %d (max_payload_bytes)", len(p), maxPayload)
	default:
		if msg := CheckPayloadJSON(p); msg != "" {
			return nil, msg, nil
		}
		return p, "", nil
	}
}

func fieldSummary(fields []converge.FieldError) string {
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = f.Field + ": " + f.Message
	}
	return strings.Join(parts, "; ")
}

// parseVersion accepts a JSON integer from 1 to 2^63-1, nothing else.
func parseVersion(raw json.RawMessage) (int64, string) {
	if raw == nil {
		return 0, "is required"
	}
	s := string(bytes.TrimSpace(raw))
	if s == "" || s == "null" {
		return 0, "is required"
	}
	if s[0] == '"' {
		return 0, "must be a number, not a string"
	}
	if strings.ContainsAny(s, ".eE") {
		return 0, "must be a whole number"
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if strings.HasPrefix(s, "-") || strings.Trim(s, "0123456789") != "" {
			return 0, "must be a positive integer"
		}
		return 0, "must be at most 9223372036854775807"
	}
	if err := converge.ValidateVersion(v); err != nil {
		return 0, err.Error()
	}
	return v, ""
}

func decodeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return notObject()
		}
		return invalid(field, "has the wrong type ("+typeErr.Value+")")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return invalid(truncate(name, 64), "is not a known field")
	default:
		return converge.Errorf(converge.EMALFORMED, "the body is not valid JSON")
	}
}

// truncate shortens client input quoted in an error message to at most n
// bytes, on a rune boundary, with invalid UTF-8 replaced, so that messages
// stay valid UTF-8 whatever was sent.
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// unsupportedBody is the 415 of a request whose body converge cannot read
// as JSON: a Content-Type that is not JSON (jsonContent), or a
// Content-Encoding (gzip, ...) it does not decode; nil when it can.
func unsupportedBody(r *http.Request) *converge.AppError {
	if err := unsupportedEncoding(r); err != nil {
		return err
	}
	if !jsonContent(r) {
		return converge.Errorf(eUnsupportedMedia, "Content-Type must be application/json or application/*+json")
	}
	return nil
}

// unsupportedEncoding is the 415 of a request whose body has a
// Content-Encoding other than identity: converge decodes none (and a
// hook's signature is over the body as sent); nil otherwise.
func unsupportedEncoding(r *http.Request) *converge.AppError {
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return converge.Errorf(eUnsupportedMedia, "Content-Encoding %.32q is not supported: send the body as it is", ce)
	}
	return nil
}

// jsonContent reports whether r's body is JSON by its Content-Type:
// application/json or application/*+json, as a hook's body (SPEC §12).
func jsonContent(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

func (s *Server) handleEventCreate(w http.ResponseWriter, r *http.Request) {
	if err := unsupportedBody(r); err != nil {
		writeProblem(w, r, err)
		return
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxPayloadBytes+envelopeBytes)
	sub, named, err := decodeEvent(body, s.cfg.Kinds, s.cfg.MaxPayloadBytes)
	if o := eventOutcomeFrom(r.Context()); o != nil {
		o.kind = named
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// decodeEvent accepted only a configured kind.
	kind, _ := s.cfg.Kinds.Lookup(sub.Kind)
	ctx, span := telemetry.StartAccept(r.Context(), sub.Kind, sub.Resource, sub.Version)
	res, err := s.cfg.Accept(ctx, store.NewEventAcceptParams(*sub, kind, telemetry.TraceParent(ctx)))
	telemetry.EndAccept(span, res, err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := http.StatusAccepted
	if res.Replay {
		status = http.StatusOK
	} else {
		// The runs it superseded are counted by the store, after the
		// commit (store.AcceptObserver), as on every path.
		s.cfg.Metrics.EventAccepted(sub.Kind, telemetry.SourceAPI)
		s.logAccepted(ctx, res)
	}
	s.writeJSON(w, r, status, res)
}

// logAccepted logs an accepted event with its first run and trace.
func (s *Server) logAccepted(ctx context.Context, res *converge.EventAcceptResult) {
	if !s.logger.Enabled(ctx, slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{slog.String("event_id", res.Event.ID.String()), slog.String("run_id", res.Run.ID.String()),
		slog.String("kind", res.Event.Kind), slog.String("resource", res.Event.Resource), slog.Int64("version", res.Event.Version),
		slog.Int("superseded_runs", len(res.SupersededRuns))}
	if res.Run.TraceID != nil {
		attrs = append(attrs, slog.String("trace_id", *res.Run.TraceID))
	}
	s.logger.LogAttrs(ctx, slog.LevelInfo, "event accepted", attrs...)
}

// eventOutcome is what a POST /v1/events request was answered, for
// converge_events_rejected_total: the kind, once the body named a
// configured one, and the problem slug, when a problem was written.
type eventOutcome struct {
	kind, code string
}

type eventOutcomeKey struct{}

func eventOutcomeFrom(ctx context.Context) *eventOutcome {
	o, _ := ctx.Value(eventOutcomeKey{}).(*eventOutcome)
	return o
}

// countEventRejections counts every 4xx answer of POST /v1/events in
// converge_events_rejected_total by kind (unknown until the body named a
// configured kind) and reason (the problem slug), whichever layer wrote
// it: authentication, the rate limit, the body limit or the handler.
func (s *Server) countEventRejections(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Metrics == nil || r.Method != http.MethodPost || r.URL.Path != "/v1/events" {
			next.ServeHTTP(w, r)
			return
		}
		o := &eventOutcome{}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), eventOutcomeKey{}, o)))
		if o.code == "" {
			return
		}
		if status, _ := problemCode(o.code); status >= 400 && status < 500 {
			s.cfg.Metrics.EventRejected(o.kind, o.code)
		}
	})
}

// listPage is the shape of every list answer.
type listPage[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

func newPage[T any](items []T, next *uuid.UUID) listPage[T] {
	p := listPage[T]{Items: items}
	if p.Items == nil {
		p.Items = []T{}
	}
	if next != nil {
		c := EncodeCursor(*next)
		p.NextCursor = &c
	}
	return p
}

// EncodeCursor makes an opaque cursor of the last id of a page.
func EncodeCursor(id uuid.UUID) string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// DecodeCursor reads a cursor made by EncodeCursor.
func DecodeCursor(s string) (*uuid.UUID, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 16 {
		return nil, invalid("cursor", "is not a cursor this server made")
	}
	id, _ := uuid.FromBytes(b)
	return &id, nil
}

// parsePage reads the cursor and limit every list takes.
func parsePage(q url.Values) (*uuid.UUID, int, error) {
	cursor, err := DecodeCursor(q.Get("cursor"))
	if err != nil {
		return nil, 0, err
	}
	limit, err := ParseLimit(q.Get("limit"))
	return cursor, limit, err
}

// checkResourceFilter checks an exact resource key given as a list filter
// (empty: no filter).
func checkResourceFilter(resource string) error {
	if resource == "" {
		return nil
	}
	if err := converge.ValidateResource(resource); err != nil {
		return invalid("resource", err.Error())
	}
	return nil
}

// ParseLimit reads a page size: 1–500, default 50.
func ParseLimit(s string) (int, error) {
	if s == "" {
		return 50, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 500 {
		return 0, invalid("limit", "must be an integer from 1 to 500")
	}
	return n, nil
}

// queryParams checks that a query string has only known, single-valued
// parameters.
func queryParams(r *http.Request, known ...string) error {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		// r.URL.Query would silently drop the malformed pairs.
		return invalid("query", "is not a valid query string (bad %-escape or a semicolon)")
	}
	for k, v := range q {
		ok := false
		for _, name := range known {
			if k == name {
				ok = true
			}
		}
		if !ok {
			return invalid(truncate(k, 64), "is not a known query parameter")
		}
		if len(v) > 1 {
			return invalid(k, "must be given once")
		}
		if !utf8.ValidString(v[0]) || strings.ContainsRune(v[0], 0) {
			return invalid(k, "must be valid UTF-8 without NUL characters")
		}
		if k == "limit" && v[0] == "" {
			// The document says integer: an empty one is not left out.
			return invalid(k, "must be an integer from 1 to 500")
		}
	}
	return nil
}

// ParseEventListParams reads the query of GET /v1/events.
func ParseEventListParams(r *http.Request) (converge.EventListParams, error) {
	l, err := parseListQuery[converge.RunStatus](r, listQuerySpec{
		name:          "kind",
		nameOK:        func(kind string) bool { return converge.ValidateKind(kind) == nil },
		nameProblem:   "is not a kind name",
		statusProblem: "must be one of queued, held, running, retrying, succeeded, failed, superseded, cancelled",
	})
	if err != nil {
		return converge.EventListParams{}, err
	}
	return converge.EventListParams{Kind: l.name, Resource: l.resource, Status: l.status, Cursor: l.cursor, Limit: l.limit}, nil
}

func (s *Server) handleEventList(w http.ResponseWriter, r *http.Request) {
	serveList(s, w, r, ParseEventListParams, s.store.EventList)
}

// pathID reads a UUID path parameter; a malformed one is not found.
func pathID(r *http.Request, name string) (uuid.UUID, error) {
	id, err := uuid.Parse(chi.URLParam(r, name))
	if err != nil {
		return uuid.Nil, converge.Errorf(converge.ENOTFOUND, "%s is not an id", truncate(chi.URLParam(r, name), 64))
	}
	return id, nil
}

func (s *Server) handleEventGet(w http.ResponseWriter, r *http.Request) {
	serveGet(s, w, r, s.store.EventGet)
}
