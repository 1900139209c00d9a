package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
)

// checkFieldCase refuses a top-level key of the JSON object in data that
// names a field of v's struct type only case-insensitively ("Kind" for
// "kind", or with the Kelvin sign for k): encoding/json would take it for
// the field, but SPEC §4 rejects every unknown top-level field, and a
// field's name is its exact snake_case name. The error is 422 naming the
// key as sent. Nested objects (a payload, a filter) are not looked into:
// they are the user's, or checked by their own rules. Data that is not a
// JSON object passes: the decoder reports it. The scan ends with the first
// top-level value, so that what follows it (a second object with any
// keys) is left to the decoder's "unexpected data after the JSON object"
// (400), as it is without a wrong-case key.
//
// It finds the keys in one pass over the bytes, without decoding (the
// payload, up to max_payload_bytes, is only stepped over), so it adds
// little to the decoding itself.
func checkFieldCase(data []byte, v any) error {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	start := len(data) - len(bytes.TrimLeft(data, " \t\r\n"))
	if start == len(data) || data[start] != '{' {
		return nil
	}
	fields := jsonFields(t)
	depth, wantKey := 0, false
	for i := start; i < len(data); i++ {
		switch c := data[i]; c {
		case '"':
			end, escaped := stringEnd(data, i+1)
			if end < 0 {
				return nil
			}
			if depth == 1 && wantKey {
				wantKey = false
				key := string(data[i+1 : end])
				if escaped && json.Unmarshal(data[i:end+1], &key) != nil {
					return nil
				}
				if err := fieldCase(fields, key); err != nil {
					return err
				}
			}
			i = end
		case '{', '[':
			depth++
			wantKey = c == '{' && depth == 1
		case '}', ']':
			depth--
			if depth == 0 {
				return nil
			}
		case ',':
			wantKey = depth == 1
		}
	}
	return nil
}

// stringEnd returns the index of the quote that ends the JSON string whose
// text starts at data[from], and whether it holds an escape; -1 when it
// does not end.
func stringEnd(data []byte, from int) (int, bool) {
	escaped := false
	for i := from; i < len(data); {
		j := bytes.IndexAny(data[i:], `"\`)
		if j < 0 {
			return -1, escaped
		}
		i += j
		if data[i] == '"' {
			return i, escaped
		}
		escaped = true
		i += 2
	}
	return -1, escaped
}

// fieldCase is the error of key when it is not one of fields but equals
// one of them in another case.
func fieldCase(fields map[string]bool, key string) error {
	if fields[key] {
		return nil
	}
	for name := range fields {
		if strings.EqualFold(key, name) {
			return invalid(truncate(key, 64), "is not a known field (names are exact: "+name+")")
		}
	}
	return nil
}

// fieldNames caches jsonFields by struct type.
var fieldNames sync.Map

// jsonFields returns the JSON names of the struct type t's fields.
func jsonFields(t reflect.Type) map[string]bool {
	if m, ok := fieldNames.Load(t); ok {
		return m.(map[string]bool)
	}
	m := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		m[name] = true
	}
	fieldNames.Store(t, m)
	return m
}
