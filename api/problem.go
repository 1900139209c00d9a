package api

import (
	"bytes"
	"errors"
	"net/http"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/store"
)

// Problem is an RFC 9457 problem body.
type Problem struct {
	Type          string                `json:"type"`
	Title         string                `json:"title"`
	Status        int                   `json:"status"`
	Detail        string                `json:"detail"`
	Errors        []converge.FieldError `json:"errors,omitempty"`
	LatestVersion *int64                `json:"latest_version,omitempty"`
	RequestID     string                `json:"request_id,omitempty"`
}

// Problem slugs that exist only at the HTTP edge.
const (
	eUnsupportedMedia = converge.EUNSUPPORTEDMEDIA
	eRateLimited      = "rate-limited"
	eMethodNotAllowed = "method-not-allowed"
)

// codes maps application error codes to HTTP statuses and titles.
var codes = map[string]struct {
	status int
	title  string
}{
	converge.EINVALID:         {http.StatusUnprocessableEntity, "Invalid request"},
	converge.EMALFORMED:       {http.StatusBadRequest, "Malformed JSON"},
	converge.ETOOLARGE:        {http.StatusRequestEntityTooLarge, "Payload too large"},
	converge.ENOTFOUND:        {http.StatusNotFound, "Not found"},
	converge.EUNAUTHORIZED:    {http.StatusUnauthorized, "Unauthorized"},
	converge.EFORBIDDEN:       {http.StatusForbidden, "Forbidden"},
	converge.ECONFLICT:        {http.StatusConflict, "Conflict"},
	converge.ESTALEVERSION:    {http.StatusConflict, "Stale version"},
	converge.EVERSIONCONFLICT: {http.StatusConflict, "Version conflict"},
	converge.ERUNFINISHED:     {http.StatusConflict, "Run finished"},
	converge.ENOTOPEN:         {http.StatusConflict, "Dead letter not open"},
	converge.ESUPERSEDED:      {http.StatusConflict, "Superseded"},
	converge.ENOTHELD:         {http.StatusConflict, "Run not held"},
	converge.ENOTQUARANTINED:  {http.StatusConflict, "Stream not quarantined"},
	converge.EKINDNOTSERVED:   {http.StatusConflict, "Kind not served"},
	converge.EINTERNAL:        {http.StatusInternalServerError, "Internal error"},
	converge.EUNAVAILABLE:     {http.StatusServiceUnavailable, "Service unavailable"},
	converge.EBADSIGNATURE:    {http.StatusUnauthorized, "Bad signature"},
	converge.EMAPPINGFAILED:   {http.StatusUnprocessableEntity, "Mapping failed"},
	eUnsupportedMedia:         {http.StatusUnsupportedMediaType, "Unsupported media type"},
	eRateLimited:              {http.StatusTooManyRequests, "Too many requests"},
	eMethodNotAllowed:         {http.StatusMethodNotAllowed, "Method not allowed"},
	eHeadersTooLarge:          {http.StatusRequestHeaderFieldsTooLarge, "Request headers too large"},
}

// problemCode returns the status and title of an error code; an unknown
// code is an internal error.
func problemCode(code string) (int, string) {
	c, ok := codes[code]
	if !ok {
		c = codes[converge.EINTERNAL]
	}
	return c.status, c.title
}

// ErrorStatus returns the HTTP status of err: the status of its
// application error code (converge.ErrorCode), 503 for a database that is
// unavailable (store.Unavailable), or 500 for an error without a known
// code (a table or column missing included, unless the store already
// found the schema not current: Store.Unavailable). It is the one map from error to status: the API's problem bodies
// and the dashboard's pages both take their status from it.
func ErrorStatus(err error) int {
	status, _ := problemCode(converge.ErrorCode(store.Unavailable(err)))
	return status
}

// RetryAfterUnavailable is the Retry-After, in seconds, of a 503
// unavailable answer: about how long a restart or a failover of the
// database takes to begin serving again.
const RetryAfterUnavailable = "2"

// ProblemType returns the problem type URI of an error code.
func ProblemType(code string) string { return "urn:converge:problem:" + code }

// writeError answers err as a problem. Internal errors are logged with
// detail and shown as "internal error".
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	err = s.store.Unavailable(r.Context(), err)
	var appErr *converge.AppError
	if errors.As(err, &appErr) && appErr.Code == converge.EUNAVAILABLE {
		s.logger.Warn("database unavailable", "method", r.Method, "path", r.URL.Path, "request_id", requestID(r), "error", err)
	}
	if !errors.As(err, &appErr) {
		s.logger.Error("internal error", "method", r.Method, "path", r.URL.Path, "request_id", requestID(r), "error", err)
		appErr = &converge.AppError{Code: converge.EINTERNAL, Message: "internal error"}
	}
	writeProblem(w, r, appErr)
}

func writeProblem(w http.ResponseWriter, r *http.Request, e *converge.AppError) {
	if o := eventOutcomeFrom(r.Context()); o != nil {
		o.code = e.Code
	}
	p := NewProblem(e)
	p.RequestID = requestID(r)
	status := p.Status
	var buf bytes.Buffer
	_ = encodeJSON(&buf, p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if e.Code == converge.EUNAVAILABLE {
		w.Header().Set("Retry-After", RetryAfterUnavailable)
	}
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// NewProblem returns the problem body of e, as the API answers it (without
// a request id): its type, title and status from e's code, its message as
// the detail, its field errors. The CLI prints the same body for a problem
// it finds before sending a request.
func NewProblem(e *converge.AppError) Problem {
	status, title := problemCode(e.Code)
	return Problem{Type: ProblemType(e.Code), Title: title, Status: status, Detail: e.Message,
		Errors: e.Fields, LatestVersion: e.LatestVersion}
}

// invalid returns an EINVALID error naming one field.
func invalid(field, message string) *converge.AppError { return converge.InvalidField(field, message) }

// writeJSON renders v into a buffer, then writes it with status.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	var buf bytes.Buffer
	if err := encodeJSON(&buf, v); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
