package httpapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	dto "github.com/prometheus/client_model/go"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// arrowSpec is a generic schema of every column type a spec declares.
const arrowSpec = `{"columns":[["id",{"type":"string"}],["s",{"type":"string","nullable":true}],` +
	`["ls",{"type":"string","large":true,"nullable":true}],["i32",{"type":"int32","nullable":true}],["i64",{"type":"int64"}],` +
	`["f32",{"type":"float32","nullable":true}],["f64",{"type":"float64","nullable":true}],["b",{"type":"bool","nullable":true}],` +
	`["ts",{"type":"timestamp","nullable":true}],["bin",{"type":"binary","blob":true,"nullable":true}],` +
	`["vec",{"type":"vector","dim":3,"nullable":true}],["tags",{"type":"list","item":{"type":"string"},"nullable":true}],` +
	`["nums",{"type":"list","item":{"type":"int64","nullable":true},"nullable":true}]]}`

// arrowRows are rows of arrowSpec, in the form the API writes back.
var arrowRows = []string{
	`{"id":"a","s":"x","ls":"long","i32":-5,"i64":9007199254740993,"f32":0.5,"f64":1.25,"b":true,` +
		`"ts":"2024-05-01T12:00:00.123456Z","bin":"aGk=","vec":[1,2.5,-3],"tags":["p","q"],"nums":[1,null,3]}`,
	`{"id":"b","s":null,"ls":null,"i32":null,"i64":0,"f32":null,"f64":null,"b":null,"ts":null,"bin":null,"vec":null,"tags":null,"nums":null}`,
	`{"id":"c","s":"","ls":"","i32":2147483647,"i64":-1,"f32":-0.25,"f64":1e+300,"b":false,"ts":"0001-01-01T00:00:00.000000Z",` +
		`"bin":"","vec":[0,0,0],"tags":[],"nums":[]}`,
}

// arrowStream writes recs as one Arrow IPC stream of schema s.
func arrowStream(t testing.TB, s *arrow.Schema, recs ...arrow.RecordBatch) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(s))
	for _, rec := range recs {
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sendArrow posts an Arrow stream and returns the status and the answer.
func (e *apiEnv) sendArrow(path string, stream []byte) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+path, bytes.NewReader(stream))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", ArrowStreamType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		e.t.Errorf("POST %s: answer Content-Type %q, want JSON", path, ct)
	}
	return resp.StatusCode, out
}

// addArrow posts an Arrow stream that must be added, and returns the answer.
func (e *apiEnv) addArrow(path string, stream []byte) addAnswer {
	e.t.Helper()
	status, out := e.sendArrow(path, stream)
	if status != http.StatusCreated {
		e.t.Fatalf("POST %s (Arrow): %d %s", path, status, out)
	}
	var ans addAnswer
	if err := json.Unmarshal(out, &ans); err != nil {
		e.t.Fatalf("POST %s (Arrow): answer %s: %v", path, out, err)
	}
	return ans
}

// refuseArrow posts an Arrow stream that must be refused with status, and
// returns the message.
func (e *apiEnv) refuseArrow(status int, path string, stream []byte) string {
	e.t.Helper()
	got, out := e.sendArrow(path, stream)
	var eb ErrorBody
	if err := json.Unmarshal(out, &eb); err != nil || got != status || eb.Error.Message == "" {
		e.t.Fatalf("POST %s (Arrow): %d %s, want %d with an error message", path, got, out, status)
	}
	return eb.Error.Message
}

