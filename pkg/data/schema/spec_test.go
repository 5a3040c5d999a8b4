package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// everyTypeSpec declares a column of every kind, nested lists and a vector.
const everyTypeSpec = `{"columns": [
	["id", {"type":"string"}],
	["name", {"type":"string","nullable":true}],
	["body", {"type":"string","large":true,"nullable":true}],
	["n32", {"type":"int32","nullable":true}],
	["n64", {"type":"int64"}],
	["f32", {"type":"float32","nullable":true}],
	["f64", {"type":"float64","nullable":true}],
	["ok", {"type":"bool","nullable":true}],
	["at", {"type":"timestamp","nullable":true}],
	["blob", {"type":"binary","nullable":true}],
	["emb", {"type":"vector","dim":3,"nullable":true}],
	["tags", {"type":"list","item":{"type":"string"},"nullable":true}],
	["grid", {"type":"list","item":{"type":"list","item":{"type":"int64","nullable":true}},"nullable":true}],
	["times", {"type":"list","item":{"type":"timestamp"},"nullable":true}],
	["vecs", {"type":"list","item":{"type":"vector","dim":2},"nullable":true}],
	["ünïcode name", {"type":"float64","nullable":true}]
]}`

func mustSpec(t testing.TB, text string) *Spec {
	t.Helper()
	s, err := ParseSpec([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSpecSchemaTypes(t *testing.T) {
	s := mustSpec(t, everyTypeSpec).Schema()
	want := map[string]string{
		"id":           "utf8",
		"name":         "utf8",
		"body":         "large_utf8",
		"n32":          "int32",
		"n64":          "int64",
		"f32":          "float32",
		"f64":          "float64",
		"ok":           "bool",
		"at":           "timestamp[us, tz=UTC]",
		"blob":         "binary",
		"emb":          "fixed_size_list<item: float32>[3]",
		"tags":         "list<item: utf8>",
		"grid":         "list<item: list<item: int64, nullable>>",
		"times":        "list<item: timestamp[us, tz=UTC]>",
		"vecs":         "list<item: fixed_size_list<item: float32>[2]>",
		"ünïcode name": "float64",
	}
	if s.NumFields() != len(want) {
		t.Fatalf("%d fields", s.NumFields())
	}
	for _, f := range s.Fields() {
		if got := f.Type.String(); got != want[f.Name] {
			t.Errorf("%s: %s, want %s", f.Name, got, want[f.Name])
		}
		if wantNull := f.Name != "id" && f.Name != "n64"; f.Nullable != wantNull {
			t.Errorf("%s: nullable=%v", f.Name, f.Nullable)
		}
	}
}

func TestSpecCanonicalJSONAndEqual(t *testing.T) {
	a := mustSpec(t, `{"columns":[["id",{"type":"string"}],["v",{"nullable":true,"dim":3,"type":"vector"}],["s",{"type":"string","large":false,"nullable":false}]]}`)
	b := mustSpec(t, "{ \"columns\" : [ [\"id\", {\"type\":\"string\",\"nullable\":false}], [\"v\", {\"type\":\"vector\",\"dim\":3,\"nullable\":true}],\n[\"s\",{\"type\":\"string\"}] ] }")
	want := `{"columns":[["id",{"type":"string","nullable":false}],["v",{"type":"vector","dim":3,"nullable":true}],["s",{"type":"string","nullable":false}]]}`
	got, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("canonical form\n got %s\nwant %s", got, want)
	}
	if !a.Equal(b) || !b.Equal(a) {
		t.Fatal("differently spelled specs are not Equal")
	}
	if !a.Schema().Equal(b.Schema()) {
		t.Fatal("equal specs, different schemas")
	}
	for _, other := range []string{
		`{"columns":[["id",{"type":"string"}],["v",{"type":"vector","dim":4,"nullable":true}],["s",{"type":"string"}]]}`,
		`{"columns":[["id",{"type":"string"}],["v",{"type":"vector","dim":3}],["s",{"type":"string"}]]}`,
		`{"columns":[["id",{"type":"string"}],["s",{"type":"string"}],["v",{"type":"vector","dim":3,"nullable":true}]]}`,
		`{"columns":[["id",{"type":"string"}],["v",{"type":"vector","dim":3,"nullable":true}],["s",{"type":"string","large":true}]]}`,
	} {
		if a.Equal(mustSpec(t, other)) {
			t.Errorf("%s is Equal to %s", other, a)
		}
	}
	// A spec embedded in a registry object survives a JSON round trip.
	type registryObject struct {
		Name   string `json:"name"`
		Schema *Spec  `json:"schema"`
	}
	data, err := json.Marshal(registryObject{"s", mustSpec(t, everyTypeSpec)})
	if err != nil {
		t.Fatal(err)
	}
	var back registryObject
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !back.Schema.Equal(mustSpec(t, everyTypeSpec)) {
		t.Fatalf("registry round trip changed the spec: %s", back.Schema)
	}
}

func TestSpecValidation(t *testing.T) {
	cols := func(extra ...string) string {
		return `{"columns":[["id",{"type":"string"}]` + strings.Join(append([]string{""}, extra...), ",") + `]}`
	}
	many := make([]string, MaxColumns) // with id: MaxColumns+1
	for i := range many {
		many[i] = fmt.Sprintf(`["c%d",{"type":"int32"}]`, i)
	}
	for _, tc := range []struct {
		name, spec, column, reason string
	}{
		{"not json", `{"columns":`, "", "not valid JSON"},
		{"not an object", `[]`, "", "must be an object"},
		{"unknown top-level key", `{"columns":[["id",{"type":"string"}]],"seal_on_add":true}`, "", `unknown key "seal_on_add"`},
		{"no columns", `{}`, "", `needs "columns"`},
		{"columns twice", `{"columns":[["id",{"type":"string"}]],"columns":[]}`, "", "given twice"},
		{"empty columns", `{"columns":[]}`, "id", "required"},
		{"missing id", `{"columns":[["score",{"type":"float64"}]]}`, "id", "required"},
		{"metric outside a request", cols(`["a",{"type":"vector","dim":2,"metric":null}]`), "a", `unknown option "metric"`},
		{"blob not a boolean", cols(`["a",{"type":"binary","blob":1}]`), "a", "expected a boolean"},
		{"id nullable", `{"columns":[["id",{"type":"string","nullable":true}]]}`, "id", "non-null"},
		{"id large", `{"columns":[["id",{"type":"string","large":true}]]}`, "id", "not large"},
		{"id int", `{"columns":[["id",{"type":"int64"}]]}`, "id", `{"type":"string"}`},
		{"reserved name", cols(`["_seq",{"type":"int64"}]`), "_seq", "reserved"},
		{"reserved any _name", cols(`["_x",{"type":"int64"}]`), "_x", "reserved"},
		{"duplicate", cols(`["a",{"type":"int64"}]`, `["a",{"type":"string"}]`), "a", "twice"},
		{"duplicate id", cols(`["id",{"type":"string"}]`), "id", "twice"},
		{"1025 columns", cols(many...), "", "more than 1024 columns"},
		{"empty name", cols(`["",{"type":"int64"}]`), "", "columns[1]: column name is empty"},
		{"control char", cols(`["a\u0007b",{"type":"int64"}]`), "a\ab", "control character"},
		{"newline", cols(`["a\nb",{"type":"int64"}]`), "a\nb", "control character"},
		{"long name", cols(`["` + strings.Repeat("x", 257) + `",{"type":"int64"}]`), strings.Repeat("x", 257), "longer than 256"},
		{"name not string", cols(`[5,{"type":"int64"}]`), "", "name must be a string"},
		{"not a pair", cols(`["a"]`), "", "[name, type] pair"},
		{"type not object", cols(`["a","int64"]`), "a", "type object"},
		{"unknown type", cols(`["a",{"type":"uuid"}]`), "a", `unknown type "uuid"`},
		{"missing type", cols(`["a",{"nullable":true}]`), "a", `missing "type"`},
		{"type not string", cols(`["a",{"type":5}]`), "a", "expected a string"},
		{"unknown option", cols(`["a",{"type":"int64","default":0}]`), "a", `unknown option "default"`},
		{"nullable not bool", cols(`["a",{"type":"int64","nullable":"yes"}]`), "a", "boolean"},
		{"large on int", cols(`["a",{"type":"int64","large":true}]`), "a", `"large" applies only`},
		{"dim on list", cols(`["a",{"type":"list","item":{"type":"int32"},"dim":3}]`), "a", `"dim" applies only`},
		{"vector without dim", cols(`["a",{"type":"vector"}]`), "a", `needs "dim"`},
		{"vector dim 0", cols(`["a",{"type":"vector","dim":0}]`), "a", "from 1 to"},
		{"vector dim negative", cols(`["a",{"type":"vector","dim":-3}]`), "a", "from 1 to"},
		{"vector dim fraction", cols(`["a",{"type":"vector","dim":1.5}]`), "a", "from 1 to"},
		{"vector dim huge", cols(`["a",{"type":"vector","dim":99999999999999999999}]`), "a", "from 1 to"},
		{"list without item", cols(`["a",{"type":"list"}]`), "a", `needs "item"`},
		{"list item unknown", cols(`["a",{"type":"list","item":{"type":"list","item":{"type":"date"}}}]`), "a", `.item.item: unknown type "date"`},
		{"list nested too deep", cols(`["a",` + strings.Repeat(`{"type":"list","item":`, 9) + `{"type":"int32"}` + strings.Repeat(`}`, 9) + `]`), "a", "deeper"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSpec([]byte(tc.spec))
			checkInputError(t, err, -1, tc.column, tc.reason)
		})
	}
}

func TestSpecAtTheLimitsIsAccepted(t *testing.T) {
	cols := []string{`["id",{"type":"string"}]`}
	for i := 1; i < MaxColumns; i++ {
		cols = append(cols, fmt.Sprintf(`["c%d",{"type":"int32","nullable":true}]`, i))
	}
	cols = append(cols[:2], `["`+strings.Repeat("é", 128)+`",{"type":"vector","dim":65536,"nullable":true}]`)
	cols = append(cols, fmt.Sprintf(`["deep",%s{"type":"int32"}%s]`, strings.Repeat(`{"type":"list","item":`, 8), strings.Repeat(`}`, 8)))
	for i := len(cols); i < MaxColumns; i++ {
		cols = append(cols, fmt.Sprintf(`["d%d",{"type":"bool","nullable":true}]`, i))
	}
	s := mustSpec(t, `{"columns":[`+strings.Join(cols, ",")+`]}`)
	if s.Schema().NumFields() != MaxColumns {
		t.Fatalf("%d columns", s.Schema().NumFields())
	}
}

func TestNewSpecValidatesLikeParseSpec(t *testing.T) {
	_, err := NewSpec([]Column{{Name: "id", Type: Type{Kind: KindString}}, {Name: "v", Type: Type{Kind: KindVector}}})
	checkInputError(t, err, -1, "v", `needs "dim"`)
	_, err = NewSpec([]Column{{Name: "id", Type: Type{Kind: KindString}}, {Name: "l", Type: Type{Kind: KindList, Item: &Type{Kind: "nope"}}}})
	checkInputError(t, err, -1, "l", `unknown type "nope"`)
	cols := []Column{{Name: "id", Type: Type{Kind: KindString}}, {Name: "l", Type: Type{Kind: KindList, Item: &Type{Kind: KindInt32}}}}
	s, err := NewSpec(cols)
	if err != nil {
		t.Fatal(err)
	}
	cols[1].Type.Item.Kind = KindBool // the spec keeps its own copy
	if got := s.Schema().Field(1).Type; !arrow.TypeEqual(got, arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32)) {
		t.Fatalf("list type %s", got)
	}
	if s.Columns()[1].Type.Item.Kind != KindInt32 {
		t.Fatal("NewSpec aliases the caller's columns")
	}
}

