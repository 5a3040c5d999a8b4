package schema

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// FuzzParseSpec: ParseSpec never panics, every error is an *Error matching
// ErrInvalid, and an accepted spec's canonical JSON parses back to an Equal spec
// with an equal schema.
func FuzzParseSpec(f *testing.F) {
	for _, seed := range []string{
		everyTypeSpec,
		`{"columns":[["id",{"type":"string"}]]}`,
		`{"columns":[["id",{"type":"string"}],["v",{"type":"vector","dim":3}]]}`,
		`{"columns":[["id",{"type":"string"}],["l",{"type":"list","item":{"type":"list","item":{"type":"int32","nullable":true}}}]]}`,
		`{"columns":[["id",{"type":"string"}],["_x",{"type":"int32"}]]}`,
		`{"columns":[["id",{"type":"string"}],["a",{"type":"int32","large":true}]]}`,
		`{"columns":[["x",{"type":"string"}]]}`,
		`{"columns":[["id",{"type":"string"}],["a\u0000",{"type":"bool"}]]}`,
		`{"columns":[["id",{"type":"string"}],["v",{"type":"vector","dim":1e3}]]}`,
		`{"columns":{}}`, `[]`, `null`, ``, `{"columns":[[]]}`, `{"columns":[["id"]]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSpec(data)
		if err != nil {
			var e *Error
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &e) {
				t.Fatalf("error %v is not an *Error matching ErrInvalid", err)
			}
			return
		}
		canon, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseSpec(canon)
		if err != nil {
			t.Fatalf("canonical form %s does not parse: %v", canon, err)
		}
		if !again.Equal(s) || !again.Schema().Equal(s.Schema()) {
			t.Fatalf("canonical form %s parses to a different spec %s", canon, again)
		}
		if f := s.Schema().Field(0); f.Name != IDColumn || f.Nullable {
			t.Fatalf("accepted a spec whose first column is %v", f)
		}
	})
}

// FuzzDecodeRows: decoding never panics; a rejected batch is an *Error matching
// ErrInvalid; an accepted batch has a non-empty id and no null in a non-null
// column in every row, holds only valid UTF-8 strings (never repaired ones, which
// encode back to different text), and encodes to JSON that decodes to the same
// batch.
func FuzzDecodeRows(f *testing.F) {
	f.Add(false, []byte(everyTypeSpec), []byte(`[`+fullGenericRow+`,`+nullGenericRow+`]`))
	f.Add(false, []byte(everyTypeSpec), []byte(`[{"id":"a","n64":1,"grid":[[1,2],[null]],"emb":[1,2,3]}]`))
	f.Add(false, []byte(everyTypeSpec), []byte(`[{"id":"a","n64":1.5}]`))
	f.Add(false, []byte(everyTypeSpec), []byte(`[{"id":"a","n64":1,"at":"2024-01-01T00:00:00.999999999+14:00"}]`))
	f.Add(false, []byte(everyTypeSpec), []byte(`[{"id":"a","n64":1,"blob":"AA=="},{"id":"b","n64":2,"blob":"A"}]`))
	f.Add(false, []byte(everyTypeSpec), []byte(`[{"id":"a","n64":1,"blob":[0,1,255]},{"id":"b","n64":2,"blob":[256]},{"id":"c","n64":3,"blob":[1.0,-0]}]`))
	f.Add(false, []byte(`{"columns":[["id",{"type":"string"}],["s",{"type":"string","large":true,"nullable":true}]]}`), []byte(`[{"id":"\u00e9","s":"\ud83d\ude00"}]`))
	f.Add(false, []byte(`not a spec`), []byte(`{"id":"x","n64":1} trailing`))
	f.Add(true, []byte(nil), []byte(`[`+fullRollout+`,{"id":"b"}]`))
	f.Add(true, []byte(nil), []byte(`[{"id":"a","metadata":{"x":[1,{"y":null}]},"relationships":[{"target_id":"t","relation":"r"}]}]`))
	f.Add(true, []byte(nil), []byte(`[{"id":"a","created_at":-62135596800000000,"loss_mask":[127,-128]}]`))
	f.Add(true, []byte(nil), []byte(`[{"id":"`+strings.Repeat("i", MaxIDBytes)+`"},{"id":"`+strings.Repeat("\u00e9", MaxIDBytes/2)+`"}]`))
	f.Add(false, []byte(everyTypeSpec), []byte(`[{"id":"`+strings.Repeat("i", MaxIDBytes+1)+`","n64":1}]`))
	f.Add(false, []byte(everyTypeSpec), []byte("[{\"id\":\"a\xffb\",\"n64\":1},{\"id\":\"a\\ud800b\",\"n64\":1}]"))
	f.Add(true, []byte(nil), []byte(`[{"id":"a","metadata":{"k\udc00":"\ud83d\ude00"},"reward":1e-50}]`))
	f.Fuzz(func(t *testing.T, rollout bool, specText, rowsText []byte) {
		var rows []json.RawMessage
		if json.Valid(rowsText) && trimSpace(rowsText)[0] == '[' {
			_ = eachElement(trimSpace(rowsText), func(_ int, e []byte) error {
				rows = append(rows, json.RawMessage(e))
				return nil
			})
		} else {
			rows = []json.RawMessage{rowsText}
		}
		decode := func(rows []json.RawMessage) (arrow.RecordBatch, error) {
			if rollout {
				return DecodeRollouts(rows, testNow)
			}
			spec, err := ParseSpec(specText)
			if err != nil {
				spec = mustSpec(t, everyTypeSpec)
			}
			return spec.Codec().Decode(rows)
		}
		rec, err := decode(rows)
		if err != nil {
			var e *Error
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &e) {
				t.Fatalf("error %v is not an *Error matching ErrInvalid", err)
			}
			if e.Row < 0 || e.Row >= len(rows) {
				t.Fatalf("error %v names row %d of %d", err, e.Row, len(rows))
			}
			return
		}
		defer rec.Release()
		if int(rec.NumRows()) != len(rows) {
			t.Fatalf("%d rows decoded to %d", len(rows), rec.NumRows())
		}
		ids := rec.Column(0).(*array.String)
		for i := 0; i < ids.Len(); i++ {
			if ids.IsNull(i) || ids.Value(i) == "" || len(ids.Value(i)) > MaxIDBytes {
				t.Fatalf("row %d has an empty or %d-byte id", i, len(ids.Value(i)))
			}
		}
		for i, fld := range rec.Schema().Fields() {
			if !fld.Nullable && rec.Column(i).NullN() > 0 {
				t.Fatalf("non-null column %s has nulls", fld.Name)
			}
			if bad, ok := firstInvalidString(rec.Column(i)); ok {
				t.Fatalf("column %s holds %q, not valid UTF-8", fld.Name, bad)
			}
		}
		enc, err := EncodeRows(rec)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range enc {
			if !json.Valid(r) {
				t.Fatalf("encoded invalid JSON %s", r)
			}
		}
		back, err := decode(enc)
		if err != nil {
			t.Fatalf("encoded rows do not decode: %v\n%s", err, enc)
		}
		defer back.Release()
		if !array.RecordEqual(rec, back) {
			t.Fatalf("decode(encode(rows)) differs\n%s", enc)
		}
	})
}

// firstInvalidString finds a string in a (at any depth of lists and structs) that
// is not valid UTF-8.
func firstInvalidString(a arrow.Array) (string, bool) {
	switch a := a.(type) {
	case *array.String:
		for i := 0; i < a.Len(); i++ {
			if v := a.Value(i); !utf8.ValidString(v) {
				return v, true
			}
		}
	case *array.LargeString:
		for i := 0; i < a.Len(); i++ {
			if v := a.Value(i); !utf8.ValidString(v) {
				return v, true
			}
		}
	case *array.List:
		return firstInvalidString(a.ListValues())
	case *array.FixedSizeList:
		return firstInvalidString(a.ListValues())
	case *array.Struct:
		for j := 0; j < a.NumField(); j++ {
			if v, ok := firstInvalidString(a.Field(j)); ok {
				return v, true
			}
		}
	}
	return "", false
}
