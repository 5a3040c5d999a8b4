package schema

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/array"
)

// badStrings are JSON string literals (quotes included) that hold no valid UTF-8
// text. encoding/json reads each as a string with U+FFFD in it, so ids that differ
// only there would collapse into one row.
var badStrings = map[string]string{
	"raw 0xff":                        "\"a\xffb\"",
	"raw 0xfe":                        "\"a\xfeb\"",
	"raw truncated sequence":          "\"a\xc3\"",
	"raw overlong slash":              "\"a\xc0\xafb\"",
	"raw UTF-8 of a surrogate":        "\"a\xed\xa0\x80b\"",
	"escaped high surrogate alone":    `"a\ud800b"`,
	"escaped low surrogate alone":     `"a\udc00b"`,
	"escaped high surrogate at end":   `"a\ud800"`,
	"escaped high then high":          `"\ud800\ud800"`,
	"escaped high then non-surrogate": `"\ud800\u0041"`,
	"escaped high then raw text":      `"\ud83dx"`,
	"bad byte after an escape":        "\"line\\n\xff\"",
}

// TestStringsThatAreNotUTF8AreRefused: every string a row stores (ids, string and
// large string columns, list items, struct fields, JSON text) is refused with an
// error naming the row and the column instead of being repaired into U+FFFD.
func TestStringsThatAreNotUTF8AreRefused(t *testing.T) {
	generic := mustSpec(t, everyTypeSpec)
	ok := `{"id":"ok","n64":1}`
	for name, lit := range badStrings {
		for _, tc := range []struct {
			where, row, column string
			rollout            bool
		}{
			{"generic id", `{"id":` + lit + `,"n64":1}`, "id", false},
			{"string column", `{"id":"x","n64":1,"name":` + lit + `}`, "name", false},
			{"large string column", `{"id":"x","n64":1,"body":` + lit + `}`, "body", false},
			{"list<string> item", `{"id":"x","n64":1,"tags":["fine",` + lit + `]}`, "tags", false},
			{"record id", `{"id":` + lit + `}`, "id", true},
			{"rollout_id", `{"id":"x","rollout_id":` + lit + `}`, "rollout_id", true},
			{"content", `{"id":"x","content":` + lit + `}`, "content", true},
			{"user_metadata", `{"id":"x","user_metadata":` + lit + `}`, "user_metadata", true},
			{"struct field", `{"id":"x","relationships":[{"target_id":` + lit + `,"relation":"r"}]}`, "relationships", true},
			{"metadata string", `{"id":"x","metadata":` + lit + `}`, "metadata", true},
			{"metadata object value", `{"id":"x","metadata":{"k":[1,` + lit + `]}}`, "metadata", true},
			{"metadata object key", `{"id":"x","metadata":{` + lit + `:1}}`, "metadata", true},
		} {
			t.Run(name+"/"+tc.where, func(t *testing.T) {
				var err error
				if tc.rollout {
					_, err = DecodeRollouts(raws(`{"id":"ok"}`, `{"id":"ok"}`, tc.row), testNow)
				} else {
					_, err = generic.Codec().Decode(raws(ok, ok, tc.row))
				}
				checkInputError(t, err, 2, tc.column, "invalid UTF-8")
			})
		}
	}
}

// TestDistinctInvalidIDsAreNotOneRow is the data loss the check prevents: four ids
// that differ on the wire were all stored as "a\ufffdb".
func TestDistinctInvalidIDsAreNotOneRow(t *testing.T) {
	for _, id := range []string{"\"a\xffb\"", "\"a\xfeb\"", `"a\ud800b"`, `"a\udfffb"`} {
		rec, err := DecodeRollouts(raws(`{"id":`+id+`}`), testNow)
		if err == nil {
			t.Errorf("id %q stored as %q", id, rec.Column(0).(*array.String).Value(0))
			rec.Release()
			continue
		}
		checkInputError(t, err, 0, IDColumn, "invalid UTF-8")
	}
}

// TestObjectKeysThatAreNotUTF8AreRefused: a row's own keys are names, not data,
// but a key repaired into U+FFFD would be reported as a different column.
func TestObjectKeysThatAreNotUTF8AreRefused(t *testing.T) {
	generic := mustSpec(t, everyTypeSpec)
	for _, key := range []string{"\"n6\xff\"", `"n\udc00"`} {
		_, err := generic.Codec().Decode(raws(`{"id":"x","n64":1,` + key + `:1}`))
		checkInputError(t, err, 0, "", "invalid UTF-8")
		_, err = DecodeRollouts(raws(`{"id":"x","relationships":[{"target_id":"t","relation":"r",`+key+`:1}]}`), testNow)
		checkInputError(t, err, 0, "relationships", "invalid UTF-8")
	}
}