func TestSpecErrorsAreInvalid(t *testing.T) {
	var s Spec
	err := json.Unmarshal([]byte(`{"columns":[["id",{"type":"string"}],["x",{"type":"nope"}]]}`), &s)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("UnmarshalJSON error %v is not ErrInvalid", err)
	}
}

// The id may be declared anywhere, as in the reference: the canonical form keeps
// the declared order, the Arrow schema (what the table and the codecs key rows
// by) leads with the id.
func TestSpecIDAnywhere(t *testing.T) {
	s := mustSpec(t, `{"columns":[["score",{"type":"float32","nullable":true}],["id",{"type":"string"}],["tags",{"type":"list","item":{"type":"string"}}]]}`)
	var names []string
	for _, f := range s.Schema().Fields() {
		names = append(names, f.Name)
	}
	if strings.Join(names, ",") != "id,score,tags" {
		t.Errorf("arrow schema columns %v, want id first", names)
	}
	want := `{"columns":[["score",{"type":"float32","nullable":true}],["id",{"type":"string","nullable":false}],["tags",{"type":"list","item":{"type":"string","nullable":false},"nullable":false}]]}`
	if got := s.String(); got != want {
		t.Errorf("canonical form\n got %s\nwant %s", got, want)
	}
	again := mustSpec(t, s.String())
	if !again.Equal(s) {
		t.Error("the canonical form does not parse back to an equal spec")
	}
	if cols := s.Columns(); cols[0].Name != "score" || cols[1].Name != "id" {
		t.Errorf("Columns() = %v, want the declared order", cols)
	}
	rec, err := s.Codec().Decode([]json.RawMessage{[]byte(`{"score":1.5,"id":"a","tags":["x"]}`)})
	if err != nil {
		t.Fatal(err)
	}
	rec.Release()
}

