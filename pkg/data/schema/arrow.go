package schema

// Arrow input: the record batches of an add sent as Arrow (an IPC stream), read
// into one batch of a codec's schema with the same checks as JSON rows.
//
//   - Columns are matched by name, in any order. A name the schema lacks, a name
//     given twice, a missing column that is not nullable (and has no default) and
//     a null where the schema allows none are refused, as in JSON. A missing
//     nullable column is null.
//   - A type is accepted when it is the schema's, or one that holds the same
//     values exactly: large_utf8, utf8_view or a dictionary of strings for utf8
//     (and the other way round), large_binary or binary_view for binary, any
//     integer type whose values fit the column's width, float32 for float64 and
//     float64 for float32 under JSON's rule (finite at the width, nonzero stays
//     nonzero), a timestamp of any unit and time zone whose instants are whole
//     microseconds (one without a time zone is read as UTC, as JSON's integer
//     microseconds are), large_list for list, null for any nullable column. Lists,
//     vectors (fixed_size_list of the same size) and structs (fields by name) are
//     matched element by element. Anything else is refused naming both types.
//   - Values are checked as JSON's are, by the same functions: ids (checkID),
//     timestamps within years 0001-9999 (checkMicros); UTF-8 by arrow-go's full
//     validation. JSON has no NaN or infinity, so a float column refuses them
//     (the API would answer null for them).
//
// Errors are *Error, located as precisely as the input allows: the row (its
// index in the whole stream) and the path inside a nested value.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// DecodeArrow builds one record batch of the codec's schema from recs, batches
// of the client's schema in (checked against the codec's even when recs is
// empty), as Decode does from JSON rows. Batches are concatenated in order;
// nothing of recs is modified. Buffers are allocated from mem. The caller
// releases the batch.
//
// recs must be arrays as an IPC reader builds them: they are validated in full
// (array.ValidateFull) before any value is read, but arrow-go's validation may
// itself panic on some malformed arrays, so a caller holding untrusted bytes
// decodes under a recover.
func (c *Codec) DecodeArrow(mem memory.Allocator, in *arrow.Schema, recs []arrow.RecordBatch) (arrow.RecordBatch, error) {
	return c.decodeArrow(mem, in, recs, nil)
}

// DecodeRolloutsArrow is DecodeArrow for rollout records, with DecodeRollouts'
// defaults for a column left out or a null value: problem_id = the record's
// rollout_id, sequence_order = 0, role = DefaultRole, created_at = now
// (truncated to the microsecond), content_type = DefaultContentType.
func DecodeRolloutsArrow(mem memory.Allocator, in *arrow.Schema, recs []arrow.RecordBatch, now time.Time) (arrow.RecordBatch, error) {
	c := rolloutCodec
	rollout, problem := c.index[RolloutIDColumn], c.index[ProblemIDColumn]
	role, created, ctype := c.index[RoleColumn], c.index[CreatedAtColumn], c.index[ContentTypeColumn]
	sequence := c.index[SequenceColumn]
	nowMicros := now.UnixMicro()
	return c.decodeArrow(mem, in, recs, &arrowDefaults{
		columns: []int{problem, sequence, role, created, ctype},
		fill: func(mem memory.Allocator, cols []arrow.Array, n int) {
			rollouts, _ := cols[rollout].(*array.String)
			cols[problem] = fillStrings(mem, cols[problem], n, func(i int) (string, bool) {
				if rollouts == nil || rollouts.IsNull(i) {
					return "", false
				}
				return rollouts.Value(i), true
			})
			cols[sequence] = fillInt32s(mem, cols[sequence], n, 0)
			cols[role] = fillStrings(mem, cols[role], n, func(int) (string, bool) { return DefaultRole, true })
			cols[created] = fillTimestamps(mem, cols[created], n, arrow.Timestamp(nowMicros))
			cols[ctype] = fillStrings(mem, cols[ctype], n, func(int) (string, bool) { return DefaultContentType, true })
		},
	})
}

