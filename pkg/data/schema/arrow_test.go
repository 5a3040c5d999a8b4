package schema

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// arrowInput builds a batch of the named columns, each given as its type and
// its values in arrow-go's JSON form (array.FromJSON).
func arrowInput(t *testing.T, cols ...any) arrow.RecordBatch {
	t.Helper()
	var fields []arrow.Field
	var arrs []arrow.Array
	for i := 0; i < len(cols); i += 3 {
		typ := cols[i+1].(arrow.DataType)
		a, _, err := array.FromJSON(memory.DefaultAllocator, typ, strings.NewReader(cols[i+2].(string)))
		if err != nil {
			t.Fatalf("column %s: %v", cols[i], err)
		}
		defer a.Release()
		fields = append(fields, arrow.Field{Name: cols[i].(string), Type: typ, Nullable: true})
		arrs = append(arrs, a)
	}
	rec := array.NewRecordBatch(arrow.NewSchema(fields, nil), arrs, int64(arrs[0].Len()))
	t.Cleanup(rec.Release)
	return rec
}

// A batch the JSON codec built is read back unchanged, whole or cut into
// slices (arrays with offsets, nested ones included) that are concatenated.
func TestDecodeArrowOfADecodedBatchIsTheSameBatch(t *testing.T) {
	s := mustSpec(t, everyTypeSpec)
	rec := decodeRows(t, s, fullGenericRow, nullGenericRow, `{"id":"row-3","n64":5,"tags":["x"],"grid":[[2]]}`)
	whole, err := s.Codec().DecodeArrow(memory.DefaultAllocator, rec.Schema(), []arrow.RecordBatch{rec})
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Release()
	if !array.RecordEqual(whole, rec) || !whole.Schema().Equal(rec.Schema()) {
		t.Fatalf("DecodeArrow changed the batch:\n got %v\nwant %v", encodeAll(t, whole), encodeAll(t, rec))
	}
	parts := []arrow.RecordBatch{rec.NewSlice(0, 1), rec.NewSlice(1, 3)}
	defer parts[0].Release()
	defer parts[1].Release()
	joined, err := s.Codec().DecodeArrow(memory.DefaultAllocator, rec.Schema(), parts)
	if err != nil {
		t.Fatal(err)
	}
	defer joined.Release()
	if got, want := encodeAll(t, joined), encodeAll(t, rec); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("slices joined:\n got %v\nwant %v", got, want)
	}
}

func TestDecodeArrowConversionsAndRefusals(t *testing.T) {
	str, i64, f64 := arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Float64
	spec := mustSpec(t, `{"columns":[["id",{"type":"string"}],["n",{"type":"int32","nullable":true}],`+
		`["x",{"type":"float32","nullable":true}],["at",{"type":"timestamp","nullable":true}],`+
		`["v",{"type":"vector","dim":2,"nullable":true}],["l",{"type":"list","item":{"type":"int32"},"nullable":true}]]}`)
	for _, c := range []struct {
		name string
		cols []any
		want string // the rows as JSON, or the error
	}{
		{"ints that fit", []any{"id", str, `["a","b"]`, "n", i64, `[2147483647,null]`},
			`{"id":"a","n":2147483647,"x":null,"at":null,"v":null,"l":null}|{"id":"b","n":null,"x":null,"at":null,"v":null,"l":null}`},
		{"an int that does not", []any{"id", str, `["a","b"]`, "n", i64, `[1,2147483648]`}, `column "n": type int64: a value does not fit the store's int32`},
		{"doubles as floats", []any{"id", str, `["a"]`, "x", f64, `[0.1]`}, `{"id":"a","n":null,"x":0.1,"at":null,"v":null,"l":null}`},
		{"a double past float32", []any{"id", str, `["a","b"]`, "x", f64, `[1,1e39]`}, `row 1, column "x": number 1e+39 is out of range for float32`},
		{"a double that would be 0", []any{"id", str, `["a"]`, "x", f64, `[1e-50]`}, `row 0, column "x": number 1e-50 is too small for float32`},
		{"seconds", []any{"id", str, `["a"]`, "at", &arrow.TimestampType{Unit: arrow.Second, TimeZone: "Asia/Tokyo"}, `[1]`},
			`{"id":"a","n":null,"x":null,"at":"1970-01-01T00:00:01.000000Z","v":null,"l":null}`},
		{"seconds past the microseconds' range", []any{"id", str, `["a"]`, "at", &arrow.TimestampType{Unit: arrow.Second}, `[9223372036854775]`},
			`row 0, column "at": timestamp 9223372036854775 s is outside years 0001-9999`},
		{"beyond year 9999", []any{"id", str, `["a"]`, "at", &arrow.TimestampType{Unit: arrow.Millisecond}, `[253402300800000]`},
			`row 0, column "at": timestamp 253402300800000000 µs is outside years 0001-9999`},
		{"a vector of doubles", []any{"id", str, `["a"]`, "v", arrow.FixedSizeListOf(2, f64), `[[0.5,-1]]`},
			`{"id":"a","n":null,"x":null,"at":null,"v":[0.5,-1],"l":null}`},
		{"a vector of another size", []any{"id", str, `["a"]`, "v", arrow.FixedSizeListOf(3, f64), `[[0.5,-1,1]]`},
			`column "v": type fixed_size_list<item: float64, nullable>[3] does not match the store's fixed_size_list<item: float32>[2]`},
		{"a null in a vector", []any{"id", str, `["a","b"]`, "v", arrow.FixedSizeListOf(2, f64), `[[1,2],[1,null]]`},
			`row 1, column "v" at [1]: null is not allowed`},
		{"a large list of int64", []any{"id", str, `["a","b"]`, "l", arrow.LargeListOf(i64), `[[1,2],null]`},
			`{"id":"a","n":null,"x":null,"at":null,"v":null,"l":[1,2]}|{"id":"b","n":null,"x":null,"at":null,"v":null,"l":null}`},
		{"a null in a list", []any{"id", str, `["a","b","c"]`, "l", arrow.ListOf(i64), `[[1],null,[3,4,null]]`},
			`row 2, column "l" at [2]: null is not allowed`},
		{"a NaN in a vector", []any{"id", str, `["a","b"]`, "v", arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Float32), `[[1,2],[3,"NaN"]]`},
			`row 1, column "v" at [1]: NaN is not a number JSON can hold`},
		{"a dictionary of ints", []any{"id", str, `["a"]`, "n", &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: i64}, `[7]`},
			`{"id":"a","n":7,"x":null,"at":null,"v":null,"l":null}`},
		{"a bool for an int", []any{"id", str, `["a"]`, "n", arrow.FixedWidthTypes.Boolean, `[true]`},
			`column "n": type bool does not match the store's int32`},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := arrowInput(t, c.cols...)
			rec, err := spec.Codec().DecodeArrow(memory.DefaultAllocator, in.Schema(), []arrow.RecordBatch{in})
			if err != nil {
				if !strings.Contains(err.Error(), c.want) {
					t.Fatalf("error %q, want %q", err, c.want)
				}
				return
			}
			defer rec.Release()
			if got := strings.Join(encodeAll(t, rec), "|"); got != c.want {
				t.Fatalf("rows %s, want %s", got, c.want)
			}
		})
	}
}

