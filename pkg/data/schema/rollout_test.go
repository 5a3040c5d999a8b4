package schema

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// fullRollout sets every column of the Rollout schema, in the form EncodeRows
// writes it, so decode then encode must give it back byte for byte.
const fullRollout = `{"id":"r1-0","rollout_id":"r1","problem_id":"p7","dataset":"gsm8k",` +
	`"sequence_order":3,"role":"user","created_at":"2024-05-01T12:34:56.123456Z",` +
	`"content":"What is 2+2? \"quoted\" \\ tab\t<b>&","content_type":"text/markdown",` +
	`"model_input_string":"in","model_output_string":"out","rationale":"because",` +
	`"problem_text":"2+2","user_metadata":"note ✓","input_tokens":[1,2,2147483647],` +
	`"output_tokens":[-2147483648,0],"output_logprobs":[-0.1,-2.5],` +
	`"input_logprobs":[null,-0.75],"ref_logprobs":[],"loss_mask":[0,1,-128,127],` +
	`"num_input_tokens":3,"num_output_tokens":2,"advantage":0.5,"reward":1,` +
	`"raw_reward":-3.25,"score":3.4028235e+38,"grader_id":"g1","include_in_training":false,` +
	`"exclude_reason":"dup","policy_version":"v12","relationships":[` +
	`{"target_id":"r0","relation":"parent","weight":0.25},{"target_id":"r2","relation":"sibling","weight":null}],` +
	`"binary_payload":"AAEC/w==","payload_size":9007199254740993,"payload_checksum":"sha256:ab",` +
	`"artifact_type":"trace","metadata":"{\"k\":[1,2],\"z\":{\"a\":null}}"}`

var testNow = time.Date(2025, 1, 2, 3, 4, 5, 678901234, time.UTC)

func decodeRollouts(t *testing.T, rows ...string) arrow.RecordBatch {
	t.Helper()
	rec, err := DecodeRollouts(raws(rows...), testNow)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Release)
	return rec
}

func raws(rows ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(rows))
	for i, r := range rows {
		out[i] = json.RawMessage(r)
	}
	return out
}

func encodeAll(t *testing.T, rec arrow.RecordBatch) []string {
	t.Helper()
	rows, err := EncodeRows(rec)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		if !json.Valid(r) {
			t.Fatalf("row %d encodes to invalid JSON: %s", i, r)
		}
		out[i] = string(r)
	}
	return out
}

func TestRolloutSchemaMatchesHandbook(t *testing.T) {
	want := []string{"id", "rollout_id", "problem_id", "dataset", "sequence_order", "role",
		"created_at", "content", "content_type", "model_input_string", "model_output_string",
		"rationale", "problem_text", "user_metadata", "input_tokens", "output_tokens",
		"output_logprobs", "input_logprobs", "ref_logprobs", "loss_mask", "num_input_tokens",
		"num_output_tokens", "advantage", "reward", "raw_reward", "score", "grader_id",
		"include_in_training", "exclude_reason", "policy_version", "relationships",
		"binary_payload", "payload_size", "payload_checksum", "artifact_type", "metadata"}
	s := Rollout()
	var got []string
	for _, f := range s.Fields() {
		got = append(got, f.Name)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("columns\n got %v\nwant %v", got, want)
	}
	if f := s.Field(0); f.Nullable || f.Type.ID() != arrow.STRING {
		t.Fatalf("id is %s nullable=%v", f.Type, f.Nullable)
	}
	if len(s.FieldIndices("_seq")) != 0 {
		t.Fatal("the schema must not carry _seq; the WAL adds it")
	}
	ts := s.Field(s.FieldIndices("created_at")[0]).Type.(*arrow.TimestampType)
	if ts.Unit != arrow.Microsecond || ts.TimeZone != "UTC" {
		t.Fatalf("created_at is %s", ts)
	}
}

func TestRolloutRoundTripsEveryColumn(t *testing.T) {
	rec := decodeRollouts(t, fullRollout)
	if rec.NumRows() != 1 || rec.NumCols() != int64(Rollout().NumFields()) {
		t.Fatalf("batch is %dx%d", rec.NumRows(), rec.NumCols())
	}
	for i, c := range rec.Columns() {
		if c.NullN() != 0 && rec.Schema().Field(i).Name != "input_logprobs" {
			t.Errorf("column %s has a null", rec.Schema().Field(i).Name)
		}
	}
	if got := encodeAll(t, rec)[0]; got != fullRollout {
		t.Fatalf("round trip changed the record\n got %s\nwant %s", got, fullRollout)
	}
	// int64 beyond 2^53 stays exact.
	size := rec.Column(rec.Schema().FieldIndices("payload_size")[0]).(*array.Int64).Value(0)
	if size != 9007199254740993 {
		t.Fatalf("payload_size = %d", size)
	}
}

