package rowfilter

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.BinaryTypes.String},
	{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "big", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "m", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "score", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "x", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "ok", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	{Name: "blob", Type: arrow.BinaryTypes.Binary, Nullable: true},
	{Name: "vec", Type: arrow.FixedSizeListOfNonNullable(2, arrow.PrimitiveTypes.Float32), Nullable: true},
	{Name: "CamelCase", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
}, nil)

// testRow is one row of testBatch; a nil pointer is a null.
type testRow struct {
	id    string
	name  *string
	n     *int64
	m     *int32
	score *float32
	x     *float64
	ok    *bool
	ts    *int64
}

func ptr[T any](v T) *T { return &v }

// Rows: r0 is all nulls; the others have values.
var testRows = []testRow{
	{id: "r0"},
	{id: "r1", name: ptr("alice"), n: ptr[int64](1), m: ptr[int32](10), score: ptr[float32](0.1), x: ptr(1.5), ok: ptr(true), ts: ptr[int64](1714564800000000)},      // 2024-05-01T12:00:00Z
	{id: "r2", name: ptr("bob"), n: ptr[int64](2), m: ptr[int32](20), score: ptr[float32](0.5), x: ptr(2.5), ok: ptr(false), ts: ptr[int64](1714651200000000)},       // 2024-05-02T12:00:00Z
	{id: "r3", name: ptr("a_b%c\\d"), n: ptr[int64](3), m: ptr[int32](30), score: ptr[float32](1), x: ptr(-1.0), ok: ptr(true), ts: ptr[int64](0)},                   // the epoch
	{id: "r4", name: ptr("ÅNGSTRÖM"), n: ptr[int64](9007199254740993), m: ptr[int32](-5), score: ptr[float32](2), x: ptr(1e300), ok: ptr(false), ts: ptr[int64](-1)}, // 2^53+1
}

func testBatch(t testing.TB, rows []testRow) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, testSchema)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.StringBuilder).Append(r.id)
		if r.name != nil {
			b.Field(1).(*array.StringBuilder).Append(*r.name)
			b.Field(2).(*array.LargeStringBuilder).Append(strings.ToUpper(*r.name))
		} else {
			b.Field(1).AppendNull()
			b.Field(2).AppendNull()
		}
		appendOr(b.Field(3), r.n, func(v int64) { b.Field(3).(*array.Int64Builder).Append(v) })
		appendOr(b.Field(4), r.m, func(v int32) { b.Field(4).(*array.Int32Builder).Append(v) })
		appendOr(b.Field(5), r.score, func(v float32) { b.Field(5).(*array.Float32Builder).Append(v) })
		appendOr(b.Field(6), r.x, func(v float64) { b.Field(6).(*array.Float64Builder).Append(v) })
		appendOr(b.Field(7), r.ok, func(v bool) { b.Field(7).(*array.BooleanBuilder).Append(v) })
		appendOr(b.Field(8), r.ts, func(v int64) { b.Field(8).(*array.TimestampBuilder).Append(arrow.Timestamp(v)) })
		if r.name != nil {
			b.Field(9).(*array.BinaryBuilder).Append([]byte(*r.name))
			lb := b.Field(10).(*array.FixedSizeListBuilder)
			lb.Append(true)
			lb.ValueBuilder().(*array.Float32Builder).AppendValues([]float32{1, 2}, nil)
		} else {
			b.Field(9).AppendNull()
			b.Field(10).AppendNull()
		}
		appendOr(b.Field(11), r.n, func(v int64) { b.Field(11).(*array.Int64Builder).Append(v) })
	}
	return b.NewRecordBatch()
}

func appendOr[T any](b array.Builder, v *T, app func(T)) {
	if v == nil {
		b.AppendNull()
		return
	}
	app(*v)
}