// A create request reads specs as the reference does: no "nullable" means
// nullable, except for the id; the reference client's default spelling of its
// metric option is accepted, other values refused.
func TestParseRequestSpec(t *testing.T) {
	s, err := ParseRequestSpec([]byte(`{"columns":[["n",{"type":"int64"}],["id",{"type":"string"}],` +
		`["l",{"type":"list","item":{"type":"int32"}}],["r",{"type":"int64","nullable":false}],` +
		`["b",{"type":"binary","blob":false,"nullable":true}],["v",{"type":"vector","dim":2,"metric":null,"nullable":true}],` +
		`["s",{"type":"string","large":false,"nullable":true}]]}`))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]arrow.Field{}
	for _, f := range s.Schema().Fields() {
		fields[f.Name] = f
	}
	for name, want := range map[string]bool{"id": false, "n": true, "l": true, "r": false, "b": true, "v": true, "s": true} {
		if fields[name].Nullable != want {
			t.Errorf("%s: nullable=%v, want %v", name, fields[name].Nullable, want)
		}
	}
	if item := fields["l"].Type.(*arrow.ListType).ElemField(); !item.Nullable {
		t.Error("a list item without nullable is not nullable in a request")
	}
	// Its canonical form reads the same through the registry's parser.
	if back := mustSpec(t, s.String()); !back.Equal(s) || !back.Schema().Equal(s.Schema()) {
		t.Errorf("canonical %s reads back differently", s)
	}
	for _, tc := range []struct{ spec, column, reason string }{
		{`{"columns":[["id",{"type":"string","nullable":true}]]}`, "id", "non-null"},
		{`{"columns":[["id",{"type":"string"}],["v",{"type":"vector","dim":2,"metric":"cosine"}]]}`, "v", "only null"},
		{`{"columns":[["id",{"type":"string"}],["x",{"type":"int64","blob":false}]]}`, "x", `"blob" applies only`},
	} {
		_, err := ParseRequestSpec([]byte(tc.spec))
		checkInputError(t, err, -1, tc.column, tc.reason)
	}
}