// arrowDefaults are a kind's defaults for Arrow input: fill replaces the
// absent (nil) columns among cols, and the nulls of those present, of a batch
// of n rows; columns are the indexes it fills, which may be absent or null.
type arrowDefaults struct {
	columns []int
	fill    func(mem memory.Allocator, cols []arrow.Array, n int)
}

func (c *Codec) decodeArrow(mem memory.Allocator, in *arrow.Schema, recs []arrow.RecordBatch, defaults *arrowDefaults) (arrow.RecordBatch, error) {
	src, err := c.matchColumns(in, defaults)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		// The types are checked all the same, on no rows.
		empty := make([]arrow.Array, in.NumFields())
		for i, f := range in.Fields() {
			empty[i] = array.MakeArrayOfNull(mem, f.Type, 0)
			defer empty[i].Release()
		}
		recs = []arrow.RecordBatch{array.NewRecordBatch(in, empty, 0)}
		defer recs[0].Release()
	}
	ctx := compute.WithAllocator(context.Background(), mem)
	parts := make([][]arrow.Array, len(c.cols)) // per column, one array per batch
	defer func() {
		for _, ps := range parts {
			for _, p := range ps {
				p.Release()
			}
		}
	}()
	base := 0 // the stream's index of the batch's first row
	for _, rec := range recs {
		if int(rec.NumCols()) != in.NumFields() {
			return nil, &Error{Row: -1, Reason: fmt.Sprintf("a record batch has %d columns, the stream's schema %d", rec.NumCols(), in.NumFields())}
		}
		n := int(rec.NumRows())
		cols := make([]arrow.Array, len(c.cols))
		err := c.conformBatch(ctx, mem, rec, src, defaults, cols)
		for i, col := range cols {
			if col != nil {
				parts[i] = append(parts[i], col)
			}
		}
		if err != nil {
			return nil, locateSlot(err, base)
		}
		base += n
	}
	out := make([]arrow.Array, len(c.cols))
	defer func() {
		for _, a := range out {
			if a != nil {
				a.Release()
			}
		}
	}()
	for i, ps := range parts {
		if len(ps) == 1 {
			ps[0].Retain()
			out[i] = ps[0]
			continue
		}
		a, err := array.Concatenate(ps, mem)
		if err != nil {
			// Only offsets past 2^31 fail here: a string or binary column holds
			// at most 2 GiB in one batch.
			return nil, &Error{Row: -1, Column: c.cols[i].name, Reason: fmt.Sprintf("the add's values do not fit one Arrow column (%v): send fewer rows per request", err)}
		}
		out[i] = a
	}
	return array.NewRecordBatch(c.schema, out, int64(base)), nil
}

// matchColumns maps each of the codec's columns to its index in in (-1 when in
// lacks it), refusing what no batch could make right: a column the schema
// lacks, one given twice, a required one missing.
func (c *Codec) matchColumns(in *arrow.Schema, defaults *arrowDefaults) ([]int, error) {
	src := make([]int, len(c.cols))
	for i := range src {
		src[i] = -1
	}
	for k, f := range in.Fields() {
		i, ok := c.index[f.Name]
		switch {
		case !ok:
			return nil, &Error{Row: -1, Column: f.Name, Reason: "no such column in the schema"}
		case src[i] >= 0:
			return nil, &Error{Row: -1, Column: f.Name, Reason: "column given twice"}
		}
		src[i] = k
	}
	for i, col := range c.cols {
		if src[i] < 0 && !col.nullable && (defaults == nil || !slices.Contains(defaults.columns, i)) {
			return nil, &Error{Row: -1, Column: col.name, Reason: "required column is missing"}
		}
	}
	return src, nil
}

