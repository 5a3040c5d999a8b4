package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
)

// Limits of a generic schema spec.
const (
	MaxColumns       = 1024
	MaxColumnNameLen = 256 // bytes
	MaxVectorDim     = 65536
	// maxItemDepth bounds list nesting ("list of list of ..."), well inside the
	// codecs' own maxNesting.
	maxItemDepth = 8
)

// Kind is the type name of a column in a spec.
type Kind string

// The kinds a spec may use.
const (
	KindString    Kind = "string"
	KindInt32     Kind = "int32"
	KindInt64     Kind = "int64"
	KindFloat32   Kind = "float32"
	KindFloat64   Kind = "float64"
	KindBool      Kind = "bool"
	KindTimestamp Kind = "timestamp"
	KindBinary    Kind = "binary"
	KindVector    Kind = "vector"
	KindList      Kind = "list"
)

// Type is a column's (or a list item's) type in a spec.
type Type struct {
	Kind     Kind
	Nullable bool  // null allowed (see ParseSpec and ParseRequestSpec for the default)
	Large    bool  // KindString only: large_utf8
	Dim      int   // KindVector only: 1..MaxVectorDim
	Item     *Type // KindList only: the element type
	// Blob (KindBinary only) marks a column whose values are large: lists and
	// point reads leave it out unless asked for by name (Spec.BlobColumns). It
	// does not change where the bytes live: inline, in the row, as every column.
	Blob bool
}

// Column is one column of a spec.
type Column struct {
	Name string
	Type Type
}

// Spec is a generic store's schema as the client wrote it, validated: columns in
// the declared order, IDColumn among them as a non-null string. Its Arrow schema
// puts IDColumn first wherever it was declared (every table's key column leads).
// It is immutable after ParseSpec; the registry persists its canonical JSON and a
// later create compares with Equal.
type Spec struct {
	columns []Column
	schema  *arrow.Schema
	codec   *Codec
	json    []byte // canonical form
}

// ParseSpec parses and validates a spec as the registry stores it:
//
//	{"columns": [["id", {"type":"string"}], ["score", {"type":"float64","nullable":true}], ...]}
//
// Each type object has "type" and, depending on it, "nullable" (any type; absent
// means false here), "large" (string), "blob" (binary: a boolean, see Type.Blob),
// "dim" (vector, required, 1..MaxVectorDim) and "item" (list, required, a nested
// type object). "id" is one of the columns,
// anywhere, of type string, non-null and not large; names are 1..MaxColumnNameLen
// bytes of UTF-8 without control characters, unique, and do not start with "_"
// (reserved for hidden columns like _seq); there are at most MaxColumns columns.
// Errors are *Error naming the column and match ErrInvalid.
//
// Canonical JSON (MarshalJSON) spells every "nullable" out, so it reads the same
// through ParseSpec and ParseRequestSpec; registry objects written before that
// leave false out, which is why absent means false here.
func ParseSpec(data []byte) (*Spec, error) { return parseSpec(data, false) }

// ParseRequestSpec parses and validates the spec of a create request, in the
// reference API's terms: a column or list item without "nullable" is nullable,
// except "id", which is never null (declaring it nullable is an error). The
// reference client's spelling of its own default "metric": null on a vector is
// accepted; other metrics are refused until Tidemark has vector search.
// Otherwise it is ParseSpec.
func ParseRequestSpec(data []byte) (*Spec, error) { return parseSpec(data, true) }