// likePyarrow rewrites rec into the types pyarrow and Polars write for the same
// values, in the reverse column order: large_string, large_binary, int64,
// double, timestamp[us] without a time zone, large_list, nullable fields.
func likePyarrow(t testing.TB, rec arrow.RecordBatch) arrow.RecordBatch {
	t.Helper()
	var fields []arrow.Field
	var cols []arrow.Array
	for i := int(rec.NumCols()) - 1; i >= 0; i-- {
		f := rec.Schema().Field(i)
		to := pyarrowType(f.Type)
		c, err := compute.CastArray(context.Background(), rec.Column(i), compute.SafeCastOptions(to))
		if err != nil {
			t.Fatalf("column %s: cast %s to %s: %v", f.Name, f.Type, to, err)
		}
		defer c.Release()
		fields = append(fields, arrow.Field{Name: f.Name, Type: to, Nullable: true})
		cols = append(cols, c)
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows())
}

func pyarrowType(t arrow.DataType) arrow.DataType {
	switch t := t.(type) {
	case *arrow.StringType:
		return arrow.BinaryTypes.LargeString
	case *arrow.BinaryType:
		return arrow.BinaryTypes.LargeBinary
	case *arrow.Int8Type, *arrow.Int32Type:
		return arrow.PrimitiveTypes.Int64
	case *arrow.Float32Type:
		return arrow.PrimitiveTypes.Float64
	case *arrow.TimestampType:
		return &arrow.TimestampType{Unit: arrow.Microsecond} // Python's datetime, no time zone
	case *arrow.ListType:
		return arrow.LargeListOfField(arrow.Field{Name: "item", Type: pyarrowType(t.Elem()), Nullable: true})
	case *arrow.StructType:
		// arrow-go's cast of a struct whose children are empty builds invalid
		// arrays: structs keep their fields' types.
		return t
	}
	return t
}

// byID decodes JSON rows exactly, keyed by id.
func byID(t *testing.T, rows []json.RawMessage) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, r := range rows {
		v := exact(t, r).(map[string]any)
		out[v["id"].(string)] = v
	}
	return out
}