// conformBatch fills cols (one per codec column) from rec. On error, cols holds
// what was built so far, for the caller to release, and the error is a
// *columnError.
func (c *Codec) conformBatch(ctx context.Context, mem memory.Allocator, rec arrow.RecordBatch, src []int, defaults *arrowDefaults, cols []arrow.Array) error {
	n := int(rec.NumRows())
	for i, col := range c.cols {
		if src[i] < 0 {
			continue
		}
		a := rec.Column(src[i])
		if a.Len() != n {
			return &columnError{column: col.name, slotError: slotError{slot: -1, reason: fmt.Sprintf("%d values in a batch of %d rows", a.Len(), n)}}
		}
		// A null array has no buffers to check (and arrow-go's validation wants
		// one its IPC reader does not give it).
		if err := validateFull(a); err != nil && a.DataType().ID() != arrow.NULL {
			return &columnError{column: col.name, slotError: slotError{slot: -1, reason: "malformed Arrow array: " + err.Error()}}
		}
		out, err := conform(ctx, a, c.schema.Field(i).Type)
		if err != nil {
			return inColumn(err, col.name)
		}
		cols[i] = out
	}
	if defaults != nil {
		defaults.fill(mem, cols, n)
	}
	for i, col := range c.cols {
		if cols[i] == nil {
			cols[i] = array.MakeArrayOfNull(mem, c.schema.Field(i).Type, n)
		}
		if err := checkRequired(cols[i], col.nullable, nil); err != nil {
			return inColumn(err, col.name)
		}
		if err := checkValues(cols[i], i == 0); err != nil {
			return inColumn(err, col.name)
		}
	}
	return nil
}

// slotError is a refusal of the value at slot of an array (-1: of the array as
// a whole, e.g. its type), path locating it inside that value. A parent maps
// the slot to its own and prepends its segment to path.
type slotError struct {
	slot   int
	path   string
	reason string
}

func (e *slotError) Error() string { return fmt.Sprintf("slot %d%s: %s", e.slot, e.path, e.reason) }

// columnError is a slotError in a column of a batch.
type columnError struct {
	column string
	slotError
}

func inColumn(err error, column string) error {
	var se *slotError
	if errors.As(err, &se) {
		return &columnError{column: column, slotError: *se}
	}
	return &columnError{column: column, slotError: slotError{slot: -1, reason: err.Error()}}
}

// locateSlot turns a columnError of a batch whose first row is the stream's
// row base into an *Error.
func locateSlot(err error, base int) error {
	var ce *columnError
	if !errors.As(err, &ce) {
		return err
	}
	row := -1
	if ce.slot >= 0 {
		row = base + ce.slot
	}
	return &Error{Row: row, Column: ce.column, Path: ce.path, Reason: ce.reason}
}

// inChild returns err, about a child array of a nested one, as an error of
// the parent: at the parent's slot of the child's (parent maps it), or about
// the whole array under path segment seg.
func inChild(err error, seg string, parent func(childSlot int) (int, string)) error {
	var se *slotError
	switch {
	case !errors.As(err, &se):
		return &slotError{slot: -1, path: seg, reason: err.Error()}
	case se.slot >= 0:
		return toParent(err, parent)
	}
	return &slotError{slot: -1, path: seg + se.path, reason: se.reason}
}