func TestRolloutDefaults(t *testing.T) {
	rec := decodeRollouts(t,
		`{"id":"a","rollout_id":"r1"}`,
		`{"id":"b","rollout_id":"r2","problem_id":null,"role":null,"created_at":null,"content_type":null}`,
		`{"id":"c","problem_id":"p","role":"system","created_at":0,"content_type":"application/json","sequence_order":7}`,
		`{"id":"d","sequence_order":null}`,
	)
	rows := encodeAll(t, rec)
	type want struct{ problem, sequence, role, created, ctype any }
	nowText := "2025-01-02T03:04:05.678901Z" // now truncated to the microsecond
	for i, w := range []want{
		{"r1", 0.0, "assistant", nowText, "text/plain"},
		{"r2", 0.0, "assistant", nowText, "text/plain"},
		{"p", 7.0, "system", "1970-01-01T00:00:00.000000Z", "application/json"},
		{nil, 0.0, "assistant", nowText, "text/plain"},
	} {
		var m map[string]any
		if err := json.Unmarshal([]byte(rows[i]), &m); err != nil {
			t.Fatal(err)
		}
		got := want{m["problem_id"], m["sequence_order"], m["role"], m["created_at"], m["content_type"]}
		if got != w {
			t.Errorf("row %d: got %+v, want %+v", i, got, w)
		}
	}
}

func TestRolloutMetadataIsJSONText(t *testing.T) {
	rec := decodeRollouts(t,
		`{"id":"obj","metadata":{ "b" : [1, 2.50],"a":"x" }}`,
		`{"id":"str","metadata":"{\"b\":[1,2.50],\"a\":\"x\"}"}`,
		`{"id":"plain","metadata":"not json, just text"}`,
		`{"id":"num","metadata":12}`,
		`{"id":"none","metadata":null}`,
	)
	rows := encodeAll(t, rec)
	// An object is stored compacted with its key order and number spelling kept; a
	// string is the text itself. Both come back as a string.
	for i, want := range []string{
		`"metadata":"{\"b\":[1,2.50],\"a\":\"x\"}"`,
		`"metadata":"{\"b\":[1,2.50],\"a\":\"x\"}"`,
		`"metadata":"not json, just text"`,
		`"metadata":"12"`,
		`"metadata":null`,
	} {
		if !strings.HasSuffix(rows[i], want+"}") {
			t.Errorf("row %d: %s does not end with %s", i, rows[i], want)
		}
	}
	// The HTTP API's encoder writes the JSON value the text holds (the reference
	// API's metadata is a JSON value), and text that is not JSON as a string.
	enc, err := NewRowEncoder(rec.Schema(), true)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{
		`"metadata":{"b":[1,2.50],"a":"x"}`,
		`"metadata":{"b":[1,2.50],"a":"x"}`,
		`"metadata":"not json, just text"`,
		`"metadata":12`,
		`"metadata":null`,
	} {
		row, err := enc.AppendRow(nil, rec, i)
		if err != nil || !strings.HasSuffix(string(row), want+"}") || !json.Valid(row) {
			t.Errorf("row %d: %s, %v; want it to end with %s", i, row, err, want)
		}
	}
}

// TestRolloutMetadataTextIsValidUTF8 guards a fuzz find: an object key with
// invalid UTF-8 was stored byte for byte, encoded with U+FFFD, and so decoded back
// to different text. Such text is refused now, like any string that is not UTF-8;
// what is accepted round-trips.
func TestRolloutMetadataTextIsValidUTF8(t *testing.T) {
	_, err := DecodeRollouts(raws("{\"id\":\"a\",\"metadata\":{\"k\xff\":[\"v\xfe\"]}}"), testNow)
	checkInputError(t, err, 0, MetadataColumn, "JSON text: invalid UTF-8 in string: byte 0xff at offset 3")
	rec := decodeRollouts(t, `{"id":"a","metadata":{"k\u00e9\ud83d\ude00":["v\n"]}}`)
	text := rec.Column(rec.Schema().FieldIndices(MetadataColumn)[0]).(*array.String).Value(0)
	if text != `{"k\u00e9\ud83d\ude00":["v\n"]}` {
		t.Fatalf("metadata text %q", text)
	}
	again := decodeRollouts(t, encodeAll(t, rec)...)
	if !array.RecordEqual(rec, again) {
		t.Fatal("metadata does not round-trip")
	}
}

