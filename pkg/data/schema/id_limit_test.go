package schema

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestIDOverMaxIDBytesIsRefused: an id longer than MaxIDBytes is a 400 naming the
// row and the id column, for generic and rollout rows alike (an id is copied into
// every manifest of its store); one of exactly MaxIDBytes is accepted.
func TestIDOverMaxIDBytesIsRefused(t *testing.T) {
	row := func(id string) []json.RawMessage {
		return []json.RawMessage{json.RawMessage(`{"id":"ok"}`), json.RawMessage(`{"id":"` + id + `"}`)}
	}
	spec := mustSpec(t, `{"columns":[["id",{"type":"string"}]]}`)
	for name, decode := range map[string]func([]json.RawMessage) error{
		"generic": func(rows []json.RawMessage) error {
			rec, err := spec.Codec().Decode(rows)
			if err == nil {
				rec.Release()
			}
			return err
		},
		"rollout": func(rows []json.RawMessage) error {
			rec, err := DecodeRollouts(rows, testNow)
			if err == nil {
				rec.Release()
			}
			return err
		},
	} {
		if err := decode(row(strings.Repeat("i", MaxIDBytes))); err != nil {
			t.Errorf("%s: id of %d bytes: %v", name, MaxIDBytes, err)
		}
		err := decode(row(strings.Repeat("i", MaxIDBytes+1)))
		var e *Error
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &e) || e.Row != 1 || e.Column != IDColumn {
			t.Errorf("%s: id of %d bytes: %v, want an *Error for row 1, column id", name, MaxIDBytes+1, err)
		}
	}
}