// matching returns the ids of the rows of testRows that predicate keeps.
func matching(t *testing.T, predicate string) []string {
	t.Helper()
	f, err := Compile(predicate, testSchema)
	if err != nil {
		t.Fatalf("Compile(%q): %v", predicate, err)
	}
	rec := testBatch(t, testRows)
	defer rec.Release()
	mask, err := f.Mask(rec)
	if err != nil {
		t.Fatalf("Mask(%q): %v", predicate, err)
	}
	ids := []string{}
	for i, keep := range mask {
		if keep {
			ids = append(ids, testRows[i].id)
		}
	}
	return ids
}

func ids(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, " ")
}

func TestEvaluate(t *testing.T) {
	for _, tc := range []struct{ predicate, want string }{
		// Comparisons, each class.
		{"n = 2", "r2"},
		{"n != 2", "r1 r3 r4"}, // NULL != 2 is UNKNOWN: r0 is left out
		{"n <> 2", "r1 r3 r4"},
		{"n < 3", "r1 r2"},
		{"n <= 3", "r1 r2 r3"},
		{"n > 2", "r3 r4"},
		{"n >= 9007199254740993", "r4"}, // exact int64, not float64
		{"n = 9007199254740992", ""},
		{"2 < n", "r3 r4"}, // constant on the left
		{"m >= -5 AND m < 11", "r1 r4"},
		{"n < 2.5", "r1 r2"}, // integer column, float constant
		{"n = 1.0", "r1"},
		{"x > 2", "r2 r4"}, // float column, integer constant
		{"x = -1", "r3"},
		{"score = 0.1", "r1"}, // float32 compared at float32 precision
		{"score > 0.1", "r2 r3 r4"},
		{"score = 1", "r3"},
		{"score < x", "r1 r2 r4"}, // two columns
		{"n = m", ""},
		{"name = 'bob'", "r2"},
		{"name > 'b'", "r2 r4"}, // byte order: 'Å' sorts after ASCII
		{"name < 'b'", "r1 r3"},
		{"big = 'BOB'", "r2"},
		{"ok = TRUE", "r1 r3"},
		{"ok = false", "r2 r4"},
		{"ok", "r1 r3"},
		{"NOT ok", "r2 r4"},
		{"ts = '2024-05-01T12:00:00Z'", "r1"},
		{"ts >= '2024-05-01 12:00:00'", "r1 r2"},
		{"ts < '2024-05-02'", "r1 r3 r4"},
		{"ts = timestamp '2024-05-02 12:00:00'", "r2"},
		{"ts >= date '2024-05-02'", "r2"},
		{"ts = 0", "r3"}, // integer microseconds
		{"ts < 0", "r4"},
		{"ts = '2024-05-01T14:00:00+02:00'", "r1"},
		{"CamelCase = 3", "r3"},
		{"camelcase = 3", "r3"}, // case-insensitive fallback
		{"`CamelCase` = 3", "r3"},
		{"n = -9223372036854775808", ""},
		{"n = 0x3", "r3"},
		{"n <=> NULL", "r0"}, // null-safe equality
		{"n <=> 2", "r2"},
		// Three-valued logic.
		{"n = NULL", ""},
		{"NOT (n = NULL)", ""},
		{"n = NULL OR n = 1", "r1"},                 // UNKNOWN OR TRUE is TRUE
		{"n = NULL AND n = 1", ""},                  // UNKNOWN AND TRUE is UNKNOWN
		{"NOT (n = NULL AND n = 1)", "r2 r3 r4"},    // NOT UNKNOWN is UNKNOWN (r1), NOT FALSE TRUE
		{"NOT (n = NULL AND n = 5)", "r1 r2 r3 r4"}, // UNKNOWN AND FALSE is FALSE
		{"n > 1 OR name = 'alice'", "r1 r2 r3 r4"},
		{"NOT (n > 1)", "r1"}, // r0: NOT UNKNOWN
		{"(n > 1) IS NOT TRUE", "r0 r1"},
		{"(n > 1) IS FALSE", "r1"},
		{"(n > 1) IS NOT FALSE", "r0 r2 r3 r4"},
		{"(n > 1) IS TRUE", "r2 r3 r4"},
		{"ok IS TRUE", "r1 r3"},
		{"ok IS NOT TRUE", "r0 r2 r4"},
		{"(n > 1) IS NULL", "r0"}, // UNKNOWN is the null of a predicate
		{"ok XOR n > 2", "r1 r4"},
		{"TRUE", "r0 r1 r2 r3 r4"},
		{"FALSE", ""},
		{"NULL", ""},
		{"1 = 1 AND n = 1", "r1"},
		{"!ok", "r2 r4"},
		// IS NULL on any type.
		{"name IS NULL", "r0"},
		{"name IS NOT NULL", "r1 r2 r3 r4"},
		{"vec IS NULL", "r0"},
		{"blob IS NOT NULL", "r1 r2 r3 r4"},
		{"NULL IS NULL", "r0 r1 r2 r3 r4"},
		{"1 IS NULL", ""},
		// IN, with NULL.
		{"n IN (1, 3)", "r1 r3"},
		{"n IN (1, NULL)", "r1"},     // 2 IN (1, NULL) is UNKNOWN
		{"n NOT IN (1, 3)", "r2 r4"}, // r0: UNKNOWN
		{"n NOT IN (1, NULL)", ""},   // never TRUE: UNKNOWN or FALSE
		{"NOT (n IN (1, NULL))", ""}, // same
		{"(n IN (1, NULL)) IS NULL", "r0 r2 r3 r4"},
		{"n IN (1.0, 2.5, 3)", "r1 r3"}, // an integer column against floats
		{"name IN ('alice', 'bob')", "r1 r2"},
		{"score IN (0.1, 2)", "r1 r4"},
		{"ts IN ('2024-05-01T12:00:00Z', 0)", "r1 r3"},
		{"ok IN (true)", "r1 r3"},
		{"name IN (NULL)", ""},
		// BETWEEN.
		{"n BETWEEN 2 AND 3", "r2 r3"},
		{"n NOT BETWEEN 2 AND 3", "r1 r4"},
		{"n BETWEEN NULL AND 3", ""},             // UNKNOWN (or FALSE)
		{"n NOT BETWEEN NULL AND 1", "r2 r3 r4"}, // n > 1: FALSE AND UNKNOWN is FALSE
		{"name BETWEEN 'a' AND 'b'", "r1 r3"},
		// LIKE.
		{"name LIKE 'a%'", "r1 r3"},
		{"name LIKE '%b'", "r2"},
		{"name LIKE '%o%'", "r2"},
		{"name LIKE 'b_b'", "r2"},
		{"name LIKE '___'", "r2"},
		{"name LIKE 'ÅNGSTR_M'", "r4"},   // _ is one character, not one byte
		{"name LIKE '%'", "r1 r2 r3 r4"}, // not r0: NULL LIKE is UNKNOWN
		{"name NOT LIKE 'a%'", "r2 r4"},
		{"name LIKE 'ALICE'", ""},        // case-sensitive
		{"name LIKE 'a\\_b%'", "r3"},     // the escape makes _ literal
		{"name LIKE 'a_b\\%c%'", "r3"},   // ... and %
		{"name LIKE '%\\\\\\\\d'", "r3"}, // '\\\\' is \\ after the lexer: a literal backslash
		{"name LIKE 'a!_b!%c%' ESCAPE '!'", "r3"},
		{"name LIKE 'a_b%' ESCAPE ''", "r3"},
		{"name LIKE 'alic_'", "r1"},
		{"name LIKE '%l%c%'", "r1"},
		{"name LIKE '_%_%_'", "r1 r2 r3 r4"},
		{"name LIKE NULL", ""},
		{"big LIKE 'A%'", "r1 r3"},
		// Dialect.
		{"n = 1 -- a comment", "r1"},
		{"n = 1 /* a comment */ OR n = 2", "r1 r2"},
		{"(((n = 1)))", "r1"},
	} {
		t.Run(tc.predicate, func(t *testing.T) {
			if got := matching(t, tc.predicate); !slices.Equal(got, ids(tc.want)) {
				t.Errorf("%s: got %v, want %v", tc.predicate, got, ids(tc.want))
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		predicate string
		kind      error
		column    string // the column the error names, if any
		contains  string // a part of the message
	}{
		{"", ErrSyntax, "", "empty"},
		{"   ", ErrSyntax, "", "empty"},
		{"n =", ErrSyntax, "", "syntax error at position 4"},
		{"n = 1)", ErrSyntax, "", "position 7"},
		{"(n = 1", ErrSyntax, "", "syntax error"},
		{"nope = 1", ErrUnknownColumn, "nope", `no column "nope"`},
		{"_seq > 1", ErrUnknownColumn, "_seq", `no column "_seq"`},
		{"n = 1 AND missing IS NULL", ErrUnknownColumn, "missing", `"missing"`},
		{"t.n = 1", ErrUnsupported, "n", "qualified"},
		{"name = 5", ErrType, "name", `column "name" has type utf8 and cannot be compared with integer 5`},
		{"5 = name", ErrType, "name", `column "name" has type utf8`},
		{"n = 'five'", ErrType, "n", `column "n" has type int64`},
		{"n = true", ErrType, "n", "bool"},
		{"ok = 1", ErrType, "ok", "bool"},
		{"name = n", ErrType, "name", `column "n" of type int64`},
		{"ts = 'yesterday'", ErrType, "ts", "RFC 3339"},
		{"ts = 1.5", ErrType, "ts", "timestamp"},
		{"vec = 1", ErrType, "vec", "IS [NOT] NULL"},
		{"blob = 'x'", ErrType, "blob", "IS [NOT] NULL"},
		{"blob LIKE 'x'", ErrType, "blob", "LIKE applies to string columns"},
		{"n LIKE '1%'", ErrType, "n", "LIKE applies to string columns"},
		{"name LIKE 5", ErrType, "name", "string constant"},
		{"name LIKE n", ErrType, "name", "string constant"},
		{"name LIKE 'a\\\\'", ErrSyntax, "", "ends with its escape"},
		{"name LIKE 'a' ESCAPE 'xy'", ErrSyntax, "", "one character"},
		{"n", ErrType, "n", "not a predicate"},
		{"1", ErrType, "", "not a predicate"},
		{`"name" = 'bob'`, ErrType, "", "backticks"},
		{"n IN (1, 'x')", ErrType, "n", "cannot be compared"},
		{"n IN (m)", ErrUnsupported, "m", "constants"},
		{"1 IN (n)", ErrUnsupported, "", "column on its left"},
		{"n IN (SELECT 1)", ErrUnsupported, "", "subquery"},
		{"n = (SELECT 1)", ErrUnsupported, "", "subquery"},
		{"EXISTS (SELECT 1)", ErrUnsupported, "", "subquery"},
		{"lower(name) = 'x'", ErrUnsupported, "", "function"},
		{"n + 1 = 2", ErrUnsupported, "", "arithmetic"},
		{"name REGEXP 'a'", ErrUnsupported, "", "unsupported"},
		{"n = ANY (SELECT 1)", ErrUnsupported, "", ""},
		{"n = 1; DROP TABLE t", ErrUnsupported, "", "more than one statement"},
		{"n = 1 ORDER BY n", ErrUnsupported, "", "plain predicate"},
		{"n = 1 LIMIT 1", ErrUnsupported, "", "plain predicate"},
		{"n = 1 GROUP BY n", ErrUnsupported, "", "plain predicate"},
		{"n = 1 UNION SELECT * FROM t", ErrUnsupported, "", "plain predicate"},
		{"n = 1 FOR UPDATE", ErrUnsupported, "", "plain predicate"},
		{"n = 1e999", ErrType, "", "out of range"},
		{strings.Repeat("NOT ", MaxDepth+1) + "ok", ErrTooComplex, "", "deeper"},
		{"name = '" + strings.Repeat("x", MaxBytes) + "'", ErrTooComplex, "", "bytes"},
	} {
		t.Run(tc.predicate[:min(len(tc.predicate), 60)], func(t *testing.T) {
			_, err := Compile(tc.predicate, testSchema)
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("Compile(%q) = %v, want an *Error", tc.predicate, err)
			}
			if !errors.Is(err, ErrInvalid) || !errors.Is(err, tc.kind) {
				t.Errorf("Compile(%q) = %v (kind %v), want kind %v", tc.predicate, err, fe.Kind, tc.kind)
			}
			if fe.Column != tc.column {
				t.Errorf("Compile(%q): column %q, want %q", tc.predicate, fe.Column, tc.column)
			}
			if !strings.Contains(err.Error(), tc.contains) {
				t.Errorf("Compile(%q) = %q, want it to contain %q", tc.predicate, err, tc.contains)
			}
		})
	}
}

func TestColumns(t *testing.T) {
	f, err := Compile("n > 1 AND (camelcase = 2 OR N < 5) AND name LIKE 'x%'", testSchema)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Columns(), []string{"n", "CamelCase", "name"}; !slices.Equal(got, want) {
		t.Errorf("Columns() = %v, want %v", got, want)
	}
	if f.String() != "n > 1 AND (camelcase = 2 OR N < 5) AND name LIKE 'x%'" {
		t.Errorf("String() = %q", f.String())
	}
}

func TestMaskRefusesAMismatchedBatch(t *testing.T) {
	f, err := Compile("n = 1", testSchema)
	if err != nil {
		t.Fatal(err)
	}
	other := arrow.NewSchema([]arrow.Field{{Name: "n", Type: arrow.BinaryTypes.String}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, other)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).Append("1")
	rec := b.NewRecordBatch()
	defer rec.Release()
	if _, err := f.Mask(rec); !errors.Is(err, ErrBatch) {
		t.Errorf("Mask of a batch with n as a string = %v, want ErrBatch", err)
	}
	empty := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}}, nil)
	b2 := array.NewRecordBuilder(memory.DefaultAllocator, empty)
	defer b2.Release()
	rec2 := b2.NewRecordBatch()
	defer rec2.Release()
	if _, err := f.Mask(rec2); !errors.Is(err, ErrBatch) {
		t.Errorf("Mask of a batch without n = %v, want ErrBatch", err)
	}
}

