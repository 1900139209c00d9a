package api

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// Text in JSON bodies (SPEC §4: text fields are valid UTF-8 without
// U+0000). encoding/json replaces invalid UTF-8 and lone UTF-16 surrogate
// escapes with U+FFFD without a word, so a body is checked as sent, before
// it is decoded.

// textProblem is the message of a text field that is not valid UTF-8 or
// holds U+0000.
const textProblem = "must be valid UTF-8 without NUL characters"

// checkBodyText walks the JSON value at the start of data and returns the
// EINVALID of its first string that is not valid UTF-8, is a lone UTF-16
// surrogate escape, or holds \u0000, naming its field: the path of object
// keys ("filter.q") and array indexes ("ids[1]"), or the enclosing object's
// path ("body" at the top) for a bad key. Under the top-level fields in
// opaque (payload) only raw invalid UTF-8 is looked for, reported as that
// field: their own check (CheckPayloadJSON) refuses the rest with its own
// message. A body that is not JSON is nil here: the decoder reports it.
func checkBodyText(data []byte, opaque ...string) error {
	type level struct {
		path   string
		object bool
		key    string // object: the last key read
		index  int    // array: the next element's index
		inKey  bool   // object: the next token is a key
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []level
	var found error
	check := func(raw []byte, field string) {
		if found != nil {
			return
		}
		rawOnly := isOpaque(topField(field), opaque)
		if rawOnly {
			field = topField(field)
		}
		if badJSONText(raw, rawOnly) {
			found = invalid(field, textProblem)
		}
	}
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		raw := data[start:dec.InputOffset()]
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
		} else {
			path := "body"
			if n := len(stack); n > 0 {
				top := &stack[n-1]
				switch {
				case top.object && top.inKey:
					// A key: a bad one is its object's problem.
					key, _ := tok.(string)
					check(raw, top.path)
					top.key, top.inKey = key, false
					continue
				case top.object:
					path = joinPath(top.path, top.key)
					top.inKey = true
				default:
					path = top.path + "[" + strconv.Itoa(top.index) + "]"
					top.index++
				}
			}
			switch t := tok.(type) {
			case string:
				check(raw, path)
			case json.Delim:
				stack = append(stack, level{path: path, object: t == '{', inKey: t == '{'})
			}
		}
		if len(stack) == 0 {
			if dec.More() {
				// Something after the value: the decoder reports it.
				return nil
			}
			return found
		}
	}
}

// joinPath is the path of key under the object at path.
func joinPath(path, key string) string {
	key = truncate(key, 64)
	if path == "body" {
		return key
	}
	return path + "." + key
}

// topField is the top-level field a path starts with.
func topField(path string) string {
	for i := 0; i < len(path); i++ {
		if path[i] == '.' || path[i] == '[' {
			return path[:i]
		}
	}
	return path
}

func isOpaque(field string, opaque []string) bool {
	for _, o := range opaque {
		if field == o {
			return true
		}
	}
	return false
}

// badJSONText reports whether raw, the bytes of one JSON string token as
// sent (with the whitespace and punctuation before it), is not valid UTF-8
// or, unless rawOnly, escapes U+0000 or a lone UTF-16 surrogate.
func badJSONText(raw []byte, rawOnly bool) bool {
	if !utf8.Valid(raw) {
		return true
	}
	if rawOnly || bytes.IndexByte(raw, '\\') < 0 {
		return false
	}
	i := bytes.IndexByte(raw, '"')
	if i < 0 {
		return false
	}
	_, msg := scanString(raw[i:])
	return msg != ""
}
