package main

import (
	"bytes"
	"encoding/json"

	"github.com/converge-run/converge"
	"github.com/converge-run/converge/api"
)

// streamFlags checks the flags that name a stream's next version, those of
// submit (nameFlag "kind") and of workflow start (nameFlag "workflow"),
// with the API's own rules, so that a bad value is a usage error (exit
// status 2) before any request is sent: name is a kind or workflow name
// (converge.ValidateKind: configured kinds and workflows are named so;
// whether one is configured only the server knows), resource a resource key
// (converge.ValidateResource), version positive (converge.ValidateVersion)
// and payload, when set, a JSON object that api.CheckPayloadJSON accepts
// (its size limit is the server's). It returns the payload to send, nil
// for none.
func streamFlags(nameFlag, name, resource string, version int64, payload string) (json.RawMessage, error) {
	var fields []converge.FieldError
	add := func(field string, err error) {
		if err != nil {
			fields = append(fields, converge.FieldError{Field: field, Message: err.Error()})
		}
	}
	add(nameFlag, converge.ValidateKind(name))
	add("resource", converge.ValidateResource(resource))
	add("version", converge.ValidateVersion(version))
	var raw json.RawMessage
	if payload != "" {
		p := bytes.TrimSpace([]byte(payload))
		switch {
		case !json.Valid(p) || p[0] != '{':
			fields = append(fields, converge.FieldError{Field: "payload", Message: "must be a JSON object"})
		default:
			if msg := api.CheckPayloadJSON(p); msg != "" {
				fields = append(fields, converge.FieldError{Field: "payload", Message: msg})
			}
			raw = p
		}
	}
	if len(fields) == 0 {
		return raw, nil
	}
	msg := ""
	for i, f := range fields {
		if i > 0 {
			msg += "; "
		}
		msg += f.Field + ": " + f.Message
	}
	return nil, flagUsage(&converge.AppError{Code: converge.EINVALID, Message: msg, Fields: fields})
}