// TestArrowAddReadsBackAsTheSameJSONAdd: the same rows added as JSON to one
// store and as an Arrow stream (in the types pyarrow writes, columns in another
// order, one record batch per row) to another read back the same through every
// read route, blobs included, and the Arrow add is one durable append.
func TestArrowAddReadsBackAsTheSameJSONAdd(t *testing.T) {
	e := newAPIEnv(t, objstoretest.File(t), "w1", nil)
	t.Run("rollout", func(t *testing.T) {
		records := []string{fullRollout, `{"id":"rec-min","rollout_id":"ro-1","created_at":"2024-01-01T00:00:00Z"}`,
			`{"id":"rec-min","rollout_id":"ro-2","created_at":"2024-01-02T00:00:00Z"}`} // a duplicate id, as JSON takes it
		for _, name := range []string{"j", "a"} {
			e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"`+name+`"}`, nil)
		}
		var jsonAdd addAnswer
		e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts/j/records?flush=true", `{"records":[`+strings.Join(records, ",")+`]}`, &jsonAdd)

		var batches []arrow.RecordBatch
		for _, r := range records {
			rec, err := schema.DecodeRollouts([]json.RawMessage{json.RawMessage(r)}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Release()
			py := likePyarrow(t, rec)
			defer py.Release()
			batches = append(batches, py)
		}
		appends := sampleCount(t, e.series.AddDuration)
		arrowAdd := e.addArrow("/api/v1/rollouts/a/records?flush=true", arrowStream(t, batches[0].Schema(), batches...))
		if arrowAdd.Count != 3 || !reflect.DeepEqual(arrowAdd.IDs, jsonAdd.IDs) || arrowAdd.Seq <= jsonAdd.Seq {
			t.Errorf("Arrow add answered %+v; the JSON add %+v", arrowAdd, jsonAdd)
		}
		if got := sampleCount(t, e.series.AddDuration) - appends; got != 1 {
			t.Errorf("three record batches made %d WAL appends, want one", got)
		}
		if j, a := byID(t, e.rows("rollouts", "j")), byID(t, e.rows("rollouts", "a")); !reflect.DeepEqual(j, a) || len(a) != 2 {
			t.Errorf("lists differ:\nJSON  %v\nArrow %v", j, a)
		}
		for _, id := range []string{"rec-full", "rec-min"} {
			_, j := e.do(http.MethodGet, "/api/v1/rollouts/j/records/"+id, nil)
			_, a := e.do(http.MethodGet, "/api/v1/rollouts/a/records/"+id, nil)
			if !reflect.DeepEqual(exact(t, j), exact(t, a)) {
				t.Errorf("get %s: JSON %s, Arrow %s", id, j, a)
			}
		}
		if status, _, _, body := e.blob("/api/v1/rollouts/a/records/rec-full/blob"); status != http.StatusOK || string(body) != "hello" {
			t.Errorf("blob of the Arrow record = %d %q, want hello", status, body)
		}
	})
	t.Run("generic", func(t *testing.T) {
		for _, name := range []string{"j", "a"} {
			e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"`+name+`","schema":`+arrowSpec+`}`, nil)
		}
		e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic/j/rows?flush=true", `{"rows":[`+strings.Join(arrowRows, ",")+`]}`, nil)
		spec, err := schema.ParseSpec([]byte(arrowSpec))
		if err != nil {
			t.Fatal(err)
		}
		raw := make([]json.RawMessage, len(arrowRows))
		for i, r := range arrowRows {
			raw[i] = json.RawMessage(r)
		}
		rec, err := spec.Codec().Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		defer rec.Release()
		py := likePyarrow(t, rec)
		defer py.Release()
		if ans := e.addArrow("/api/v1/generic/a/rows?flush=true", arrowStream(t, py.Schema(), py)); ans.Count != 3 || ans.IDs != nil {
			t.Errorf("Arrow add answered %+v", ans)
		}
		j, a := byID(t, e.rows("generic", "j")), byID(t, e.rows("generic", "a"))
		if !reflect.DeepEqual(j, a) || len(a) != 3 {
			t.Errorf("lists differ:\nJSON  %v\nArrow %v", j, a)
		}
		var every []string
		for _, c := range spec.Columns() {
			every = append(every, c.Name)
		}
		want := byID(t, rawRows(arrowRows))
		for id, w := range want {
			var got json.RawMessage
			e.ok(http.StatusOK, http.MethodGet, "/api/v1/generic/a/rows/"+id+"?columns="+strings.Join(every, ","), nil, &got)
			g := exact(t, got).(map[string]any)
			if !reflect.DeepEqual(g, w) {
				t.Errorf("get %s with its blob:\n got %v\nwant %v", id, g, w)
			}
		}
	})
}

func rawRows(rows []string) []json.RawMessage {
	out := make([]json.RawMessage, len(rows))
	for i, r := range rows {
		out[i] = json.RawMessage(r)
	}
	return out
}

// sampleCount is how many observations histogram h holds.
func sampleCount(t *testing.T, h interface{ Write(*dto.Metric) error }) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// newBatch builds a batch of the given columns (their own arrays).
func newBatch(fields []arrow.Field, cols ...arrow.Array) arrow.RecordBatch {
	n := 0
	if len(cols) > 0 {
		n = cols[0].Len()
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, int64(n))
}

func utf8s(vals ...any) arrow.Array {
	b := array.NewStringBuilder(memory.DefaultAllocator)
	defer b.Release()
	for _, v := range vals {
		if v == nil {
			b.AppendNull()
		} else {
			b.Append(v.(string))
		}
	}
	return b.NewArray()
}

func int64s(vals ...any) arrow.Array {
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	for _, v := range vals {
		if v == nil {
			b.AppendNull()
		} else {
			b.Append(int64(v.(int)))
		}
	}
	return b.NewArray()
}

