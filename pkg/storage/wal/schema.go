package wal

import (
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// ErrSchema means a batch (or a writer's input schema) does not fit the shard's
// schema. The error names the column.
var ErrSchema = errors.New("schema mismatch")

// storeSchema checks a writer's input schema and returns the schema of entries and
// generations: the input columns followed by a non-null uint64 _seq.
func storeSchema(input *arrow.Schema) (*arrow.Schema, error) {
	seen := make(map[string]bool, input.NumFields())
	for _, f := range input.Fields() {
		switch {
		case f.Name == rowkey.SeqColumn:
			return nil, fmt.Errorf("%w: column %q is added by the WAL and must not be in the input schema", ErrSchema, f.Name)
		case seen[f.Name]:
			return nil, fmt.Errorf("%w: column %q appears twice", ErrSchema, f.Name)
		}
		seen[f.Name] = true
	}
	idx := input.FieldIndices(rowkey.IDColumn)
	if len(idx) != 1 {
		return nil, fmt.Errorf("%w: column %q is missing", ErrSchema, rowkey.IDColumn)
	}
	if f := input.Field(idx[0]); f.Type.ID() != arrow.STRING || f.Nullable {
		return nil, fmt.Errorf("%w: column %q must be a non-null utf8 string, is %s (nullable=%v)", ErrSchema, f.Name, f.Type, f.Nullable)
	}
	fields := append(input.Fields(), arrow.Field{Name: rowkey.SeqColumn, Type: arrow.PrimitiveTypes.Uint64})
	return arrow.NewSchema(fields, nil), nil
}

// checkBatch reports the first column of rec that does not fit the input schema: a
// missing, extra or misplaced column, a different type, or a null in a non-null
// column. A batch that declares a non-null column nullable but holds no null is
// accepted: what is stored is the schema's declaration, and the data fits it. Nulls
// are checked at the top level only; nested non-null fields are trusted to the type.
func checkBatch(input *arrow.Schema, rec arrow.RecordBatch) error {
	rs := rec.Schema()
	if rs == input || sameColumns(rs, input) {
		// The common case, checked without the name lookups below: only nulls remain.
		for i, f := range input.Fields() {
			if n := rec.Column(i).NullN(); !f.Nullable && n > 0 {
				return fmt.Errorf("%w: column %q is not nullable but has %d null(s)", ErrSchema, f.Name, n)
			}
		}
		return nil
	}
	for _, f := range input.Fields() {
		if len(rs.FieldIndices(f.Name)) == 0 {
			return fmt.Errorf("%w: batch lacks column %q", ErrSchema, f.Name)
		}
	}
	for _, f := range rs.Fields() {
		if len(input.FieldIndices(f.Name)) == 0 {
			return fmt.Errorf("%w: batch has column %q that the shard's schema does not", ErrSchema, f.Name)
		}
	}
	if rs.NumFields() != input.NumFields() {
		return fmt.Errorf("%w: batch has %d columns, the shard's schema %d (a column appears twice)", ErrSchema, rs.NumFields(), input.NumFields())
	}
	for i, want := range input.Fields() {
		got := rs.Field(i)
		if got.Name != want.Name {
			return fmt.Errorf("%w: column %d is %q, the shard's schema has %q there", ErrSchema, i, got.Name, want.Name)
		}
		if !arrow.TypeEqual(got.Type, want.Type) {
			return fmt.Errorf("%w: column %q has type %s, the shard's schema has %s", ErrSchema, got.Name, got.Type, want.Type)
		}
		if n := rec.Column(i).NullN(); !want.Nullable && n > 0 {
			return fmt.Errorf("%w: column %q is not nullable but has %d null(s)", ErrSchema, got.Name, n)
		}
	}
	return nil
}

// sameFields reports whether two schemas have the same column names, types and
// nullability (metadata is ignored: entries carry writer identity there).
func sameFields(a, b *arrow.Schema) bool { return sameSchema(a, b, true) }

// sameColumns is sameFields without comparing nullability.
func sameColumns(a, b *arrow.Schema) bool { return sameSchema(a, b, false) }

func sameSchema(a, b *arrow.Schema, nullability bool) bool {
	if a.NumFields() != b.NumFields() {
		return false
	}
	for i := range a.NumFields() {
		fa, fb := a.Field(i), b.Field(i)
		if fa.Name != fb.Name || (nullability && fa.Nullable != fb.Nullable) || !arrow.TypeEqual(fa.Type, fb.Type) {
			return false
		}
	}
	return true
}
