package schema

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// IDColumn is the primary key every schema starts with: a non-null, non-empty
// utf8 string. It is rowkey.IDColumn (a test holds them equal); this package does
// not import the table format so the HTTP layer can use it without Parquet.
const IDColumn = "id"

// MaxIDBytes bounds an id. Ids are copied into each fragment's id_min/id_max in the
// base manifest, which every reader and the scanner load, and into URLs; one 60 MB
// id would make every manifest of its store 60 MB. Real ids (UUIDs, hashes, paths)
// are far shorter.
const MaxIDBytes = 1024

// Codec decodes JSON rows into record batches of one schema. The schema is what a
// client writes: it has no hidden columns (_seq is added by the WAL), its first
// column is IDColumn, and every type is one the codecs know. Build one with
// RolloutCodec or Spec.Codec; a Codec is immutable and safe for concurrent use.
type Codec struct {
	schema *arrow.Schema
	cols   []column
	index  map[string]int
}

type column struct {
	name string
	slot
}

// codecOption adjusts a column's codec before the Codec is built.
type codecOption func(name string, c valueCodec) valueCodec

// jsonTextColumns makes the named utf8 columns accept any JSON value as text.
func jsonTextColumns(names ...string) codecOption {
	return func(name string, c valueCodec) valueCodec {
		for _, n := range names {
			if sc, ok := c.(stringCodec); ok && n == name {
				sc.jsonText = true
				return sc
			}
		}
		return c
	}
}

// newCodec checks that s is a schema a table accepts rows of (minus _seq) and
// builds its codec.
func newCodec(s *arrow.Schema, opts ...codecOption) (*Codec, error) {
	if s.NumFields() == 0 || s.Field(0).Name != IDColumn {
		return nil, fmt.Errorf("schema: first column must be %q", IDColumn)
	}
	if f := s.Field(0); f.Type.ID() != arrow.STRING || f.Nullable {
		return nil, fmt.Errorf("schema: column %q must be a non-null utf8 string, is %s (nullable=%v)", IDColumn, f.Type, f.Nullable)
	}
	c := &Codec{schema: s, cols: make([]column, s.NumFields()), index: make(map[string]int, s.NumFields())}
	for i, f := range s.Fields() {
		if strings.HasPrefix(f.Name, "_") {
			return nil, fmt.Errorf("schema: column %q: names starting with _ are reserved", f.Name)
		}
		if _, dup := c.index[f.Name]; dup {
			return nil, fmt.Errorf("schema: column %q appears twice", f.Name)
		}
		vc, err := codecFor(f.Type, 0)
		if err != nil {
			return nil, fmt.Errorf("schema: column %q: %w", f.Name, err)
		}
		for _, o := range opts {
			vc = o(f.Name, vc)
		}
		c.cols[i] = column{name: f.Name, slot: slot{vc, f.Nullable}}
		c.index[f.Name] = i
	}
	c.cols[0].codec = stringCodec{nonEmpty: true}
	return c, nil
}

// Schema returns the schema of the batches Decode builds.
func (c *Codec) Schema() *arrow.Schema { return c.schema }

// Decode builds one record batch from rows, each a JSON object keyed by column
// name. A key that is not a column, a missing or null value in a non-null column,
// or a value of the wrong JSON type fails the whole batch with an *Error naming
// the row and column (errors.Is(err, ErrInvalid)). A missing key in a nullable
// column is null. The caller releases the batch.
func (c *Codec) Decode(rows []json.RawMessage) (arrow.RecordBatch, error) {
	return c.decode(rows, nil)
}

// decode is Decode with fill, which may supply defaults for a row's missing or
// null values (vals is indexed like the schema's columns) before they are checked.
func (c *Codec) decode(rows []json.RawMessage, fill func(vals [][]byte)) (arrow.RecordBatch, error) {
	b := array.NewRecordBuilder(memory.DefaultAllocator, c.schema)
	defer b.Release()
	vals := make([][]byte, len(c.cols))
	for r, raw := range rows {
		if !json.Valid(raw) {
			return nil, &Error{Row: r, Reason: "malformed JSON"}
		}
		raw = trimSpace(raw)
		if raw[0] != '{' {
			return nil, &Error{Row: r, Reason: "expected a JSON object, got " + describe(raw)}
		}
		clear(vals)
		err := eachMember(raw, func(k string, v []byte) error {
			i, ok := c.index[k]
			if !ok {
				return &Error{Row: r, Column: k, Reason: "no such column in the schema"}
			}
			if vals[i] != nil {
				return &Error{Row: r, Column: k, Reason: "key given twice"}
			}
			vals[i] = v
			return nil
		})
		if err != nil {
			return nil, locate(err, r, "") // a key that is not UTF-8 is about no column
		}
		if fill != nil {
			fill(vals)
		}
		for i, col := range c.cols {
			v := vals[i]
			if v == nil {
				if !col.nullable {
					return nil, &Error{Row: r, Column: col.name, Reason: "required column is missing"}
				}
				b.Field(i).AppendNull()
				continue
			}
			if err := col.decode(b.Field(i), v); err != nil {
				return nil, locate(err, r, col.name)
			}
		}
	}
	return b.NewRecordBatch(), nil
}