// conform returns a as an array of type want (exactly: field names and
// nullability of nested types included), converting what the package comment
// accepts. Null checks are checkRequired's, value checks checkValues'.
func conform(ctx context.Context, a arrow.Array, want arrow.DataType) (arrow.Array, error) {
	got := a.DataType()
	mismatch := func() error {
		return &slotError{slot: -1, reason: fmt.Sprintf("type %s does not match the store's %s", got, want)}
	}
	switch got.ID() {
	case arrow.DICTIONARY:
		// pandas' categoricals and Polars' enums: decoded, then read as their values.
		dt := got.(*arrow.DictionaryType)
		dec, err := recast(ctx, a, dt.ValueType)
		if err != nil {
			return nil, &slotError{slot: -1, reason: fmt.Sprintf("type %s: cannot decode the dictionary: %v", got, err)}
		}
		defer dec.Release()
		out, err := conform(ctx, dec, want)
		var se *slotError
		if errors.As(err, &se) && se.path == "" {
			return nil, &slotError{slot: se.slot, reason: "dictionary values: " + se.reason}
		}
		return out, err
	case arrow.EXTENSION:
		// Read as what it stores (arrow.json is utf8).
		return conform(ctx, a.(array.ExtensionArray).Storage(), want)
	case arrow.NULL:
		// An all-null column of no type (pyarrow's type for [None, None]).
		return array.MakeArrayOfNull(compute.GetAllocator(ctx), want, a.Len()), nil
	}
	switch want.ID() {
	case arrow.STRING, arrow.LARGE_STRING:
		switch got.ID() {
		case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW:
			return castExact(ctx, a, want)
		}
	case arrow.BINARY:
		switch got.ID() {
		case arrow.BINARY, arrow.LARGE_BINARY, arrow.BINARY_VIEW:
			return castExact(ctx, a, want)
		}
	case arrow.INT8, arrow.INT32, arrow.INT64:
		if arrow.IsInteger(got.ID()) {
			out, err := castExact(ctx, a, want)
			if err != nil {
				return nil, &slotError{slot: -1, reason: fmt.Sprintf("type %s: a value does not fit the store's %s: %v", got, want, err)}
			}
			return out, nil
		}
	case arrow.FLOAT32:
		switch got.ID() {
		case arrow.FLOAT32:
			return castExact(ctx, a, want)
		case arrow.FLOAT64:
			return narrowFloats(compute.GetAllocator(ctx), a.(*array.Float64))
		}
	case arrow.FLOAT64:
		switch got.ID() {
		case arrow.FLOAT64, arrow.FLOAT32:
			return castExact(ctx, a, want)
		}
	case arrow.BOOL:
		if got.ID() == arrow.BOOL {
			return castExact(ctx, a, want)
		}
	case arrow.TIMESTAMP:
		if got.ID() == arrow.TIMESTAMP {
			return toMicros(compute.GetAllocator(ctx), a.(*array.Timestamp), want)
		}
	case arrow.LIST:
		switch got.ID() {
		case arrow.LIST:
			return conformList(ctx, a.(*array.List), want.(*arrow.ListType))
		case arrow.LARGE_LIST:
			l, err := recast(ctx, a, arrow.ListOfField(got.(*arrow.LargeListType).ElemField()))
			if err != nil {
				return nil, &slotError{slot: -1, reason: fmt.Sprintf("type %s: %v", got, err)}
			}
			defer l.Release()
			return conformList(ctx, l.(*array.List), want.(*arrow.ListType))
		}
	case arrow.FIXED_SIZE_LIST:
		if g, ok := got.(*arrow.FixedSizeListType); ok && g.Len() == want.(*arrow.FixedSizeListType).Len() {
			return conformFixedList(ctx, a.(*array.FixedSizeList), want.(*arrow.FixedSizeListType))
		}
	case arrow.STRUCT:
		if got.ID() == arrow.STRUCT {
			return conformStruct(ctx, a.(*array.Struct), want.(*arrow.StructType))
		}
	}
	return nil, mismatch()
}

// castExact returns a as want: itself when it is of that type already, else
// arrow's safe cast (which refuses a value it would change).
func castExact(ctx context.Context, a arrow.Array, want arrow.DataType) (arrow.Array, error) {
	switch {
	case arrow.TypeEqual(a.DataType(), want):
		a.Retain()
		return a, nil
	}
	return recast(ctx, a, want)
}

// recast is arrow's safe cast of a to t, for a layout change that keeps the
// values (a dictionary to its values, large_list to list). An empty a becomes
// an empty array of t without arrow-go's cast, which builds invalid arrays
// from some empty ones (the children of a struct that is itself empty).
func recast(ctx context.Context, a arrow.Array, t arrow.DataType) (arrow.Array, error) {
	if a.Len() == 0 {
		return array.MakeArrayOfNull(compute.GetAllocator(ctx), t, 0), nil
	}
	return compute.CastArray(ctx, a, compute.SafeCastOptions(t))
}