// TestLikeAgainstReference checks the matcher, fast paths included, against a
// plain recursive definition of LIKE over runes.
func TestLikeAgainstReference(t *testing.T) {
	patterns := []string{"", "%", "%%", "_", "a", "a%", "%a", "%a%", "a_c", "%a_c%", "a%c", "%ab%ab%", "_%_", "ä_", "%ä", "a\\%", "\\_%", "ab%b%"}
	subjects := []string{"", "a", "b", "abc", "aXc", "aäc", "ä", "äb", "ab", "abab", "aabab", "a%", "_x", "abbb", "xabcx", "\xff", "a\xffc"}
	for _, p := range patterns {
		m, err := compileLike(p, '\\')
		if err != nil {
			t.Fatalf("compileLike(%q): %v", p, err)
		}
		for _, s := range subjects {
			if got, want := m.match(s), refLike([]rune(p), []rune(s)); got != want {
				t.Errorf("%q LIKE %q = %v, want %v", s, p, got, want)
			}
		}
	}
}

func refLike(p, s []rune) bool {
	if len(p) == 0 {
		return len(s) == 0
	}
	switch p[0] {
	case '%':
		for i := 0; i <= len(s); i++ {
			if refLike(p[1:], s[i:]) {
				return true
			}
		}
		return false
	case '_':
		return len(s) > 0 && refLike(p[1:], s[1:])
	case '\\':
		p = p[1:]
	}
	return len(s) > 0 && s[0] == p[0] && refLike(p[1:], s[1:])
}

func ExampleCompile() {
	f, err := Compile("score >= 0.5 AND name LIKE 'a%'", testSchema)
	fmt.Println(f.Columns(), err)
	_, err = Compile("nope = 1", testSchema)
	fmt.Println(err, errors.Is(err, ErrUnknownColumn))
	// Output:
	// [score name] <nil>
	// filter: no column "nope" in this store's schema true
}
