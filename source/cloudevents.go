package source

import (
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/converge-run/converge"
)

// Media types of the CloudEvents HTTP binding.
const (
	ceStructured = "application/cloudevents+json"
	ceBatch      = "application/cloudevents-batch+json"
)

// mediaType is the body's media type, lower-case without parameters.
func mediaType(h http.Header) string {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return strings.ToLower(mt)
}

// jsonMedia reports whether mt is application/json or application/*+json.
func jsonMedia(mt string) bool {
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

func unsupported(msg string) error {
	return &converge.AppError{Code: converge.EUNSUPPORTEDMEDIA, Message: msg}
}

func malformed(err error) error {
	return &converge.AppError{Code: converge.EMALFORMED, Message: "the body is not JSON: " + err.Error()}
}

// cloudEvent reads a CloudEvent in the HTTP binding and returns it in
// structured form (its attributes and data) with its id. Binary mode
// carries the attributes in ce-* headers (ce-specversion set) and the
// data (JSON) as the body. Structured mode is a body of type
// application/cloudevents+json, or of another JSON type
// (application/json, application/*+json) when there is no ce-specversion
// header: senders post structured events as plain application/json too,
// and such a body without the required attributes is refused as an
// invalid event (422), not as its media type. Batch mode is refused (415).
func cloudEvent(h http.Header, body []byte) (map[string]any, string, error) {
	mt := mediaType(h)
	switch {
	case mt == ceBatch:
		return nil, "", unsupported("CloudEvents batch mode (" + ceBatch + ") is not supported: send one event per request")
	case mt == ceStructured:
		return structuredEvent(body)
	case h.Get("Ce-Specversion") != "":
		if !jsonMedia(mt) {
			return nil, "", unsupported("the data of a binary-mode CloudEvent must be application/json or application/*+json")
		}
		ev := map[string]any{"datacontenttype": h.Get("Content-Type")}
		for name, vs := range h {
			lower := strings.ToLower(name)
			if attr, ok := strings.CutPrefix(lower, "ce-"); ok && len(vs) > 0 {
				v, err := headerAttribute(attr, vs[0])
				if err != nil {
					return nil, "", err
				}
				ev[attr] = v
			}
		}
		var data any
		if len(body) > 0 {
			if err := decodeBody(body, &data); err != nil {
				return nil, "", err
			}
		}
		ev["data"] = data
		id, _ := ev["id"].(string)
		if err := checkAttributes(ev, id); err != nil {
			return nil, "", err
		}
		return ev, id, nil
	case jsonMedia(mt):
		return structuredEvent(body)
	default:
		return nil, "", unsupported("a cloudevents source takes a JSON body (" + ceStructured + " or application/json: structured mode) or ce-* headers with JSON data (binary mode)")
	}
}

// structuredEvent reads a structured-mode CloudEvent: a JSON object of its
// attributes and data.
func structuredEvent(body []byte) (map[string]any, string, error) {
	var ev map[string]any
	if err := decodeBody(body, &ev); err != nil {
		return nil, "", err
	}
	if ev == nil {
		return nil, "", malformed(errNotObject)
	}
	if b64, ok := ev["data_base64"]; ok && ev["data"] == nil {
		return nil, "", invalidEvent("data_base64", "data_base64 is not supported: send JSON data ("+typeOf(b64)+")", "is not supported: send JSON data")
	}
	id, _ := ev["id"].(string)
	if err := checkAttributes(ev, id); err != nil {
		return nil, "", err
	}
	return ev, id, nil
}

// headerAttribute is the value of a binary-mode ce-* header: the HTTP
// binding percent-encodes what is not printable ASCII, so it is
// percent-decoded, and must then be valid UTF-8 without NUL, as a
// structured event's attributes are (its body is read as sent). Otherwise
// it is a validation error naming the attribute.
func headerAttribute(attr, value string) (string, error) {
	v, err := url.PathUnescape(value)
	if err != nil {
		return "", invalidEvent(attr, "the ce-"+attr+" header is not validly percent-encoded", "must be percent-encoded UTF-8 (the CloudEvents HTTP binding)")
	}
	if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
		return "", invalidEvent(attr, "the ce-"+attr+" header is not valid UTF-8 without NUL", "must be valid UTF-8 without NUL characters")
	}
	return v, nil
}

// checkAttributes checks the required context attributes: a missing one
// is a validation error naming it (errors[].field is the attribute, in
// either mode), and specversion is 1.0, the version this receiver reads.
func checkAttributes(ev map[string]any, id string) error {
	for _, a := range []string{"specversion", "source", "type"} {
		if s, _ := ev[a].(string); s == "" {
			return invalidEvent(a, "the CloudEvent has no "+a, "is required (a non-empty string)")
		}
	}
	if v := ev["specversion"].(string); v != "1.0" {
		if len(v) > 32 {
			v = v[:32] + "…"
		}
		return invalidEvent("specversion", fmt.Sprintf("CloudEvents specversion %q is not supported: send 1.0", v), "must be 1.0")
	}
	if id == "" {
		return invalidEvent("id", "the CloudEvent has no id", "is required (a non-empty string)")
	}
	return nil
}

// invalidEvent is the 422 invalid-request of an event that is not a valid
// CloudEvent, naming the attribute at fault (SPEC §4: validation errors
// carry errors: [{field, message}]).
func invalidEvent(field, detail, msg string) error {
	return &converge.AppError{Code: converge.EINVALID, Message: detail,
		Fields: []converge.FieldError{{Field: field, Message: msg}}}
}

func typeOf(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	default:
		return "not a string"
	}
}

type notObject struct{}

func (notObject) Error() string { return "a JSON object is required" }

var errNotObject error = notObject{}