// narrowFloats reads float64 values as float32 under JSON's rule (floatCodec):
// a value out of float32's range, or a nonzero one that would be stored as 0,
// is refused. NaN and infinities are left to checkValues.
func narrowFloats(mem memory.Allocator, a *array.Float64) (arrow.Array, error) {
	b := array.NewFloat32Builder(mem)
	defer b.Release()
	b.Reserve(a.Len())
	for i, v := range a.Float64Values() {
		if a.IsNull(i) {
			b.AppendNull()
			continue
		}
		f := float32(v)
		switch {
		case math.IsInf(float64(f), 0) && !math.IsInf(v, 0):
			return nil, &slotError{slot: i, reason: fmt.Sprintf("number %v is out of range for float32", v)}
		case f == 0 && v != 0:
			return nil, &slotError{slot: i, reason: fmt.Sprintf("number %v is too small for float32 (it would be stored as 0)", v)}
		}
		b.Append(f)
	}
	return b.NewArray(), nil
}

// toMicros reads timestamps of any unit and time zone as microseconds in UTC,
// refusing one that is not a whole microsecond or overflows.
func toMicros(mem memory.Allocator, a *array.Timestamp, want arrow.DataType) (arrow.Array, error) {
	unit := a.DataType().(*arrow.TimestampType).Unit
	if unit == arrow.Microsecond {
		// The same instants: a time zone only says how to show them.
		d := a.Data()
		out := array.NewData(want, d.Len(), d.Buffers(), nil, d.NullN(), d.Offset())
		defer out.Release()
		return array.MakeFromData(out), nil
	}
	b := array.NewTimestampBuilder(mem, want.(*arrow.TimestampType))
	defer b.Release()
	b.Reserve(a.Len())
	for i, v := range a.TimestampValues() {
		if a.IsNull(i) {
			b.AppendNull()
			continue
		}
		var us int64
		switch n := int64(v); unit {
		case arrow.Second, arrow.Millisecond:
			mul := int64(1_000_000)
			if unit == arrow.Millisecond {
				mul = 1_000
			}
			if n > math.MaxInt64/mul || n < math.MinInt64/mul {
				return nil, &slotError{slot: i, reason: fmt.Sprintf("timestamp %d %s is outside years 0001-9999", n, unit)}
			}
			us = n * mul
		default: // nanoseconds
			if n%1_000 != 0 {
				return nil, &slotError{slot: i, reason: fmt.Sprintf("timestamp %d ns is not a whole microsecond (timestamps are stored in microseconds)", n)}
			}
			us = n / 1_000
		}
		b.Append(arrow.Timestamp(us))
	}
	return b.NewArray(), nil
}

// conformList conforms the list's values to want's item type.
func conformList(ctx context.Context, l *array.List, want *arrow.ListType) (arrow.Array, error) {
	values, err := conform(ctx, l.ListValues(), want.Elem())
	if err != nil {
		return nil, inChild(err, "[]", listSlot(l))
	}
	defer values.Release()
	d := l.Data()
	out := array.NewData(want, d.Len(), d.Buffers()[:2], []arrow.ArrayData{values.Data()}, d.NullN(), d.Offset())
	defer out.Release()
	return array.MakeFromData(out), nil
}

// conformFixedList conforms a vector's values to want's item type.
func conformFixedList(ctx context.Context, l *array.FixedSizeList, want *arrow.FixedSizeListType) (arrow.Array, error) {
	values, err := conform(ctx, l.ListValues(), want.Elem())
	if err != nil {
		return nil, inChild(err, "[]", fixedListSlot(l, int(want.Len())))
	}
	defer values.Release()
	d := l.Data()
	out := array.NewData(want, d.Len(), d.Buffers()[:1], []arrow.ArrayData{values.Data()}, d.NullN(), d.Offset())
	defer out.Release()
	return array.MakeFromData(out), nil
}

