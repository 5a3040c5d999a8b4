package schema

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// fullGenericRow sets every column of everyTypeSpec in the form EncodeRows writes.
const fullGenericRow = `{"id":"row-1","name":"Ada","body":"long \u2028 text \u001f","n32":-2147483648,` +
	`"n64":-9223372036854775808,"f32":0.1,"f64":1.0000000000000002,"ok":true,` +
	`"at":"1969-12-31T23:59:59.999999Z","blob":"aGVsbG8=","emb":[0.5,-1,3.4028235e+38],` +
	`"tags":["a","","ü"],"grid":[[1,null,9007199254740993],[],[-1]],` +
	`"times":["0001-01-01T00:00:00.000000Z","9999-12-31T23:59:59.999999Z"],` +
	`"vecs":[[1,2],[3,4]],"ünïcode name":-0}`

// nullGenericRow leaves out or nulls every nullable column.
const nullGenericRow = `{"id":"row-2","name":null,"body":null,"n32":null,"n64":0,"f32":null,"f64":null,` +
	`"ok":null,"at":null,"blob":null,"emb":null,"tags":null,"grid":null,"times":null,"vecs":null,"ünïcode name":null}`

func decodeRows(t *testing.T, s *Spec, rows ...string) arrow.RecordBatch {
	t.Helper()
	rec, err := s.Codec().Decode(raws(rows...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Release)
	return rec
}

func TestGenericRowRoundTripsEveryType(t *testing.T) {
	s := mustSpec(t, everyTypeSpec)
	rec := decodeRows(t, s, fullGenericRow, nullGenericRow, `{"id":"row-3","n64":5}`)
	got := encodeAll(t, rec)
	if got[0] != fullGenericRow {
		t.Errorf("full row changed\n got %s\nwant %s", got[0], fullGenericRow)
	}
	if got[1] != nullGenericRow {
		t.Errorf("null row changed\n got %s\nwant %s", got[1], nullGenericRow)
	}
	if want := strings.Replace(strings.Replace(nullGenericRow, "row-2", "row-3", 1), `"n64":0`, `"n64":5`, 1); got[2] != want {
		t.Errorf("absent nullable columns are not null\n got %s\nwant %s", got[2], want)
	}
	// Re-decoding the encoding gives the same batch.
	again := decodeRows(t, s, got...)
	if !array.RecordEqual(rec, again) {
		t.Fatal("decode(encode(batch)) != batch")
	}
}

func TestTimestampInputForms(t *testing.T) {
	s := mustSpec(t, `{"columns":[["id",{"type":"string"}],["at",{"type":"timestamp"}]]}`)
	for _, tc := range []struct{ in, want string }{
		{`1714566896123456`, "2024-05-01T12:34:56.123456Z"},
		{`-1`, "1969-12-31T23:59:59.999999Z"},
		{`"2024-05-01T12:34:56Z"`, "2024-05-01T12:34:56.000000Z"},
		{`"2024-05-01T14:34:56.5+02:00"`, "2024-05-01T12:34:56.500000Z"},
		{`"2024-05-01T12:34:56.123456789Z"`, "2024-05-01T12:34:56.123456Z"}, // below µs is truncated
	} {
		rec := decodeRows(t, s, `{"id":"a","at":`+tc.in+`}`)
		row := encodeAll(t, rec)[0]
		if want := `{"id":"a","at":"` + tc.want + `"}`; row != want {
			t.Errorf("%s: got %s, want %s", tc.in, row, want)
		}
	}
}

// TestGenericBadInputNamesRowAndColumn: the 400 cases of a generic add, each named.
func TestGenericBadInputNamesRowAndColumn(t *testing.T) {
	s := mustSpec(t, everyTypeSpec)
	ok := `{"id":"ok","n64":1}`
	for _, tc := range []struct{ name, row, column, reason string }{
		{"undeclared key", `{"id":"x","n64":1,"colour":"red"}`, "colour", "no such column"},
		{"case differs", `{"id":"x","n64":1,"Name":"a"}`, "Name", "no such column"},
		{"null in non-null", `{"id":"x","n64":null}`, "n64", "null is not allowed"},
		{"missing non-null", `{"id":"x"}`, "n64", "required column is missing"},
		{"id null", `{"id":null,"n64":1}`, "id", "null"},
		{"id missing", `{"n64":1}`, "id", "missing"},
		{"id not string", `{"id":["a"],"n64":1}`, "id", "expected a string"},
		{"id empty", `{"id":"","n64":1}`, "id", "empty"},
		{"string as number", `{"id":"x","n64":1,"name":5}`, "name", "expected a string, got number 5"},
		{"large string as bool", `{"id":"x","n64":1,"body":true}`, "body", "expected a string"},
		{"int32 abc", `{"id":"x","n64":1,"n32":"abc"}`, "n32", `got string "abc"`},
		{"int32 out of range", `{"id":"x","n64":1,"n32":2147483648}`, "n32", "out of range for int32"},
		{"int32 negative out of range", `{"id":"x","n64":1,"n32":-2147483649}`, "n32", "out of range for int32"},
		{"int64 1.5", `{"id":"x","n64":1.5}`, "n64", "expected an integer, got number 1.5"},
		{"int64 1.0", `{"id":"x","n64":1.0}`, "n64", "expected an integer"},
		{"int64 out of range", `{"id":"x","n64":-9223372036854775809}`, "n64", "out of range"},
		{"float32 out of range", `{"id":"x","n64":1,"f32":-3.5e38}`, "f32", "out of range"},
		{"float64 out of range", `{"id":"x","n64":1,"f64":1e309}`, "f64", "out of range"},
		{"float as bool", `{"id":"x","n64":1,"f64":false}`, "f64", "expected a number"},
		{"bool as number", `{"id":"x","n64":1,"ok":1}`, "ok", "expected a boolean"},
		{"timestamp junk", `{"id":"x","n64":1,"at":"2024-13-01T00:00:00Z"}`, "at", "RFC 3339"},
		{"timestamp no zone", `{"id":"x","n64":1,"at":"2024-05-01T00:00:00"}`, "at", "RFC 3339"},
		{"timestamp date only", `{"id":"x","n64":1,"at":"2024-05-01"}`, "at", "RFC 3339"},
		{"timestamp bool", `{"id":"x","n64":1,"at":true}`, "at", "RFC 3339"},
		{"timestamp below year 1", `{"id":"x","n64":1,"at":"0000-12-31T23:00:00Z"}`, "at", "0001-9999"},
		{"timestamp offset past year 9999", `{"id":"x","n64":1,"at":"9999-12-31T23:00:00-02:00"}`, "at", "0001-9999"},
		{"timestamp int out of range", `{"id":"x","n64":1,"at":-62135596800000001}`, "at", "0001-9999"},
		{"binary invalid", `{"id":"x","n64":1,"blob":"@@@"}`, "blob", "invalid base64"},
		{"binary unpadded", `{"id":"x","n64":1,"blob":"aGVsbG8"}`, "blob", "invalid base64"},
		{"binary number", `{"id":"x","n64":1,"blob":12}`, "blob", "base64"},
		{"vector short", `{"id":"x","n64":1,"emb":[1,2]}`, "emb", "expected 3 elements, got 2"},
		{"vector long", `{"id":"x","n64":1,"emb":[1,2,3,4]}`, "emb", "expected 3 elements, got 4"},
		{"vector null component", `{"id":"x","n64":1,"emb":[1,null,3]}`, "emb", "[1]: null is not allowed"},
		{"vector string component", `{"id":"x","n64":1,"emb":[1,"2",3]}`, "emb", "[1]: expected a number"},
		{"vector not array", `{"id":"x","n64":1,"emb":"1,2,3"}`, "emb", "expected an array of 3"},
		{"list null item", `{"id":"x","n64":1,"tags":["a",null]}`, "tags", "[1]: null is not allowed"},
		{"list wrong item", `{"id":"x","n64":1,"tags":["a",1]}`, "tags", "[1]: expected a string"},
		{"nested list wrong item", `{"id":"x","n64":1,"grid":[[1],[2,"3"]]}`, "grid", `[1][1]: expected an integer, got string "3"`},
		{"nested list not array", `{"id":"x","n64":1,"grid":[1]}`, "grid", "[0]: expected an array"},
		{"list of vectors dim", `{"id":"x","n64":1,"vecs":[[1,2],[3]]}`, "vecs", "[1]: expected 2 elements"},
		{"list of timestamps", `{"id":"x","n64":1,"times":["now"]}`, "times", "[0]: invalid RFC 3339"},
		{"long value is cut", `{"id":"x","n64":1,"n32":"` + strings.Repeat("é", 100) + `"}`, "n32", "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Codec().Decode(raws(ok, ok, tc.row))
			checkInputError(t, err, 2, tc.column, tc.reason)
		})
	}
}