// TestValidEscapesDecodeAsEncodingJSON: the strict decoder reads every valid string
// exactly as encoding/json does.
func TestValidEscapesDecodeAsEncodingJSON(t *testing.T) {
	for _, lit := range []string{
		`""`, `"plain"`, `"\"\\\/\b\f\n\r\t"`, `"\u0000\u001f\u007f"`, `"\u00e9\u2028\u2029\uffff\ufffd"`,
		`"\ud83d\ude00 and \uD83D\uDE00"`, `"\udbff\udfff"`, `"\ud800\udc00"`, "\"é✓😀 raw\"",
		`"mixed é \n \ud83d\ude00 end"`, `"\\u00e9 is not an escape"`, `"\\\ud83d\ude00"`,
	} {
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil {
			t.Fatalf("%s: %v", lit, err)
		}
		got, err := unquote([]byte(lit))
		if err != nil || got != want {
			t.Errorf("unquote(%s) = %q, %v; encoding/json reads %q", lit, got, err, want)
		}
	}
}

// TestSpecAndFilterStringsThatAreNotUTF8AreRefused: a column name or a filter
// value is matched against stored names and values; a repaired one would match
// nothing, or the wrong column.
func TestSpecAndFilterStringsThatAreNotUTF8AreRefused(t *testing.T) {
	for _, name := range []string{"\"a\xff\"", `"a\ud800"`} {
		spec := `{"columns":[["id",{"type":"string"}],[` + name + `,{"type":"int32"}]]}`
		if s, err := ParseSpec([]byte(spec)); err == nil {
			t.Errorf("spec with column %s accepted: %s", name, s)
		} else if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "invalid UTF-8") {
			t.Errorf("spec with column %s: %v", name, err)
		}
		_, err := ParseRolloutFilters(`{"dataset":` + name + `}`)
		checkInputError(t, err, -1, "dataset", "invalid UTF-8")
		_, err = ParseRolloutFilters(`{` + name + `:"x"}`)
		checkInputError(t, err, -1, "", "invalid UTF-8")
	}
}

