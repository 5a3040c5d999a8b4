// Package jsonshape checks the shape of JSON answers: which keys an object has and
// the JSON type of each. The conformance tests of the worker and the master use it
// to hold Tidemark's answers to the reference system's, whose clients decode by
// key and type: a missing key, a string where a number was, or a key the
// reference leaves out breaks them even when every value is right.
package jsonshape

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// Type is the JSON type of a raw value: string, number, bool, null, array, object,
// or missing (no bytes: a key the object lacks).
func Type(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "missing"
	}
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// Check checks that body is a JSON object whose keys in want have those JSON
// types ("string|null": either), and that it has none of absent; it returns the
// object. what names the answer in failures.
func Check(t testing.TB, what string, body []byte, want map[string]string, absent ...string) map[string]json.RawMessage {
	t.Helper()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		t.Fatalf("%s: answer %q is not a JSON object: %v", what, body, err)
	}
	for k, types := range want {
		if got := Type(obj[k]); !slices.Contains(strings.Split(types, "|"), got) {
			t.Errorf("%s: %q is %s, want %s (answer %s)", what, k, got, types, body)
		}
	}
	for _, k := range absent {
		if _, ok := obj[k]; ok {
			t.Errorf("%s: has %q, which the reference leaves out (answer %s)", what, k, body)
		}
	}
	return obj
}