// TestStringsThatAreNotUTF8AreNotRepaired: both were once stored with U+FFFD in
// place of what was sent (strict_input_test.go has every case).
func TestStringsThatAreNotUTF8AreNotRepaired(t *testing.T) {
	s := mustSpec(t, `{"columns":[["id",{"type":"string"}]]}`)
	for i, row := range []string{"{\"id\":\"a\xffb\"}", `{"id":"\ud800x"}`} {
		_, err := s.Codec().Decode(raws(`{"id":"ok"}`, row))
		checkInputError(t, err, 1, IDColumn, "invalid UTF-8")
		if want := []string{"byte 0xff at offset 1", `\ud800 at offset 0`}[i]; !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %q does not say %s", row, err, want)
		}
	}
}

func TestEncodeLeavesOutHiddenColumns(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "v", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "_seq", Type: arrow.PrimitiveTypes.Uint64},
	}, nil)
	b := array.NewRecordBuilder(memPool, s)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).AppendValues([]string{"a", "b"}, nil)
	b.Field(1).(*array.Int64Builder).AppendValues([]int64{1, 0}, []bool{true, false})
	b.Field(2).(*array.Uint64Builder).AppendValues([]uint64{7, 8}, nil)
	rec := b.NewRecordBatch()
	defer rec.Release()
	got := encodeAll(t, rec)
	if got[0] != `{"id":"a","v":1}` || got[1] != `{"id":"b","v":null}` {
		t.Fatalf("got %q", got)
	}
	one, err := EncodeRow(rec.NewSlice(1, 2), 0)
	if err != nil || string(one) != `{"id":"b","v":null}` {
		t.Fatalf("EncodeRow of a slice: %s, %v", one, err)
	}
	if _, err := EncodeRow(rec, 2); err == nil {
		t.Fatal("EncodeRow past the end succeeded")
	}
}