// conformStruct matches the struct's fields to want's by name: a field want
// lacks, or one given twice, is refused; a missing nullable field is null; a
// missing required one is refused.
func conformStruct(ctx context.Context, s *array.Struct, want *arrow.StructType) (arrow.Array, error) {
	got := s.DataType().(*arrow.StructType)
	seen := make(map[string]bool, got.NumFields())
	for _, f := range got.Fields() {
		if _, ok := want.FieldIdx(f.Name); !ok {
			return nil, &slotError{slot: -1, path: "." + f.Name, reason: "not a field of this struct"}
		}
		if seen[f.Name] {
			return nil, &slotError{slot: -1, path: "." + f.Name, reason: "field given twice"}
		}
		seen[f.Name] = true
	}
	d := s.Data()
	// Children hold the struct's offset too: they are conformed whole.
	children := make([]arrow.ArrayData, want.NumFields())
	defer func() {
		for _, c := range children {
			if c != nil {
				c.Release()
			}
		}
	}()
	for j, f := range want.Fields() {
		k, ok := got.FieldIdx(f.Name)
		if !ok {
			if !f.Nullable {
				return nil, &slotError{slot: -1, path: "." + f.Name, reason: "required field is missing"}
			}
			nulls := array.MakeArrayOfNull(compute.GetAllocator(ctx), f.Type, d.Offset()+d.Len())
			children[j] = nulls.Data()
			children[j].Retain()
			nulls.Release()
			continue
		}
		child := array.MakeFromData(d.Children()[k])
		out, err := conform(ctx, child, f.Type)
		child.Release()
		if err != nil {
			// The child's slots are the struct's plus its offset.
			return nil, inChild(err, "."+f.Name, func(j int) (int, string) { return j - d.Offset(), "." + f.Name })
		}
		children[j] = out.Data()
		children[j].Retain()
		out.Release()
	}
	out := array.NewData(want, d.Len(), d.Buffers()[:1], children, d.NullN(), d.Offset())
	defer out.Release()
	return array.MakeFromData(out), nil
}

// checkRequired refuses a null in a slot that allows none (nullable false for
// a itself, the nested types' own for their children), among the slots live
// reports (nil: every slot): a child under a null parent may be null. live is
// asked only about nulls, so a column without any costs one pass over none.
func checkRequired(a arrow.Array, nullable bool, live func(slot int) bool) error {
	if !nullable && a.NullN() > 0 {
		for i := range a.Len() {
			if a.IsNull(i) && (live == nil || live(i)) {
				return &slotError{slot: i, reason: "null is not allowed"}
			}
		}
	}
	if !hasRequired(a.DataType()) {
		return nil
	}
	// under is live for the child slots of a's live, valid slots; parent maps a
	// child slot to a's slot holding it (-1: none).
	under := func(parent func(j int) (int, string)) func(int) bool {
		return func(j int) bool {
			i, _ := parent(j)
			return i >= 0 && a.IsValid(i) && (live == nil || live(i))
		}
	}
	switch a := a.(type) {
	case *array.List:
		slot := listSlot(a)
		if err := checkRequired(a.ListValues(), a.DataType().(*arrow.ListType).ElemField().Nullable, under(slot)); err != nil {
			return toParent(err, slot)
		}
	case *array.FixedSizeList:
		t := a.DataType().(*arrow.FixedSizeListType)
		slot := fixedListSlot(a, int(t.Len()))
		if err := checkRequired(a.ListValues(), t.ElemField().Nullable, under(slot)); err != nil {
			return toParent(err, slot)
		}
	case *array.Struct:
		for j, f := range a.DataType().(*arrow.StructType).Fields() {
			if f.Nullable && !hasRequired(f.Type) {
				continue
			}
			slot := func(i int) (int, string) { return i, "." + f.Name }
			if err := checkRequired(a.Field(j), f.Nullable, under(slot)); err != nil {
				return toParent(err, slot)
			}
		}
	}
	return nil
}