// EncodeRows returns every row of rec as a JSON object: columns in schema order,
// hidden columns (names starting with "_", such as _seq) left out, nulls written as
// null, binary as base64, timestamps as RFC 3339 (see TimestampLayout), lists as
// arrays. What EncodeRows writes, Decode reads back to the same values.
func EncodeRows(rec arrow.RecordBatch) ([]json.RawMessage, error) {
	e, err := newRowEncoder(rec.Schema())
	if err != nil {
		return nil, err
	}
	out := make([]json.RawMessage, rec.NumRows())
	for i := range out {
		out[i] = e.appendRow(nil, rec, i)
	}
	return out, nil
}

// EncodeRow is EncodeRows for the single row i of rec.
func EncodeRow(rec arrow.RecordBatch, i int) (json.RawMessage, error) {
	if i < 0 || int64(i) >= rec.NumRows() {
		return nil, fmt.Errorf("encode row %d: batch has %d rows", i, rec.NumRows())
	}
	e, err := newRowEncoder(rec.Schema())
	if err != nil {
		return nil, err
	}
	return e.appendRow(nil, rec, i), nil
}

// rowEncoder writes rows of batches of one schema.
type rowEncoder struct {
	cols []int
	keys [][]byte // `"name":` per output column
	vals []slot
}

func newRowEncoder(s *arrow.Schema, opts ...codecOption) (*rowEncoder, error) {
	e := &rowEncoder{}
	for i, f := range s.Fields() {
		if strings.HasPrefix(f.Name, "_") {
			continue
		}
		vc, err := codecFor(f.Type, 0)
		if err != nil {
			return nil, fmt.Errorf("encode column %q: %w", f.Name, err)
		}
		for _, o := range opts {
			vc = o(f.Name, vc)
		}
		e.cols = append(e.cols, i)
		e.keys = append(e.keys, append(appendString(nil, f.Name), ':'))
		e.vals = append(e.vals, slot{codec: vc, nullable: true})
	}
	return e, nil
}

// RowEncoder writes rows of batches of one schema as EncodeRows does, without
// building an encoder per row: what a list streaming many rows needs.
type RowEncoder struct {
	schema *arrow.Schema
	e      *rowEncoder
}

// NewRowEncoder returns the encoder of rows of schema s. rollout makes the
// rollout metadata column a JSON value, as RolloutCodec writes it. The columns
// named in omit are left out of every row (a list leaves blob columns out).
func NewRowEncoder(s *arrow.Schema, rollout bool, omit ...string) (*RowEncoder, error) {
	var opts []codecOption
	if rollout {
		opts = append(opts, jsonTextColumns(MetadataColumn))
	}
	e, err := newRowEncoder(s, opts...)
	if err != nil {
		return nil, err
	}
	if len(omit) > 0 {
		e = e.without(func(col int) bool { return slices.Contains(omit, s.Field(col).Name) })
	}
	return &RowEncoder{schema: s, e: e}, nil
}

// without returns e without the output columns whose schema index omit reports.
func (e *rowEncoder) without(omit func(col int) bool) *rowEncoder {
	out := &rowEncoder{}
	for j, col := range e.cols {
		if !omit(col) {
			out.cols = append(out.cols, col)
			out.keys = append(out.keys, e.keys[j])
			out.vals = append(out.vals, e.vals[j])
		}
	}
	return out
}

// WithSchema returns the encoder for s, a schema equal to r's.
func (r *RowEncoder) WithSchema(s *arrow.Schema) *RowEncoder { return &RowEncoder{schema: s, e: r.e} }

// AppendRow appends row i of rec, a batch of the encoder's schema, to dst.
func (r *RowEncoder) AppendRow(dst []byte, rec arrow.RecordBatch, i int) ([]byte, error) {
	if s := rec.Schema(); s != r.schema && !s.Equal(r.schema) {
		return dst, fmt.Errorf("encode row: batch schema %s is not the encoder's %s", rec.Schema(), r.schema)
	}
	if i < 0 || int64(i) >= rec.NumRows() {
		return dst, fmt.Errorf("encode row %d: batch has %d rows", i, rec.NumRows())
	}
	return r.e.appendRow(dst, rec, i), nil
}

func (e *rowEncoder) appendRow(dst []byte, rec arrow.RecordBatch, row int) []byte {
	dst = append(dst, '{')
	for j, i := range e.cols {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, e.keys[j]...)
		dst = e.vals[j].encode(dst, rec.Column(i), row)
	}
	return append(dst, '}')
}