func TestEncodeOfSlicedNestedColumns(t *testing.T) {
	// Batches from a scan are often slices; offsets of nested children must hold.
	rec := decodeRollouts(t,
		`{"id":"a","relationships":[{"target_id":"x","relation":"r"}],"input_tokens":[1]}`,
		`{"id":"b","relationships":[{"target_id":"y","relation":"s","weight":2}],"input_tokens":[2,3]}`,
	)
	sl := rec.NewSlice(1, 2)
	defer sl.Release()
	got := encodeAll(t, sl)[0]
	for _, want := range []string{`"relationships":[{"target_id":"y","relation":"s","weight":2}]`, `"input_tokens":[2,3]`} {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %s", got, want)
		}
	}
}

func TestEncodeRefusesUnknownTypes(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}, {Name: "u", Type: arrow.PrimitiveTypes.Uint16}}, nil)
	b := array.NewRecordBuilder(memPool, s)
	defer b.Release()
	rec := b.NewRecordBatch()
	defer rec.Release()
	if _, err := EncodeRows(rec); err == nil || !strings.Contains(err.Error(), `"u"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestNewCodecChecksTheSchema(t *testing.T) {
	str := arrow.BinaryTypes.String
	for name, fields := range map[string][]arrow.Field{
		"no id":        {{Name: "x", Type: str}},
		"nullable id":  {{Name: "id", Type: str, Nullable: true}},
		"large id":     {{Name: "id", Type: arrow.BinaryTypes.LargeString}},
		"hidden":       {{Name: "id", Type: str}, {Name: "_seq", Type: arrow.PrimitiveTypes.Uint64}},
		"duplicate":    {{Name: "id", Type: str}, {Name: "a", Type: str}, {Name: "a", Type: str}},
		"unsupported":  {{Name: "id", Type: str}, {Name: "d", Type: arrow.FixedWidthTypes.Date32}},
		"timestamp ns": {{Name: "id", Type: str}, {Name: "t", Type: arrow.FixedWidthTypes.Timestamp_ns}},
	} {
		if _, err := newCodec(arrow.NewSchema(fields, nil)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s/", "\x00\x01\x1f\x7f", "\n\r\t\b\f", "é✓😀", "\u2028\u2029", "a\xffb", "<&>"} {
		got := appendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q encodes to invalid JSON %s", s, got)
		}
		want, _ := json.Marshal(s)
		var wantBack string
		_ = json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Errorf("%q: decodes to %q, encoding/json gives %q", s, back, wantBack)
		}
	}
}