// listSlot maps a slot of a list's values to the list's slot holding it and
// the element's index there. A value under no slot maps to -1 (no row).
func listSlot(a *array.List) func(j int) (int, string) {
	return func(j int) (int, string) {
		offsets := a.Offsets()[a.Data().Offset():]
		i := sort.Search(a.Len(), func(i int) bool { return int(offsets[i+1]) > j })
		if i == a.Len() || j < int(offsets[i]) {
			return -1, "[]"
		}
		return i, fmt.Sprintf("[%d]", j-int(offsets[i]))
	}
}

// fixedListSlot is listSlot for a vector of dim elements.
func fixedListSlot(a *array.FixedSizeList, dim int) func(j int) (int, string) {
	return func(j int) (int, string) {
		i := j/dim - a.Data().Offset()
		if i < 0 || i >= a.Len() {
			return -1, "[]"
		}
		return i, fmt.Sprintf("[%d]", j%dim)
	}
}

// hasRequired reports whether t nests a slot that may not be null.
func hasRequired(t arrow.DataType) bool {
	switch t := t.(type) {
	case *arrow.ListType:
		return !t.ElemField().Nullable || hasRequired(t.Elem())
	case *arrow.FixedSizeListType:
		return !t.ElemField().Nullable || hasRequired(t.Elem())
	case *arrow.StructType:
		for _, f := range t.Fields() {
			if !f.Nullable || hasRequired(f.Type) {
				return true
			}
		}
	}
	return false
}

// toParent maps a child's slotError to the parent slot and path segment of
// the child's slot.
func toParent(err error, parent func(childSlot int) (int, string)) error {
	var se *slotError
	if !errors.As(err, &se) || se.slot < 0 {
		return err
	}
	slot, seg := parent(se.slot)
	return &slotError{slot: slot, path: seg + se.path, reason: se.reason}
}

// validateFull is array.ValidateFull, with a string array's UTF-8 checked in one
// pass over its values (validStrings) rather than value by value: the same
// verdict, and arrow-go's error when there is one.
func validateFull(a arrow.Array) error {
	if s, ok := a.(*array.String); ok {
		if err := s.Validate(); err != nil {
			return err
		}
		if validStrings(s) {
			return nil
		}
	}
	return array.ValidateFull(a)
}

// validStrings reports whether s's offsets are non-negative and non-decreasing
// and every value is valid UTF-8, checking the values' bytes as one: they are
// each valid exactly when their concatenation is and each value after the first
// starts on a character's first byte (not a continuation byte), since a valid
// sequence splits into valid parts only there. s must pass Validate (offsets
// within the buffer).
func validStrings(s *array.String) bool {
	if s.Len() == 0 {
		return true
	}
	offs := s.ValueOffsets()
	if len(offs) == 0 || offs[0] < 0 {
		return len(offs) == 0
	}
	for i := 1; i < len(offs); i++ {
		if offs[i] < offs[i-1] {
			return false
		}
	}
	data := s.ValueBytes()
	if int32(len(data)) != offs[len(offs)-1]-offs[0] || !utf8.Valid(data) {
		return false
	}
	for _, o := range offs[1 : len(offs)-1] {
		if at := o - offs[0]; at < int32(len(data)) && data[at]&0xC0 == 0x80 {
			return false
		}
	}
	return true
}