func parseSpec(data []byte, request bool) (*Spec, error) {
	if !json.Valid(data) {
		return nil, &Error{Row: -1, Reason: "schema spec is not valid JSON"}
	}
	data = trimSpace(data)
	if data[0] != '{' {
		return nil, &Error{Row: -1, Reason: "schema spec must be an object {\"columns\": [...]}, got " + describe(data)}
	}
	var cols []byte
	err := eachMember(data, func(k string, v []byte) error {
		if k != "columns" {
			return &Error{Row: -1, Reason: fmt.Sprintf("schema spec: unknown key %q (only \"columns\")", k)}
		}
		if cols != nil {
			return &Error{Row: -1, Reason: `schema spec: "columns" given twice`}
		}
		cols = v
		return nil
	})
	if err != nil {
		return nil, locate(err, -1, "")
	}
	if cols == nil || cols[0] != '[' {
		return nil, &Error{Row: -1, Reason: "schema spec needs \"columns\": an array of [name, type] pairs"}
	}
	var columns []Column
	seen := map[string]bool{}
	err = eachElement(cols, func(i int, elem []byte) error {
		if i >= MaxColumns {
			return &Error{Row: -1, Reason: fmt.Sprintf("schema spec has more than %d columns", MaxColumns)}
		}
		c, err := parseColumn(i, elem, request)
		if err != nil {
			return err
		}
		if seen[c.Name] {
			return &Error{Row: -1, Column: c.Name, Reason: "column appears twice"}
		}
		seen[c.Name] = true
		columns = append(columns, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return NewSpec(columns)
}

// NewSpec validates columns (as ParseSpec does) and builds a Spec.
func NewSpec(columns []Column) (*Spec, error) {
	if len(columns) > MaxColumns {
		return nil, &Error{Row: -1, Reason: fmt.Sprintf("schema spec has %d columns, at most %d", len(columns), MaxColumns)}
	}
	id := -1
	for i, c := range columns {
		if c.Name == IDColumn {
			id = i
			break
		}
	}
	if id < 0 {
		return nil, &Error{Row: -1, Column: IDColumn, Reason: "required: it is the primary key"}
	}
	if t := columns[id].Type; t != (Type{Kind: KindString}) {
		return nil, &Error{Row: -1, Column: IDColumn, Reason: `must be {"type":"string"}: non-null and not large`}
	}
	// The Arrow schema leads with id wherever it was declared: the table format
	// and the codecs key every row by the first column.
	fields := make([]arrow.Field, 0, len(columns))
	seen := make(map[string]bool, len(columns))
	for _, i := range append([]int{id}, otherIndexes(len(columns), id)...) {
		c := columns[i]
		if err := CheckColumnName(c.Name); err != nil {
			return nil, &Error{Row: -1, Column: c.Name, Reason: err.Error()}
		}
		if seen[c.Name] {
			return nil, &Error{Row: -1, Column: c.Name, Reason: "column appears twice"}
		}
		seen[c.Name] = true
		at, err := c.Type.arrowType(0)
		if err != nil {
			return nil, locate(err, -1, c.Name)
		}
		fields = append(fields, arrow.Field{Name: c.Name, Type: at, Nullable: c.Type.Nullable})
	}
	s := &Spec{columns: append([]Column(nil), columns...), schema: arrow.NewSchema(fields, nil)}
	for i := range s.columns {
		s.columns[i].Type = s.columns[i].Type.clone()
	}
	codec, err := newCodec(s.schema, byteArrayBinaries)
	if err != nil {
		return nil, &Error{Row: -1, Reason: err.Error()}
	}
	s.codec = codec
	s.json, err = json.Marshal(specJSON(s.columns))
	if err != nil {
		return nil, fmt.Errorf("schema spec: marshal: %w", err)
	}
	return s, nil
}

// otherIndexes is 0..n-1 without skip.
func otherIndexes(n, skip int) []int {
	out := make([]int, 0, n)
	for i := range n {
		if i != skip {
			out = append(out, i)
		}
	}
	return out
}

// CheckColumnName rejects names a client or an operator could not tell apart or
// type, and the reserved ones (starting with "_").
func CheckColumnName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("column name is empty")
	case len(name) > MaxColumnNameLen:
		return fmt.Errorf("column name is longer than %d bytes", MaxColumnNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("column name is not valid UTF-8")
	case strings.HasPrefix(name, "_"):
		return fmt.Errorf("names starting with _ are reserved")
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("column name contains a control character")
	}
	return nil
}

func parseColumn(i int, elem []byte, request bool) (Column, error) {
	bad := func(reason string) error {
		return &Error{Row: -1, Reason: fmt.Sprintf("schema spec columns[%d]: %s", i, reason)}
	}
	if elem[0] != '[' {
		return Column{}, bad("expected a [name, type] pair, got " + describe(elem))
	}
	var parts [][]byte
	_ = eachElement(elem, func(_ int, p []byte) error { parts = append(parts, p); return nil })
	if len(parts) != 2 {
		return Column{}, bad(fmt.Sprintf("expected a [name, type] pair, got %d elements", len(parts)))
	}
	if parts[0][0] != '"' {
		return Column{}, bad("column name must be a string, got " + describe(parts[0]))
	}
	name, err := unquote(parts[0])
	if err != nil {
		return Column{}, bad("column name " + quoteExcerpt(parts[0]) + ": " + locate(err, -1, "").Reason)
	}
	if err := CheckColumnName(name); err != nil {
		if name == "" {
			return Column{}, bad(err.Error())
		}
		return Column{}, &Error{Row: -1, Column: name, Reason: err.Error()}
	}
	// In a request a type without "nullable" is nullable, but the id never is:
	// reading a bare {"type":"string"} id as nullable would only refuse it.
	t, err := parseType(parts[1], 0, request && name != IDColumn, request)
	if err != nil {
		return Column{}, locate(err, -1, name)
	}
	return Column{Name: name, Type: t}, nil
}

// parseType parses a type object; errors are value errors whose path leads through
// "item" keys. nullable is the default of "nullable"; request accepts the
// reference client's "metric" default (ParseRequestSpec).
func parseType(b []byte, depth int, nullable, request bool) (Type, error) {
	if b[0] != '{' {
		return Type{}, wrongType(`a type object like {"type":"string"}`, b)
	}
	t := Type{Nullable: nullable}
	var dim, item, metric []byte
	var large, blob bool
	err := eachMember(b, func(k string, v []byte) error {
		switch k {
		case "type":
			if v[0] != '"' {
				return &valueError{path: ".type", reason: "expected a string, got " + describe(v)}
			}
			kind, err := unquote(v)
			if err != nil {
				return atPath(err, ".type")
			}
			t.Kind = Kind(kind)
		case "nullable", "large", "blob":
			if v[0] != 't' && v[0] != 'f' {
				return &valueError{path: "." + k, reason: "expected a boolean, got " + describe(v)}
			}
			switch k {
			case "nullable":
				t.Nullable = v[0] == 't'
			case "large":
				large = true
				t.Large = v[0] == 't'
			default:
				blob = true
				t.Blob = v[0] == 't'
			}
		case "dim":
			dim = v
		case "item":
			item = v
		case "metric":
			if !request {
				return &valueError{reason: fmt.Sprintf("unknown option %q", k)}
			}
			metric = v
		default:
			return &valueError{reason: fmt.Sprintf("unknown option %q", k)}
		}
		return nil
	})
	if err != nil {
		return Type{}, err
	}
	onlyFor := func(opt string, present bool, kind Kind) error {
		if present && t.Kind != kind {
			return invalidValue("option %q applies only to type %q, not %q", opt, kind, t.Kind)
		}
		return nil
	}
	for _, e := range []error{onlyFor("large", large, KindString), onlyFor("dim", dim != nil, KindVector), onlyFor("item", item != nil, KindList),
		onlyFor("blob", blob, KindBinary), onlyFor("metric", metric != nil, KindVector)} {
		if e != nil {
			return Type{}, e
		}
	}
	if metric != nil && string(metric) != "null" {
		return Type{}, &valueError{path: ".metric", reason: "only null is supported: Tidemark has no vector search, so a vector column takes no distance metric"}
	}
	switch t.Kind {
	case KindString, KindInt32, KindInt64, KindFloat32, KindFloat64, KindBool, KindTimestamp, KindBinary:
	case KindVector:
		if dim == nil {
			return Type{}, invalidValue(`type "vector" needs "dim", an integer from 1 to %d`, MaxVectorDim)
		}
		n, err := strconv.Atoi(string(dim))
		if err != nil || dim[0] < '0' || dim[0] > '9' || n < 1 || n > MaxVectorDim {
			return Type{}, &valueError{path: ".dim", reason: fmt.Sprintf("expected an integer from 1 to %d, got %s", MaxVectorDim, describe(dim))}
		}
		t.Dim = n
	case KindList:
		if item == nil {
			return Type{}, invalidValue(`type "list" needs "item", a type object`)
		}
		if depth >= maxItemDepth {
			return Type{}, invalidValue("lists nest deeper than %d levels", maxItemDepth)
		}
		// A list item of a request is nullable by default too, as the
		// reference's list items always are.
		it, err := parseType(item, depth+1, request, request)
		if err != nil {
			return Type{}, atPath(err, ".item")
		}
		t.Item = &it
	case "":
		return Type{}, invalidValue(`missing "type"`)
	default:
		return Type{}, invalidValue("unknown type %q", string(t.Kind))
	}
	return t, nil
}

// arrowType maps t to its Arrow type, checking what parseType checks so that
// NewSpec callers get the same validation.
func (t Type) arrowType(depth int) (arrow.DataType, error) {
	if t.Large && t.Kind != KindString {
		return nil, invalidValue(`option "large" applies only to type "string"`)
	}
	if t.Dim != 0 && t.Kind != KindVector {
		return nil, invalidValue(`option "dim" applies only to type "vector"`)
	}
	if t.Item != nil && t.Kind != KindList {
		return nil, invalidValue(`option "item" applies only to type "list"`)
	}
	if t.Blob && t.Kind != KindBinary {
		return nil, invalidValue(`option "blob" applies only to type "binary"`)
	}
	switch t.Kind {
	case KindString:
		if t.Large {
			return arrow.BinaryTypes.LargeString, nil
		}
		return arrow.BinaryTypes.String, nil
	case KindInt32:
		return arrow.PrimitiveTypes.Int32, nil
	case KindInt64:
		return arrow.PrimitiveTypes.Int64, nil
	case KindFloat32:
		return arrow.PrimitiveTypes.Float32, nil
	case KindFloat64:
		return arrow.PrimitiveTypes.Float64, nil
	case KindBool:
		return arrow.FixedWidthTypes.Boolean, nil
	case KindTimestamp:
		return timestampType, nil
	case KindBinary:
		return arrow.BinaryTypes.Binary, nil
	case KindVector:
		if t.Dim < 1 || t.Dim > MaxVectorDim {
			return nil, invalidValue(`type "vector" needs "dim", an integer from 1 to %d`, MaxVectorDim)
		}
		// Vector components are never null; a null vector is (if the column allows).
		return arrow.FixedSizeListOfNonNullable(int32(t.Dim), arrow.PrimitiveTypes.Float32), nil
	case KindList:
		if t.Item == nil {
			return nil, invalidValue(`type "list" needs "item", a type object`)
		}
		if depth >= maxItemDepth {
			return nil, invalidValue("lists nest deeper than %d levels", maxItemDepth)
		}
		it, err := t.Item.arrowType(depth + 1)
		if err != nil {
			return nil, atPath(err, ".item")
		}
		return arrow.ListOfField(arrow.Field{Name: "item", Type: it, Nullable: t.Item.Nullable}), nil
	case "":
		return nil, invalidValue(`missing "type"`)
	default:
		return nil, invalidValue("unknown type %q", string(t.Kind))
	}
}

func (t Type) clone() Type {
	if t.Item != nil {
		it := t.Item.clone()
		t.Item = &it
	}
	return t
}

// Columns returns a copy of the spec's columns in the declared order.
func (s *Spec) Columns() []Column {
	out := make([]Column, len(s.columns))
	for i, c := range s.columns {
		out[i] = Column{Name: c.Name, Type: c.Type.clone()}
	}
	return out
}

// BlobColumns returns the names of the columns declared "blob": true, in the
// declared order: the columns lists and point reads leave out unless a read
// names them (the reference API's projection).
func (s *Spec) BlobColumns() []string {
	var out []string
	for _, c := range s.columns {
		if c.Type.Blob {
			out = append(out, c.Name)
		}
	}
	return out
}

// Schema returns the Arrow schema of the spec's rows, without _seq.
func (s *Spec) Schema() *arrow.Schema { return s.schema }

// Codec returns the codec that decodes rows of this spec.
func (s *Spec) Codec() *Codec { return s.codec }

// Equal reports whether s and o describe the same columns. Two specs that differ
// only in JSON spelling (key order, whitespace, "nullable":false) are equal.
func (s *Spec) Equal(o *Spec) bool {
	if s == nil || o == nil {
		return s == o
	}
	return bytes.Equal(s.json, o.json)
}

// MarshalJSON writes the canonical form: the columns in the declared order, each
// type object with "type" first, the options that differ from their defaults, and
// "nullable" always, so that it means the same to ParseSpec, ParseRequestSpec and
// a reference client, e.g.
// {"columns":[["id",{"type":"string","nullable":false}],["v",{"type":"vector","dim":3,"nullable":true}]]}.
func (s *Spec) MarshalJSON() ([]byte, error) { return bytes.Clone(s.json), nil }

// UnmarshalJSON is ParseSpec, so a registry object that embeds a *Spec is
// validated as it is read.
func (s *Spec) UnmarshalJSON(data []byte) error {
	p, err := ParseSpec(data)
	if err != nil {
		return err
	}
	*s = *p
	return nil
}

// String returns the canonical JSON.
func (s *Spec) String() string { return string(s.json) }

// specJSON and typeJSON fix the canonical field order.
type specJSON []Column

func (c specJSON) MarshalJSON() ([]byte, error) {
	cols := make([][2]any, len(c))
	for i, col := range c {
		cols[i] = [2]any{col.Name, toTypeJSON(col.Type)}
	}
	return json.Marshal(struct {
		Columns [][2]any `json:"columns"`
	}{cols})
}

type typeJSON struct {
	Type     Kind      `json:"type"`
	Large    bool      `json:"large,omitempty"`
	Dim      int       `json:"dim,omitempty"`
	Item     *typeJSON `json:"item,omitempty"`
	Blob     bool      `json:"blob,omitempty"`
	Nullable bool      `json:"nullable"`
}

func toTypeJSON(t Type) *typeJSON {
	j := &typeJSON{Type: t.Kind, Large: t.Large, Dim: t.Dim, Blob: t.Blob, Nullable: t.Nullable}
	if t.Item != nil {
		j.Item = toTypeJSON(*t.Item)
	}
	return j
}