// TestArrowAddAppliesTheRolloutDefaults: columns left out, or null, get
// DecodeRollouts' defaults, as in a JSON add.
func TestArrowAddAppliesTheRolloutDefaults(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	rec := newBatch([]arrow.Field{
		{Name: "rollout_id", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "id", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "role", Type: arrow.BinaryTypes.String, Nullable: true},
	}, utf8s("ro-1", nil), utf8s("a", "b"), utf8s(nil, "user"))
	defer rec.Release()
	before := time.Now().Truncate(time.Microsecond)
	e.addArrow("/api/v1/rollouts/r/records?flush=true", arrowStream(t, rec.Schema(), rec))
	after := time.Now()
	got := byID(t, e.rows("rollouts", "r"))
	for id, want := range map[string]map[string]any{
		"a": {"rollout_id": "ro-1", "problem_id": "ro-1", "role": schema.DefaultRole, "content_type": schema.DefaultContentType, "sequence_order": json.Number("0")},
		"b": {"rollout_id": nil, "problem_id": nil, "role": "user", "content_type": schema.DefaultContentType, "sequence_order": json.Number("0")},
	} {
		row := got[id].(map[string]any)
		for k, v := range want {
			if row[k] != v {
				t.Errorf("record %s: %s = %v, want %v", id, k, row[k], v)
			}
		}
		created, err := time.Parse(time.RFC3339Nano, row["created_at"].(string))
		if err != nil || created.Before(before) || created.After(after) {
			t.Errorf("record %s: created_at %v, not the time of the add", id, row["created_at"])
		}
	}
}

// TestArrowAddTakesTheTypesClientsWrite: a column order of its own, a
// dictionary-encoded id, large_string, narrower and wider integers, a
// timestamp in milliseconds of another zone, an all-null column of null type.
func TestArrowAddTakesTheTypesClientsWrite(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+arrowSpec+`}`, nil)
	mem := memory.DefaultAllocator

	db := array.NewDictionaryBuilder(mem, &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}).(*array.BinaryDictionaryBuilder)
	defer db.Release()
	for _, id := range []string{"x", "y"} {
		if err := db.AppendString(id); err != nil {
			t.Fatal(err)
		}
	}
	ids := db.NewArray()
	defer ids.Release()
	ls := array.NewLargeStringBuilder(mem)
	defer ls.Release()
	ls.AppendValues([]string{"p", "q"}, nil)
	s := ls.NewArray()
	defer s.Release()
	i16 := array.NewInt16Builder(mem)
	defer i16.Release()
	i16.AppendValues([]int16{7, -7}, nil)
	n := i16.NewArray()
	defer n.Release()
	u32 := array.NewUint32Builder(mem)
	defer u32.Release()
	u32.AppendValues([]uint32{4000000000, 0}, nil)
	big := u32.NewArray()
	defer big.Release()
	ms := &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "America/New_York"}
	tb := array.NewTimestampBuilder(mem, ms)
	defer tb.Release()
	tb.AppendValues([]arrow.Timestamp{1714564800123, 0}, nil)
	ts := tb.NewArray()
	defer ts.Release()
	nulls := array.NewNull(2)
	defer nulls.Release()

	rec := newBatch([]arrow.Field{
		{Name: "i32", Type: n.DataType(), Nullable: true},
		{Name: "ts", Type: ms, Nullable: true},
		{Name: "id", Type: ids.DataType(), Nullable: true},
		{Name: "ls", Type: s.DataType(), Nullable: true},
		{Name: "i64", Type: big.DataType(), Nullable: true},
		{Name: "f64", Type: arrow.Null, Nullable: true},
	}, n, ts, ids, s, big, nulls)
	defer rec.Release()
	e.addArrow("/api/v1/generic/g/rows?flush=true", arrowStream(t, rec.Schema(), rec))
	got := byID(t, e.rows("generic", "g"))
	want := byID(t, rawRows([]string{
		`{"id":"x","s":null,"ls":"p","i32":7,"i64":4000000000,"f32":null,"f64":null,"b":null,"ts":"2024-05-01T12:00:00.123000Z","vec":null,"tags":null,"nums":null}`,
		`{"id":"y","s":null,"ls":"q","i32":-7,"i64":0,"f32":null,"f64":null,"b":null,"ts":"1970-01-01T00:00:00.000000Z","vec":null,"tags":null,"nums":null}`,
	}))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rows\n got %v\nwant %v", got, want)
	}
}