// checkValues checks the values JSON's codecs check beyond their type: the
// ids of the id column (checkID), timestamps (checkMicros), and floats, which
// JSON cannot give as NaN or infinite. Every non-null value is checked, also
// under a null parent: it is stored all the same.
func checkValues(a arrow.Array, id bool) error {
	switch a := a.(type) {
	case *array.String:
		if !id {
			return nil
		}
		if a.Len() == 0 {
			return nil
		}
		if validStrings(a) { // the common case: UTF-8 checked at once, lengths by offsets
			offs := a.ValueOffsets()
			for i := range a.Len() {
				if n := offs[i+1] - offs[i]; (n == 0 || n > MaxIDBytes) && a.IsValid(i) {
					return valueAt(checkID(a.Value(i)), i)
				}
			}
			return nil
		}
		for i := range a.Len() {
			if a.IsValid(i) {
				if err := checkID(a.Value(i)); err != nil {
					return valueAt(err, i)
				}
			}
		}
	case *array.Float32:
		for i, v := range a.Float32Values() {
			if a.IsValid(i) && (math.IsNaN(float64(v)) || math.IsInf(float64(v), 0)) {
				return &slotError{slot: i, reason: fmt.Sprintf("%v is not a number JSON can hold (it would read back as null)", v)}
			}
		}
	case *array.Float64:
		for i, v := range a.Float64Values() {
			if a.IsValid(i) && (math.IsNaN(v) || math.IsInf(v, 0)) {
				return &slotError{slot: i, reason: fmt.Sprintf("%v is not a number JSON can hold (it would read back as null)", v)}
			}
		}
	case *array.Timestamp:
		for i, v := range a.TimestampValues() {
			if a.IsValid(i) {
				if err := checkMicros(int64(v)); err != nil {
					return valueAt(err, i)
				}
			}
		}
	case *array.List:
		if err := checkValues(a.ListValues(), false); err != nil {
			return toParent(err, listSlot(a))
		}
	case *array.FixedSizeList:
		dim := int(a.DataType().(*arrow.FixedSizeListType).Len())
		if err := checkValues(a.ListValues(), false); err != nil {
			return toParent(err, fixedListSlot(a, dim))
		}
	case *array.Struct:
		t := a.DataType().(*arrow.StructType)
		for j, f := range t.Fields() {
			if err := checkValues(a.Field(j), false); err != nil {
				return toParent(err, func(i int) (int, string) { return i, "." + f.Name })
			}
		}
	}
	return nil
}

// valueAt turns a valueError of the shared checks into a slotError at slot.
func valueAt(err error, slot int) error {
	var ve *valueError
	if errors.As(err, &ve) {
		return &slotError{slot: slot, path: ve.path, reason: ve.reason}
	}
	return &slotError{slot: slot, reason: err.Error()}
}

// fillStrings returns col (nil: absent) with each null at row i replaced by
// value(i), when it gives one. col is released if replaced.
func fillStrings(mem memory.Allocator, col arrow.Array, n int, value func(i int) (string, bool)) arrow.Array {
	if col != nil && col.NullN() == 0 {
		return col
	}
	s, _ := col.(*array.String)
	b := array.NewStringBuilder(mem)
	defer b.Release()
	b.Reserve(n)
	for i := range n {
		if s != nil && s.IsValid(i) {
			b.Append(s.Value(i))
		} else if v, ok := value(i); ok {
			b.Append(v)
		} else {
			b.AppendNull()
		}
	}
	if col != nil {
		col.Release()
	}
	return b.NewArray()
}

// fillInt32s returns col (nil: absent) with each null replaced by def.
func fillInt32s(mem memory.Allocator, col arrow.Array, n int, def int32) arrow.Array {
	if col != nil && col.NullN() == 0 {
		return col
	}
	b := array.NewInt32Builder(mem)
	defer b.Release()
	b.Reserve(n)
	v, _ := col.(*array.Int32)
	for i := range n {
		if v != nil && v.IsValid(i) {
			b.Append(v.Value(i))
		} else {
			b.Append(def)
		}
	}
	if col != nil {
		col.Release()
	}
	return b.NewArray()
}

// fillTimestamps returns col (nil: absent) with each null replaced by def.
func fillTimestamps(mem memory.Allocator, col arrow.Array, n int, def arrow.Timestamp) arrow.Array {
	if col != nil && col.NullN() == 0 {
		return col
	}
	b := array.NewTimestampBuilder(mem, timestampType)
	defer b.Release()
	b.Reserve(n)
	v, _ := col.(*array.Timestamp)
	for i := range n {
		if v != nil && v.IsValid(i) {
			b.Append(v.Value(i))
		} else {
			b.Append(def)
		}
	}
	if col != nil {
		col.Release()
	}
	return b.NewArray()
}