// TestFloatsThatWouldBeStoredAsZeroOrInfinityAreRefused: a nonzero literal too
// small for the column would be stored as 0, one too large as ±Inf (which JSON
// cannot even write back); both are refused, naming the column. Zero spelled any
// way, and subnormal values, are kept.
func TestFloatsThatWouldBeStoredAsZeroOrInfinityAreRefused(t *testing.T) {
	generic := mustSpec(t, everyTypeSpec)
	ok := `{"id":"ok","n64":1}`
	for _, tc := range []struct{ name, row, column, reason string }{
		{"float64 underflow", `{"id":"x","n64":1,"f64":1e-400}`, "f64", "too small"},
		{"float64 negative underflow", `{"id":"x","n64":1,"f64":-2.5E-999}`, "f64", "too small"},
		{"float64 underflow with fraction", `{"id":"x","n64":1,"f64":0.0001e-330}`, "f64", "too small"},
		{"float32 underflow", `{"id":"x","n64":1,"f32":1e-46}`, "f32", "too small"},
		{"float32 underflow below half the least subnormal", `{"id":"x","n64":1,"f32":7e-46}`, "f32", "too small"},
		{"float32 overflow", `{"id":"x","n64":1,"f32":1e39}`, "f32", "out of range for float32"},
		{"float32 negative overflow", `{"id":"x","n64":1,"f32":-1e39}`, "f32", "out of range for float32"},
		{"float64 overflow", `{"id":"x","n64":1,"f64":1e309}`, "f64", "out of range for float64"},
		{"vector component underflow", `{"id":"x","n64":1,"emb":[1,1e-50,3]}`, "emb", "[1]: number 1e-50 is too small"},
		{"int32 overflow", `{"id":"x","n64":1,"n32":2147483648}`, "n32", "out of range for int32"},
		{"int32 underflow", `{"id":"x","n64":1,"n32":-2147483649}`, "n32", "out of range for int32"},
		{"int64 overflow", `{"id":"x","n64":9223372036854775808}`, "n64", "out of range for int64"},
		{"int64 underflow", `{"id":"x","n64":-9223372036854775809}`, "n64", "out of range for int64"},
		{"int64 list item overflow", `{"id":"x","n64":1,"grid":[[1],[99999999999999999999]]}`, "grid", "[1][0]: integer 99999999999999999999 is out of range for int64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := generic.Codec().Decode(raws(ok, ok, tc.row))
			checkInputError(t, err, 2, tc.column, tc.reason)
		})
	}
	for _, tc := range []struct{ name, row, column, reason string }{
		{"reward underflow", `{"id":"x","reward":1e-50}`, "reward", "too small for float32"},
		{"reward overflow", `{"id":"x","reward":3.5e38}`, "reward", "out of range for float32"},
		{"logprob underflow", `{"id":"x","output_logprobs":[-0.5,-1e-60]}`, "output_logprobs", "[1]: number -1e-60 is too small"},
		{"relationship weight overflow", `{"id":"x","relationships":[{"target_id":"t","relation":"r","weight":1e39}]}`, "relationships", "[0].weight: number 1e39 is out of range"},
		{"int8 overflow", `{"id":"x","loss_mask":[1,128]}`, "loss_mask", "[1]: integer 128 is out of range for int8"},
		{"int8 underflow", `{"id":"x","loss_mask":[-129]}`, "loss_mask", "out of range for int8"},
		{"int32 token overflow", `{"id":"x","output_tokens":[4294967296]}`, "output_tokens", "out of range for int32"},
		{"int64 overflow", `{"id":"x","payload_size":9223372036854775808}`, "payload_size", "out of range for int64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeRollouts(raws(`{"id":"ok"}`, `{"id":"ok"}`, tc.row), testNow)
			checkInputError(t, err, 2, tc.column, tc.reason)
		})
	}

	// Zero in any spelling, the extremes, and subnormals are values, not errors.
	for _, tc := range []struct{ column, in, want string }{
		{"f64", "0", "0"}, {"f64", "-0", "-0"}, {"f64", "0.000", "0"}, {"f64", "0e-400", "0"},
		{"f64", "-0.0E+999", "-0"}, {"f64", "1e-310", "1e-310"}, {"f64", "4.9e-324", "5e-324"},
		{"f64", "1.7976931348623157e308", "1.7976931348623157e+308"},
		{"f32", "0e-99", "0"}, {"f32", "1e-45", "1e-45"}, {"f32", "1.2e-38", "1.2e-38"},
		{"f32", "3.4028235e38", "3.4028235e+38"}, {"f32", "-3.4028235e38", "-3.4028235e+38"},
	} {
		rec, err := generic.Codec().Decode(raws(`{"id":"x","n64":1,"` + tc.column + `":` + tc.in + `}`))
		if err != nil {
			t.Errorf("%s %s: %v", tc.column, tc.in, err)
			continue
		}
		row := encodeAll(t, rec)[0]
		rec.Release()
		if want := `"` + tc.column + `":` + tc.want + `,`; !strings.Contains(row, want) {
			t.Errorf("%s %s: encodes as %s, want %s", tc.column, tc.in, row, want)
		}
	}
}

// FuzzUnquote: unquote accepts a string literal exactly when it is valid UTF-8
// text, and then reads it as encoding/json does.
func FuzzUnquote(f *testing.F) {
	for _, lit := range badStrings {
		f.Add([]byte(lit))
	}
	for _, lit := range []string{`""`, `"\"\\\/\b\f\n\r\t"`, `"\ud83d\ude00"`, `"\ufffd"`, "\"\uFFFD\"", "\"é\""} {
		f.Add([]byte(lit))
	}
	f.Fuzz(func(t *testing.T, lit []byte) {
		var want string
		if len(lit) < 2 || lit[0] != '"' || stringLen(lit) != len(lit) || json.Unmarshal(lit, &want) != nil {
			return // not exactly one valid JSON string literal
		}
		got, err := unquote(lit)
		if err != nil {
			var ve *valueError
			if !errors.As(err, &ve) || !strings.Contains(ve.reason, "invalid UTF-8") {
				t.Fatalf("unquote(%q): error %v is not a value error about UTF-8", lit, err)
			}
			// encoding/json must have repaired something.
			if !strings.ContainsRune(want, utf8.RuneError) {
				t.Fatalf("unquote(%q) refused text encoding/json reads as %q", lit, want)
			}
			return
		}
		if got != want || !utf8.ValidString(got) {
			t.Fatalf("unquote(%q) = %q, encoding/json reads %q", lit, got, want)
		}
	})
}