// TestArrowAddRefusalsNameTheColumn: every mismatch with the store's schema is
// a 400 naming the column (and, for a type, both types), and writes nothing.
func TestArrowAddRefusalsNameTheColumn(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+apiSpec+`}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	mem := memory.DefaultAllocator
	str := arrow.BinaryTypes.String
	i64 := arrow.PrimitiveTypes.Int64
	field := func(name string, typ arrow.DataType) arrow.Field {
		return arrow.Field{Name: name, Type: typ, Nullable: true}
	}
	scores := func(v float64) arrow.Array {
		b := array.NewFloat64Builder(mem)
		defer b.Release()
		b.AppendValues([]float64{1, v}, nil)
		return b.NewArray()
	}
	badUTF8 := array.NewStringBuilder(mem)
	defer badUTF8.Release()
	badUTF8.AppendValues([]string{"ok", "a\xffb"}, nil)
	nsb := array.NewTimestampBuilder(mem, &arrow.TimestampType{Unit: arrow.Nanosecond})
	defer nsb.Release()
	nsb.AppendValues([]arrow.Timestamp{1_000, 1_500}, nil)
	u64b := array.NewUint64Builder(mem)
	defer u64b.Release()
	u64b.AppendValues([]uint64{1, 1 << 63}, nil)

	cases := []struct {
		name  string
		store string
		rec   arrow.RecordBatch
		want  []string // in the message
	}{
		{"unknown column", "generic/g/rows", newBatch([]arrow.Field{field("id", str), field("n", i64), field("extra", i64)},
			utf8s("a"), int64s(1), int64s(2)), []string{`column "extra"`, "no such column"}},
		{"hidden column", "generic/g/rows", newBatch([]arrow.Field{field("id", str), field("n", i64), field("_seq", i64)},
			utf8s("a"), int64s(1), int64s(2)), []string{`column "_seq"`}},
		{"column twice", "generic/g/rows", newBatch([]arrow.Field{field("id", str), field("n", i64), field("n", i64)},
			utf8s("a"), int64s(1), int64s(2)), []string{`column "n"`, "twice"}},
		{"missing required column", "generic/g/rows", newBatch([]arrow.Field{field("id", str)}, utf8s("a")),
			[]string{`column "n"`, "missing"}},
		{"missing id", "rollouts/r/records", newBatch([]arrow.Field{field("rollout_id", str)}, utf8s("a")),
			[]string{`column "id"`, "missing"}},
		{"null id", "rollouts/r/records", newBatch([]arrow.Field{field("id", str)}, utf8s("a", nil)),
			[]string{`row 1, column "id"`, "null"}},
		{"null in a required column", "generic/g/rows", newBatch([]arrow.Field{field("id", str), field("n", i64)},
			utf8s("a", "b"), int64s(1, nil)), []string{`row 1, column "n"`, "null"}},
		{"empty id", "generic/g/rows", newBatch([]arrow.Field{field("id", str), field("n", i64)},
			utf8s("a", ""), int64s(1, 2)), []string{`row 1, column "id"`, "empty"}},
		{"id too long", "rollouts/r/records", newBatch([]arrow.Field{field("id", str)}, utf8s(strings.Repeat("x", schema.MaxIDBytes+1))),
			[]string{`row 0, column "id"`, "at most 1024"}},
		{"id not UTF-8", "rollouts/r/records", newBatch([]arrow.Field{field("id", str)}, badUTF8.NewArray()),
			[]string{`column "id"`, "utf8"}},
		{"type mismatch", "generic/g/rows", newBatch([]arrow.Field{field("id", str), field("n", str)},
			utf8s("a"), utf8s("1")), []string{`column "n"`, "utf8", "int64"}},
		{"list of the wrong item type", "generic/g/rows", newBatch([]arrow.Field{field("id", str), field("n", i64), field("tags", arrow.ListOf(i64))},
			utf8s("a"), int64s(1), listOfInt64s(t)), []string{`column "tags"`, "int64", "utf8"}},
		{"integer out of range", "generic/g/rows", newBatch([]arrow.Field{field("id", str), field("n", arrow.PrimitiveTypes.Uint64)},
			utf8s("a", "b"), u64b.NewArray()), []string{`column "n"`, "uint64", "int64"}},
		{"NaN", "generic/g/rows", newBatch([]arrow.Field{field("id", str), field("n", i64), field("score", arrow.PrimitiveTypes.Float64)},
			utf8s("a", "b"), int64s(1, 2), scores(nanValue())), []string{`row 1, column "score"`, "NaN"}},
		{"timestamp below a microsecond", "rollouts/r/records", newBatch([]arrow.Field{field("id", str), field("created_at", nsb.Type())},
			utf8s("a", "b"), nsb.NewArray()), []string{`row 1, column "created_at"`, "1500 ns"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer c.rec.Release()
			msg := e.refuseArrow(http.StatusBadRequest, "/api/v1/"+c.store, arrowStream(t, c.rec.Schema(), c.rec))
			t.Log(msg)
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not say %q", msg, w)
				}
			}
		})
	}
	if r, g := e.rows("rollouts", "r"), e.rows("generic", "g"); len(r) != 0 || len(g) != 0 {
		t.Fatalf("refused adds left rows: %s / %s", r, g)
	}
}

func nanValue() float64 {
	var zero float64
	return zero / zero
}

func listOfInt64s(t *testing.T) arrow.Array {
	t.Helper()
	b := array.NewListBuilder(memory.DefaultAllocator, arrow.PrimitiveTypes.Int64)
	defer b.Release()
	b.Append(true)
	b.ValueBuilder().(*array.Int64Builder).Append(1)
	return b.NewArray()
}

// TestArrowAddRefusesMalformedStreams: bytes that are no stream, a stream cut
// short, a schema message whose length is a lie, a view column, an empty body
// and an empty rollout add are 4xx answers naming the problem, never a 500 or
// a panic; a stream whose buffers decompress past its memory is a 413.
func TestArrowAddRefusesMalformedStreams(t *testing.T) {
	e := newAPIEnv(t, objstoretest.Mem(t), "w1", func(c *ServerConfig) { c.MaxBodyBytes = 1 << 20 })
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+apiSpec+`}`, nil)
	e.ok(http.StatusCreated, http.MethodPost, "/api/v1/rollouts", `{"name":"r"}`, nil)
	rec := newBatch([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}, {Name: "n", Type: arrow.PrimitiveTypes.Int64}},
		utf8s("a", "b", "c"), int64s(1, 2, 3))
	defer rec.Release()
	valid := arrowStream(t, rec.Schema(), rec)

	lie := bytes.Clone(valid)
	binary.LittleEndian.PutUint32(lie[4:], 0x7ffffff0) // the schema message's metadata length
	view := func() []byte {
		b := array.NewStringViewBuilder(memory.DefaultAllocator)
		defer b.Release()
		b.Append("a string view longer than twelve bytes")
		ids := b.NewArray()
		r := newBatch([]arrow.Field{{Name: "id", Type: ids.DataType()}}, ids)
		defer r.Release()
		return arrowStream(t, r.Schema(), r)
	}()
	schemaOnly := arrowStream(t, arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}}, nil))

	for _, c := range []struct {
		name, path string
		body       []byte
		status     int
		want       string
	}{
		{"garbage", "generic/g/rows", []byte("this is not an Arrow stream at all"), http.StatusBadRequest, "malformed Arrow IPC stream"},
		{"truncated", "generic/g/rows", valid[:len(valid)-30], http.StatusBadRequest, "malformed Arrow IPC stream"},
		{"cut in the schema", "generic/g/rows", valid[:12], http.StatusBadRequest, "malformed Arrow IPC stream"},
		{"metadata length is a lie", "generic/g/rows", lie, http.StatusBadRequest, "malformed Arrow IPC stream"},
		{"view column", "rollouts/r/records", view, http.StatusBadRequest, "view type"},
		{"empty body", "generic/g/rows", nil, http.StatusBadRequest, "empty"},
		{"empty rollout add", "rollouts/r/records", schemaOnly, http.StatusBadRequest, "must not be empty"},
		{"over the body limit", "generic/g/rows", make([]byte, 1<<20+1), http.StatusRequestEntityTooLarge, "limit"},
		{"decompresses past its memory", "generic/g/rows", zstdBomb(t), http.StatusRequestEntityTooLarge, "memory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			msg := e.refuseArrow(c.status, "/api/v1/"+c.path, c.body)
			t.Log(msg)
			if !strings.Contains(msg, c.want) {
				t.Errorf("message %q does not say %q", msg, c.want)
			}
		})
	}
	// An empty generic stream is an empty add, as an empty JSON array is.
	empty := arrowStream(t, rec.Schema())
	if ans := e.addArrow("/api/v1/generic/g/rows", empty); ans.Count != 0 {
		t.Errorf("empty generic add answered %+v", ans)
	}
	// Its schema is checked all the same.
	wrong := arrowStream(t, arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "n", Type: arrow.PrimitiveTypes.Int64}}, nil))
	if msg := e.refuseArrow(http.StatusBadRequest, "/api/v1/generic/g/rows", wrong); !strings.Contains(msg, `column "id"`) {
		t.Errorf("empty stream of a wrong schema: %q", msg)
	}
	// Another Arrow media type is not this one: 415, as today.
	if status, ans := e.sendAs("/api/v1/generic/g/rows", "application/vnd.apache.arrow.file", string(valid)); status != http.StatusUnsupportedMediaType {
		t.Errorf("an Arrow file: %d %+v, want 415", status, ans)
	}
	if r, g := e.rows("rollouts", "r"), e.rows("generic", "g"); len(r) != 0 || len(g) != 0 {
		t.Fatalf("refused adds left rows: %s / %s", r, g)
	}
}

// zstdBomb is a small stream whose zstd buffers decompress to 64 MiB.
func zstdBomb(t *testing.T) []byte {
	t.Helper()
	const n = 8 << 20
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	b.AppendValues(make([]int64, n), nil)
	col := b.NewArray()
	ids := array.NewStringBuilder(memory.DefaultAllocator)
	defer ids.Release()
	for range n {
		ids.Append("")
	}
	idCol := ids.NewArray()
	rec := newBatch([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}, {Name: "n", Type: arrow.PrimitiveTypes.Int64}}, idCol, col)
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(rec.Schema()), ipc.WithZstd())
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() > 1<<20 {
		t.Fatalf("the bomb is %d bytes, over the body limit", buf.Len())
	}
	return buf.Bytes()
}

// TestArrowAddIsDurableAcrossACrash: an Arrow add acknowledged without a flush
// is in the WAL: a worker restarted under the same id after a crash (the first
// never closed) seals it, and every row reads back.
func TestArrowAddIsDurableAcrossACrash(t *testing.T) {
	bucket := objstoretest.File(t)
	crashed := newAPIEnv(t, bucket, "w1", nil)
	crashed.ok(http.StatusCreated, http.MethodPost, "/api/v1/generic", `{"name":"g","schema":`+apiSpec+`}`, nil)
	rec := newBatch([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}, {Name: "n", Type: arrow.PrimitiveTypes.Int64}},
		utf8s("a", "b"), int64s(1, 2))
	defer rec.Release()
	if ans := crashed.addArrow("/api/v1/generic/g/rows", arrowStream(t, rec.Schema(), rec)); ans.Count != 2 {
		t.Fatalf("add answered %+v", ans)
	}

	restarted := newAPIEnv(t, bucket, "w1", nil)
	if stores, rows, err := restarted.stores.SealLeftovers(context.Background()); err != nil || stores != 1 || rows != 2 {
		t.Fatalf("SealLeftovers = %d stores, %d rows, %v; want the 2 acknowledged rows", stores, rows, err)
	}
	got := byID(t, newAPIEnv(t, bucket, "w2", nil).rows("generic", "g"))
	want := byID(t, rawRows([]string{`{"id":"a","score":null,"n":1,"tags":null}`, `{"id":"b","score":null,"n":2,"tags":null}`}))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after the restart: %v, want %v", got, want)
	}
}

// FuzzArrowAdd feeds arbitrary bytes to the Arrow add's decoding and its check
// against a fixed schema (arrowSpec's). Properties: a refusal is a 4xx, never a
// panic or a 500; an accepted stream is a batch of exactly the store's schema
// whose ids are valid, that the WAL takes (every column of its type, no null
// where none is allowed).
func FuzzArrowAdd(f *testing.F) {
	spec, err := schema.ParseSpec([]byte(arrowSpec))
	if err != nil {
		f.Fatal(err)
	}
	rec, err := spec.Codec().Decode(rawRows(arrowRows))
	if err != nil {
		f.Fatal(err)
	}
	defer rec.Release()
	valid := arrowStream(f, rec.Schema(), rec)
	py := likePyarrow(f, rec)
	defer py.Release()
	pyStream := arrowStream(f, py.Schema(), py, py)
	var zstd bytes.Buffer
	w := ipc.NewWriter(&zstd, ipc.WithSchema(py.Schema()), ipc.WithZstd())
	if err := w.Write(py); err != nil {
		f.Fatal(err)
	}
	if err := w.Close(); err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(pyStream)
	f.Add(zstd.Bytes())
	f.Add(valid[:len(valid)/2])
	f.Add(pyStream[:len(pyStream)-8])
	f.Add(arrowStream(f, py.Schema()))
	f.Add([]byte{})
	codec := spec.Codec()
	f.Fuzz(func(t *testing.T, data []byte) {
		mem := newBoundedAllocator(memory.DefaultAllocator, 4<<20)
		a, err := decodeArrowStream(data, mem)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status < 400 || ae.status >= 500 {
				t.Fatalf("refusal %v is not a 4xx", err)
			}
			return
		}
		defer a.release()
		out, err := func() (rec arrow.RecordBatch, err error) {
			defer func() {
				if p := recover(); p != nil {
					rec, err = nil, arrowRefusal(mem, errors.New("panic"))
				}
			}()
			return codec.DecodeArrow(mem, a.schema, a.recs)
		}()
		if err != nil {
			var ae *apiError
			if !errors.Is(err, schema.ErrInvalid) && !(errors.As(err, &ae) && ae.status < 500) {
				t.Fatalf("check refusal %v is not a client error", err)
			}
			return
		}
		defer out.Release()
		if !out.Schema().Equal(codec.Schema()) {
			t.Fatalf("accepted batch has schema %s", out.Schema())
		}
		for i, f := range out.Schema().Fields() {
			if err := array.ValidateFull(out.Column(i)); err != nil {
				t.Fatalf("column %s: %v", f.Name, err)
			}
			if !f.Nullable && out.Column(i).NullN() > 0 {
				t.Fatalf("column %s: %d nulls", f.Name, out.Column(i).NullN())
			}
		}
		ids := out.Column(0).(*array.String)
		for i := range ids.Len() {
			if id := ids.Value(i); id == "" || len(id) > schema.MaxIDBytes {
				t.Fatalf("accepted id %q", id)
			}
		}
	})
}
