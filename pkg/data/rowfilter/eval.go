package rowfilter

import (
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// ErrBatch is returned by Mask for a batch that lacks a column the predicate
// reads, or has it with another type than the schema it was compiled against:
// a fault of the caller or of storage, not of the predicate.
var ErrBatch = errors.New("rowfilter: batch does not match the compiled schema")

// tri is a truth value of SQL's three-valued logic.
type tri uint8

const (
	isFalse tri = iota
	isTrue
	unknown
)

func fromBool(b bool) tri {
	if b {
		return isTrue
	}
	return isFalse
}

// node is a compiled predicate.
type node interface {
	eval(b batch, row int) tri
}

// batch is a record batch's arrays for the filter's columns, in Filter.cols order.
type batch []bound

// bound is one column of a batch, read through the typed array of its class.
type bound struct {
	arr  arrow.Array
	i32  []int32
	i64  []int64
	f32  []float32
	f64  []float64
	ts   []arrow.Timestamp
	str  *array.String
	lstr *array.LargeString
	bl   *array.Boolean
}

// get returns row's value in the column's class (see value).
func (b *bound) get(row int) value {
	if b.arr.IsNull(row) {
		return value{null: true}
	}
	switch {
	case b.str != nil:
		return value{s: b.str.Value(row)}
	case b.lstr != nil:
		return value{s: b.lstr.Value(row)}
	case b.i64 != nil:
		return value{i: b.i64[row]}
	case b.i32 != nil:
		return value{i: int64(b.i32[row])}
	case b.f64 != nil:
		return value{f: b.f64[row]}
	case b.f32 != nil:
		return value{f: float64(b.f32[row])}
	case b.ts != nil:
		return value{i: int64(b.ts[row])}
	case b.bl != nil:
		if b.bl.Value(row) {
			return value{i: 1}
		}
	}
	return value{}
}

// Mask evaluates the predicate on every row of rec and reports, per row,
// whether it is TRUE (FALSE and UNKNOWN rows are left out). rec may carry
// columns the predicate does not read, hidden ones included; a column it reads
// must be there with the type it was compiled against (ErrBatch otherwise).
func (f *Filter) Mask(rec arrow.RecordBatch) ([]bool, error) {
	b, err := f.bind(rec)
	if err != nil {
		return nil, err
	}
	mask := make([]bool, rec.NumRows())
	for row := range mask {
		mask[row] = f.root.eval(b, row) == isTrue
	}
	return mask, nil
}

func (f *Filter) bind(rec arrow.RecordBatch) (batch, error) {
	b := make(batch, len(f.cols))
	for i, c := range f.cols {
		idx := rec.Schema().FieldIndices(c.name)
		if len(idx) != 1 {
			return nil, fmt.Errorf("%w: %d columns named %q", ErrBatch, len(idx), c.name)
		}
		a := rec.Column(idx[0])
		if !arrow.TypeEqual(a.DataType(), c.typ) {
			return nil, fmt.Errorf("%w: column %q has type %s, compiled for %s", ErrBatch, c.name, a.DataType(), c.typ)
		}
		b[i].arr = a
		switch a := a.(type) {
		case *array.String:
			b[i].str = a
		case *array.LargeString:
			b[i].lstr = a
		case *array.Int32:
			b[i].i32 = a.Int32Values()
		case *array.Int64:
			b[i].i64 = a.Int64Values()
		case *array.Float32:
			b[i].f32 = a.Float32Values()
		case *array.Float64:
			b[i].f64 = a.Float64Values()
		case *array.Timestamp:
			b[i].ts = a.TimestampValues()
		case *array.Boolean:
			b[i].bl = a
		}
	}
	return b, nil
}

type constNode struct{ v tri }

func (n constNode) eval(batch, int) tri { return n.v }

type andNode struct{ l, r node }

func (n andNode) eval(b batch, row int) tri {
	l := n.l.eval(b, row)
	if l == isFalse {
		return isFalse
	}
	r := n.r.eval(b, row)
	switch {
	case r == isFalse:
		return isFalse
	case l == unknown || r == unknown:
		return unknown
	}
	return isTrue
}

type orNode struct{ l, r node }

func (n orNode) eval(b batch, row int) tri {
	l := n.l.eval(b, row)
	if l == isTrue {
		return isTrue
	}
	r := n.r.eval(b, row)
	switch {
	case r == isTrue:
		return isTrue
	case l == unknown || r == unknown:
		return unknown
	}
	return isFalse
}

type xorNode struct{ l, r node }

func (n xorNode) eval(b batch, row int) tri {
	l, r := n.l.eval(b, row), n.r.eval(b, row)
	if l == unknown || r == unknown {
		return unknown
	}
	return fromBool(l != r)
}

type notNode struct{ n node }

func (n notNode) eval(b batch, row int) tri {
	switch n.n.eval(b, row) {
	case isTrue:
		return isFalse
	case isFalse:
		return isTrue
	}
	return unknown
}

// isNode is "p IS TRUE / IS FALSE / IS UNKNOWN": never unknown itself.
type isNode struct {
	n    node
	want tri
}

func (n isNode) eval(b batch, row int) tri { return fromBool(n.n.eval(b, row) == n.want) }

type isNullNode struct{ col int }

func (n isNullNode) eval(b batch, row int) tri { return fromBool(b[n.col].arr.IsNull(row)) }

type boolColNode struct{ col int }

func (n boolColNode) eval(b batch, row int) tri {
	c := &b[n.col]
	if c.arr.IsNull(row) {
		return unknown
	}
	return fromBool(c.bl.Value(row))
}

type cmpOp uint8

const (
	opEq cmpOp = iota
	opNe
	opLt
	opLe
	opGt
	opGe
	opNullSafeEq // <=>: NULL <=> NULL is TRUE, NULL <=> x FALSE
)

// cmpNode compares two scalars of one class.
type cmpNode struct {
	op   cmpOp
	cls  class
	l, r scalar
}

func (n *cmpNode) side(b batch, s *scalar, row int) value {
	if s.col < 0 {
		return s.k
	}
	v := b[s.col].get(row)
	if n.cls == clFloat && s.cls == clInt {
		v.f = float64(v.i) // an integer column meeting a float
	}
	return v
}

func (n *cmpNode) eval(b batch, row int) tri {
	l, r := n.side(b, &n.l, row), n.side(b, &n.r, row)
	if l.null || r.null {
		if n.op == opNullSafeEq {
			return fromBool(l.null && r.null)
		}
		return unknown
	}
	var c int
	switch n.cls {
	case clString:
		c = compare(l.s, r.s)
	case clFloat:
		c = compare(l.f, r.f)
		if l.f != l.f || r.f != r.f { // NaN: equal to nothing, ordered with nothing
			return fromBool(n.op == opNe)
		}
	default: // int, timestamp, bool
		c = compare(l.i, r.i)
	}
	switch n.op {
	case opEq, opNullSafeEq:
		return fromBool(c == 0)
	case opNe:
		return fromBool(c != 0)
	case opLt:
		return fromBool(c < 0)
	case opLe:
		return fromBool(c <= 0)
	case opGt:
		return fromBool(c > 0)
	}
	return fromBool(c >= 0)
}

func compare[T int64 | float64 | string](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// inNode is "col IN (constants)": TRUE if an element equals the value, else
// UNKNOWN if the value or an element is NULL, else FALSE.
type inNode struct {
	col     int
	cls     class
	hasNull bool
	strs    map[string]struct{}
	ints    map[int64]struct{}
	floats  map[float64]struct{}
}

func (n *inNode) addString(s string) {
	if n.strs == nil {
		n.strs = map[string]struct{}{}
	}
	n.strs[s] = struct{}{}
}

func (n *inNode) addInt(i int64) {
	if n.ints == nil {
		n.ints = map[int64]struct{}{}
	}
	n.ints[i] = struct{}{}
}

func (n *inNode) addFloat(f float64) {
	if n.floats == nil {
		n.floats = map[float64]struct{}{}
	}
	n.floats[f] = struct{}{}
}

func (n *inNode) eval(b batch, row int) tri {
	c := &b[n.col]
	v := c.get(row)
	if v.null {
		return unknown
	}
	var found bool
	switch n.cls {
	case clString:
		_, found = n.strs[v.s]
	case clFloat:
		if c.f32 == nil && c.f64 == nil {
			v.f = float64(v.i) // an integer column against float elements
		}
		_, found = n.floats[v.f]
	default:
		_, found = n.ints[v.i]
	}
	switch {
	case found:
		return isTrue
	case n.hasNull:
		return unknown
	}
	return isFalse
}

type likeNode struct {
	col int
	m   *likeMatcher
}

func (n likeNode) eval(b batch, row int) tri {
	v := b[n.col].get(row)
	if v.null {
		return unknown
	}
	return fromBool(n.m.match(v.s))
}
