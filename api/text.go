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

// maxTextDepth is how deep checkBodyText walks: no field of a body
// converge accepts nests deeper (the payload's limit is 64 levels, and
// CheckPayloadJSON or the decoder refuse a deeper body on their own).
const maxTextDepth = 256

// checkBodyText walks the JSON value at the start of data and returns the
// EINVALID of its first string that is not valid UTF-8, is a lone UTF-16
// surrogate escape, or holds \u0000, naming its field: the path of object
// keys ("filter.q") and array indexes ("ids[1]"), or the enclosing object's
// path ("body" at the top) for a bad key. Under the top-level fields in
// opaque (payload) only raw invalid UTF-8 is looked for, reported as that
// field: their own check (CheckPayloadJSON) refuses the rest with its own
// message. A body that is not JSON is nil here, and so is one that nests
// deeper than maxTextDepth with no bad string before that depth: the
// decoder or the payload's check reports it.
//
// The walk keeps one small level per open object or array and builds a
// field's path only for the string it reports, so its cost is linear in
// the body whatever its shape; it goes on past that string only to see
// that the body is one whole JSON value.
func checkBodyText(data []byte, opaque ...string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []textLevel
	var found error // the first bad string's; the walk goes on to the end of the value
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		raw := data[start:dec.InputOffset()]
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return textResult(dec, found)
			}
			continue
		}
		if n := len(stack); n > 0 {
			top := &stack[n-1]
			switch {
			case top.object && top.inKey:
				// A key: a bad one is its object's problem.
				key, _ := tok.(string)
				if found == nil && badJSONText(raw, n > 1 && isOpaque(stack[0].key, opaque)) {
					found = invalid(textPath(stack[:n-1], opaque), textProblem)
				}
				top.key, top.inKey = truncate(key, 64), false
				continue
			case top.object:
				top.inKey = true
			default:
				top.cur = top.index
				top.index++
			}
		}
		switch t := tok.(type) {
		case string:
			if found == nil && badJSONText(raw, len(stack) > 0 && stack[0].object && isOpaque(stack[0].key, opaque)) {
				found = invalid(textPath(stack, opaque), textProblem)
			}
		case json.Delim:
			if len(stack) == maxTextDepth {
				return found // deeper than any field converge accepts
			}
			stack = append(stack, textLevel{object: t == '{', inKey: t == '{'})
		}
		if len(stack) == 0 {
			// A scalar at the top.
			return textResult(dec, found)
		}
	}
}

// textResult is checkBodyText's answer once the value has ended: found,
// unless something follows the value (the decoder reports that).
func textResult(dec *json.Decoder, found error) error {
	if dec.More() {
		return nil
	}
	return found
}

// textLevel is an object or array checkBodyText is in.
type textLevel struct {
	object bool
	key    string // object: the last key read
	inKey  bool   // object: the next token is a key
	index  int    // array: the next element's index
	cur    int    // array: the index of the element being read
}

// textPath is the path of the value read in the innermost of levels ("body"
// for none), or only its top-level field when that is opaque.
func textPath(levels []textLevel, opaque []string) string {
	if len(levels) > 0 && levels[0].object && isOpaque(levels[0].key, opaque) {
		return levels[0].key
	}
	path := "body"
	for _, l := range levels {
		if l.object {
			path = joinPath(path, l.key)
		} else {
			path += "[" + strconv.Itoa(l.cur) + "]"
		}
	}
	return path
}

// joinPath is the path of key under the object at path.
func joinPath(path, key string) string {
	key = truncate(key, 64)
	if path == "body" {
		return key
	}
	return path + "." + key
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