// Struct fields are matched by name; a required field may be null only where
// its struct is (a null relationship says nothing), and defaults apply.
func TestDecodeRolloutsArrowRelationshipsAndDefaults(t *testing.T) {
	str := arrow.BinaryTypes.String
	rel := func(fields ...arrow.Field) arrow.DataType { return arrow.ListOf(arrow.StructOf(fields...)) }
	f := func(name string, typ arrow.DataType) arrow.Field {
		return arrow.Field{Name: name, Type: typ, Nullable: true}
	}
	now := time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.UTC)
	full := rel(f("weight", arrow.PrimitiveTypes.Float64), f("relation", str), f("target_id", str))
	for _, c := range []struct {
		name string
		cols []any
		want string
	}{
		{"fields in another order, a null element", []any{"id", str, `["a"]`, "relationships", full,
			`[[{"relation":"r","target_id":"t","weight":0.5},null]]`}, `"relationships":[{"target_id":"t","relation":"r","weight":0.5},null]`},
		{"a nullable field left out", []any{"id", str, `["a"]`, "relationships", rel(f("target_id", str), f("relation", str)),
			`[[{"relation":"r","target_id":"t"}]]`}, `"relationships":[{"target_id":"t","relation":"r","weight":null}]`},
		{"a required field left out", []any{"id", str, `["a"]`, "relationships", rel(f("target_id", str)),
			`[[{"target_id":"t"}]]`}, `column "relationships" at [].relation: required field is missing`},
		{"a field the struct lacks", []any{"id", str, `["a"]`, "relationships", rel(f("target_id", str), f("relation", str), f("x", str)),
			`[[{"target_id":"t","relation":"r","x":"y"}]]`}, `column "relationships" at [].x: not a field of this struct`},
		{"a required field null", []any{"id", str, `["a","b"]`, "relationships", full,
			`[null,[{"relation":"r","target_id":"t"},{"relation":"r","target_id":null}]]`}, `row 1, column "relationships" at [1].target_id: null is not allowed`},
		{"defaults", []any{"id", str, `["a"]`, "rollout_id", str, `["ro"]`, "role", str, `[null]`},
			`"id":"a","rollout_id":"ro","problem_id":"ro","dataset":null,"sequence_order":0,"role":"assistant","created_at":"2024-05-01T12:00:00.123456Z"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := arrowInput(t, c.cols...)
			rec, err := DecodeRolloutsArrow(memory.DefaultAllocator, in.Schema(), []arrow.RecordBatch{in}, now)
			if err != nil {
				if !strings.Contains(err.Error(), c.want) {
					t.Fatalf("error %q, want %q", err, c.want)
				}
				return
			}
			defer rec.Release()
			if got := strings.Join(encodeAll(t, rec), "|"); !strings.Contains(got, c.want) {
				t.Fatalf("rows %s, want %s in them", got, c.want)
			}
		})
	}
}