// A binary column declared "blob": true is one a list leaves out; the option
// survives the registry's canonical JSON, and a spec without it is spelled as
// before (registry objects written earlier compare Equal).
func TestSpecBlobColumns(t *testing.T) {
	s, err := ParseRequestSpec([]byte(`{"columns":[["id",{"type":"string"}],["img",{"type":"binary","blob":true}],` +
		`["raw",{"type":"binary","blob":false}],["thumb",{"type":"binary"}],["big",{"type":"binary","blob":true,"nullable":false}]]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.BlobColumns(); !slices.Equal(got, []string{"img", "big"}) {
		t.Errorf("BlobColumns %v, want [img big]", got)
	}
	want := `{"columns":[["id",{"type":"string","nullable":false}],["img",{"type":"binary","blob":true,"nullable":true}],` +
		`["raw",{"type":"binary","nullable":true}],["thumb",{"type":"binary","nullable":true}],["big",{"type":"binary","blob":true,"nullable":false}]]}`
	if s.String() != want {
		t.Errorf("canonical\n%s\nwant\n%s", s, want)
	}
	if back := mustSpec(t, s.String()); !back.Equal(s) || !slices.Equal(back.BlobColumns(), s.BlobColumns()) {
		t.Errorf("canonical %s reads back differently", s)
	}
	if _, err := NewSpec([]Column{{Name: "id", Type: Type{Kind: KindString}}, {Name: "n", Type: Type{Kind: KindInt64, Blob: true}}}); err == nil {
		t.Error("NewSpec accepted blob on an int64 column")
	}
}