// TestRolloutBadInputNamesRowAndColumn: every rejected record fails the whole add
// with a 400-class error that names the row and the column.
func TestRolloutBadInputNamesRowAndColumn(t *testing.T) {
	ok := `{"id":"fine"}`
	for _, tc := range []struct {
		name, row, column, reason string
	}{
		{"undeclared key", `{"id":"x","colour":"red"}`, "colour", "no such column"},
		{"hidden column", `{"id":"x","_seq":5}`, "_seq", "no such column"},
		{"id missing", `{"rollout_id":"r"}`, "id", "missing"},
		{"id null", `{"id":null}`, "id", "null"},
		{"id number", `{"id":7}`, "id", "expected a string"},
		{"id empty", `{"id":""}`, "id", "empty"},
		{"int32 as string", `{"id":"x","sequence_order":"abc"}`, "sequence_order", `string "abc"`},
		{"int32 fraction", `{"id":"x","sequence_order":1.5}`, "sequence_order", "integer"},
		{"int32 exponent", `{"id":"x","sequence_order":1e3}`, "sequence_order", "integer"},
		{"int32 overflow", `{"id":"x","num_input_tokens":2147483648}`, "num_input_tokens", "out of range for int32"},
		{"int64 fraction", `{"id":"x","payload_size":1.5}`, "payload_size", "integer"},
		{"int64 overflow", `{"id":"x","payload_size":9223372036854775808}`, "payload_size", "out of range"},
		{"int8 overflow in list", `{"id":"x","loss_mask":[1,0,128]}`, "loss_mask", "[2]"},
		{"float32 overflow", `{"id":"x","reward":1e39}`, "reward", "out of range for float32"},
		{"float as string", `{"id":"x","score":"1.0"}`, "score", "expected a number"},
		{"bool as string", `{"id":"x","include_in_training":"true"}`, "include_in_training", "boolean"},
		{"list not array", `{"id":"x","input_tokens":"1,2"}`, "input_tokens", "array"},
		{"list element type", `{"id":"x","output_logprobs":[0.1,"x"]}`, "output_logprobs", "[1]"},
		{"bad base64", `{"id":"x","binary_payload":"not base64!"}`, "binary_payload", "base64"},
		{"base64 not string", `{"id":"x","binary_payload":[1,2]}`, "binary_payload", "base64"},
		{"bad timestamp", `{"id":"x","created_at":"yesterday"}`, "created_at", "RFC 3339"},
		{"timestamp fraction", `{"id":"x","created_at":1.5}`, "created_at", "microseconds"},
		{"timestamp year 10000", `{"id":"x","created_at":253402300800000000}`, "created_at", "0001-9999"},
		{"relationship missing target", `{"id":"x","relationships":[{"relation":"p"}]}`, "relationships", "[0].target_id"},
		{"relationship extra field", `{"id":"x","relationships":[{"target_id":"a","relation":"p","w":1}]}`, "relationships", "[0].w"},
		{"relationship weight type", `{"id":"x","relationships":[{"target_id":"a","relation":"p","weight":true}]}`, "relationships", "[0].weight"},
		{"null in non-null default-less", `{"id":"x","relationships":[{"target_id":null,"relation":"p"}]}`, "relationships", "null"},
		{"duplicate key", `{"id":"x","dataset":"a","dataset":"b"}`, "dataset", "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeRollouts(raws(ok, tc.row), testNow)
			checkInputError(t, err, 1, tc.column, tc.reason)
		})
	}
}

func checkInputError(t *testing.T, err error, row int, column, reason string) {
	t.Helper()
	if err == nil {
		t.Fatal("decoded; want an error")
	}
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("error %v does not match ErrInvalid", err)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not an *Error", err)
	}
	if e.Row != row || e.Column != column {
		t.Fatalf("error %q locates row %d column %q, want row %d column %q", err, e.Row, e.Column, row, column)
	}
	msg := err.Error()
	if column != "" && !strings.Contains(msg, "column "+strconv.Quote(column)) {
		t.Fatalf("message %q does not name column %q", msg, column)
	}
	if row >= 0 && !strings.Contains(msg, "row ") {
		t.Fatalf("message %q does not name the row", msg)
	}
	if !strings.Contains(msg, reason) {
		t.Fatalf("message %q does not say %q", msg, reason)
	}
}

func TestDecodeRejectsRowsThatAreNotObjects(t *testing.T) {
	for _, row := range []string{`[1]`, `null`, `"x"`, `{"id":"x"`, ``, `{"id":"x"} {}`} {
		_, err := DecodeRollouts(raws(`{"id":"a"}`, row), testNow)
		checkInputError(t, err, 1, "", "")
	}
}

func TestDecodeOfNoRowsIsAnEmptyBatch(t *testing.T) {
	rec := decodeRollouts(t)
	if rec.NumRows() != 0 || !rec.Schema().Equal(Rollout()) {
		t.Fatalf("got %d rows of %s", rec.NumRows(), rec.Schema())
	}
}

var memPool = memory.DefaultAllocator
