package rowfilter

import (
	"errors"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"vitess.io/vitess/go/vt/sqlparser"
)

// Bounds of what Compile accepts.
const (
	// MaxBytes bounds the predicate's text: long enough for an IN list of a few
	// thousand ids, short enough that parsing it costs nothing noticeable.
	MaxBytes = 64 << 10
	// MaxDepth bounds the nesting of the compiled expression, and so the
	// recursion of compiling and evaluating it.
	MaxDepth = 64
)

// wrapPrefix turns a predicate into a statement the parser accepts. Parse error
// positions are reported relative to the predicate, so its length is subtracted.
const wrapPrefix = "select * from t where "

// Filter is a compiled predicate. The zero value is not usable; see Compile.
type Filter struct {
	text string
	cols []column // the columns the predicate reads, in first-use order
	root node
}

// column is a schema column the predicate reads.
type column struct {
	name string
	cls  class
	typ  arrow.DataType
}

// class is what a value is, as far as comparisons go.
type class uint8

const (
	clNull      class = iota // the NULL literal: meets every class
	clBool                   // bool
	clInt                    // int32, int64
	clFloat                  // float32, float64
	clString                 // string, large string
	clTimestamp              // timestamp (µs)
	clOther                  // binary, vector, list: IS [NOT] NULL only
)

func (c class) String() string {
	return [...]string{"null", "bool", "integer", "float", "string", "timestamp", "other"}[c]
}

// classOf maps an Arrow type of a generic schema onto a class.
func classOf(t arrow.DataType) class {
	switch t.ID() {
	case arrow.BOOL:
		return clBool
	case arrow.INT32, arrow.INT64:
		return clInt
	case arrow.FLOAT32, arrow.FLOAT64:
		return clFloat
	case arrow.STRING, arrow.LARGE_STRING:
		return clString
	case arrow.TIMESTAMP:
		if t.(*arrow.TimestampType).Unit == arrow.Microsecond {
			return clTimestamp
		}
	}
	return clOther
}

// Compile parses predicate and checks it against schema (the store's columns;
// hidden "_" columns are never visible). Errors are *Error (errors.Is ErrInvalid).
func Compile(predicate string, schema *arrow.Schema) (*Filter, error) {
	if len(predicate) > MaxBytes {
		return nil, errorf(ErrTooComplex, "", "predicate is %d bytes, at most %d", len(predicate), MaxBytes)
	}
	if strings.TrimSpace(predicate) == "" {
		return nil, errorf(ErrSyntax, "", "predicate is empty")
	}
	where, err := parse(predicate)
	if err != nil {
		return nil, err
	}
	c := &compiler{schema: schema, index: map[string]int{}}
	root, err := c.predicate(where, 0)
	if err != nil {
		return nil, err
	}
	return &Filter{text: predicate, cols: c.cols, root: root}, nil
}

// String returns the predicate as it was given.
func (f *Filter) String() string { return f.text }

// Columns returns the names of the columns the predicate reads.
func (f *Filter) Columns() []string {
	out := make([]string, len(f.cols))
	for i, c := range f.cols {
		out[i] = c.name
	}
	return out
}

var parsePosition = regexp.MustCompile(`at position (\d+)`)

// parse returns the expression after WHERE, refusing anything but a plain
// predicate.
func parse(predicate string) (sqlparser.Expr, error) {
	p, err := sqlparser.New(sqlparser.Options{})
	if err != nil {
		return nil, err // a constant configuration: cannot fail
	}
	stmt, err := p.Parse(wrapPrefix + predicate)
	if err != nil {
		if errors.Is(err, sqlparser.ErrMultipleStatements) || strings.Contains(err.Error(), "single statement") {
			return nil, errorf(ErrUnsupported, "", "more than one statement")
		}
		msg := err.Error()
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:] // vterrors prefix their message with a code line
		}
		msg = parsePosition.ReplaceAllStringFunc(msg, func(m string) string {
			n, _ := strconv.Atoi(parsePosition.FindStringSubmatch(m)[1])
			return "at position " + strconv.Itoa(max(n-len(wrapPrefix), 0))
		})
		return nil, errorf(ErrSyntax, "", "%s", msg)
	}
	sel, ok := stmt.(*sqlparser.Select)
	if !ok || sel.Where == nil {
		return nil, errorf(ErrUnsupported, "", "not a plain predicate: %s", sqlparser.String(stmt))
	}
	// Anything the predicate added beyond WHERE (ORDER BY, LIMIT, GROUP BY,
	// locking clauses, ...) changes how the statement prints.
	if want := wrapPrefix + sqlparser.String(sel.Where.Expr); sqlparser.String(stmt) != want {
		return nil, errorf(ErrUnsupported, "", "not a plain predicate: only an expression may follow WHERE")
	}
	return sel.Where.Expr, nil
}

type compiler struct {
	schema *arrow.Schema
	cols   []column
	index  map[string]int // column name -> index in cols
}

// predicate compiles e as something true, false or unknown.
func (c *compiler) predicate(e sqlparser.Expr, depth int) (node, error) {
	if depth > MaxDepth {
		return nil, errorf(ErrTooComplex, "", "nested deeper than %d", MaxDepth)
	}
	depth++
	switch e := e.(type) {
	case *sqlparser.AndExpr:
		l, r, err := c.pair(e.Left, e.Right, depth)
		return andNode{l, r}, err
	case *sqlparser.OrExpr:
		l, r, err := c.pair(e.Left, e.Right, depth)
		return orNode{l, r}, err
	case *sqlparser.XorExpr:
		l, r, err := c.pair(e.Left, e.Right, depth)
		return xorNode{l, r}, err
	case *sqlparser.NotExpr:
		n, err := c.predicate(e.Expr, depth)
		return notNode{n}, err
	case *sqlparser.UnaryExpr:
		if e.Operator == sqlparser.BangOp {
			n, err := c.predicate(e.Expr, depth)
			return notNode{n}, err
		}
	case sqlparser.BoolVal:
		return constNode{fromBool(bool(e))}, nil
	case *sqlparser.NullVal:
		return constNode{unknown}, nil
	case *sqlparser.ColName:
		s, err := c.column(e)
		if err != nil {
			return nil, err
		}
		if s.cls != clBool {
			return nil, c.typeError(s, "is not a predicate by itself: compare it with a value")
		}
		return boolColNode{s.col}, nil
	case *sqlparser.IsExpr:
		return c.is(e, depth)
	case *sqlparser.BetweenExpr:
		return c.between(e)
	case *sqlparser.ComparisonExpr:
		return c.comparison(e)
	case *sqlparser.Literal:
		return nil, errorf(ErrType, "", "the constant %s is not a predicate", sqlparser.String(e))
	}
	return nil, unsupported(e)
}

func (c *compiler) pair(l, r sqlparser.Expr, depth int) (node, node, error) {
	ln, err := c.predicate(l, depth)
	if err != nil {
		return nil, nil, err
	}
	rn, err := c.predicate(r, depth)
	return ln, rn, err
}

func unsupported(e sqlparser.Expr) *Error {
	text := sqlparser.String(e)
	if len(text) > 80 {
		text = text[:80] + "..."
	}
	what := "expression"
	switch e.(type) {
	case *sqlparser.Subquery, *sqlparser.ExistsExpr:
		what = "subquery"
	case *sqlparser.FuncExpr:
		what = "function"
	case *sqlparser.BinaryExpr:
		what = "arithmetic"
	}
	return errorf(ErrUnsupported, "", "unsupported %s %s (supported: comparisons, AND/OR/XOR/NOT, IN, BETWEEN, IS [NOT] NULL/TRUE/FALSE, LIKE, constants and columns)", what, text)
}

// scalar is one side of a comparison: a column (col >= 0) or a constant.
type scalar struct {
	col   int
	cls   class
	f32   bool   // a float32 column
	k     value  // the constant, when col < 0
	text  string // the constant as written, for messages
	isStr bool   // a string constant (it may still become a timestamp)
	isTS  bool   // a TIMESTAMP/DATE literal
}

// value is a row's or a constant's value; which field holds it depends on the
// class (int: i; timestamp: i, µs; bool: i, 0 or 1; float: f; string: s).
type value struct {
	null bool
	i    int64
	f    float64
	s    string
}

// column resolves a column reference.
func (c *compiler) column(e *sqlparser.ColName) (scalar, error) {
	name := e.Name.String()
	if !e.Qualifier.IsEmpty() {
		return scalar{}, errorf(ErrUnsupported, name, "qualified column %s: name the column alone", sqlparser.String(e))
	}
	if i, ok := c.index[name]; ok {
		return c.scalarOf(i), nil
	}
	idx := -1
	if !strings.HasPrefix(name, "_") {
		if ix := c.schema.FieldIndices(name); len(ix) == 1 {
			idx = ix[0]
		} else {
			// No exact match: the one column equal ignoring case, as an
			// unquoted identifier reads in most SQL dialects.
			for i, f := range c.schema.Fields() {
				if strings.EqualFold(f.Name, name) && !strings.HasPrefix(f.Name, "_") {
					if idx >= 0 {
						return scalar{}, errorf(ErrUnknownColumn, name, "column %q is ambiguous: several columns match it ignoring case; quote the exact name with backticks", name)
					}
					idx = i
				}
			}
		}
	}
	if idx < 0 {
		return scalar{}, errorf(ErrUnknownColumn, name, "no column %q in this store's schema", name)
	}
	f := c.schema.Field(idx)
	if i, ok := c.index[f.Name]; ok {
		c.index[name] = i
		return c.scalarOf(i), nil
	}
	c.cols = append(c.cols, column{name: f.Name, cls: classOf(f.Type), typ: f.Type})
	c.index[f.Name] = len(c.cols) - 1
	c.index[name] = len(c.cols) - 1
	return c.scalarOf(len(c.cols) - 1), nil
}

func (c *compiler) scalarOf(i int) scalar {
	col := c.cols[i]
	return scalar{col: i, cls: col.cls, f32: col.typ.ID() == arrow.FLOAT32}
}

// scalar compiles one side of a comparison: a column or a constant.
func (c *compiler) scalar(e sqlparser.Expr) (scalar, error) {
	switch e := e.(type) {
	case *sqlparser.ColName:
		return c.column(e)
	case *sqlparser.NullVal:
		return scalar{col: -1, cls: clNull, k: value{null: true}, text: "NULL"}, nil
	case sqlparser.BoolVal:
		k := value{}
		if e {
			k.i = 1
		}
		return scalar{col: -1, cls: clBool, k: k, text: sqlparser.String(e)}, nil
	case *sqlparser.UnaryExpr:
		if e.Operator == sqlparser.UMinusOp || e.Operator == sqlparser.UPlusOp {
			lit, ok := e.Expr.(*sqlparser.Literal)
			if ok && (lit.Type == sqlparser.IntVal || lit.Type == sqlparser.FloatVal || lit.Type == sqlparser.DecimalVal) {
				text := lit.Val
				if e.Operator == sqlparser.UMinusOp {
					text = "-" + text
				}
				return number(text, lit.Type == sqlparser.IntVal)
			}
		}
	case *sqlparser.Literal:
		switch e.Type {
		case sqlparser.StrVal:
			return scalar{col: -1, cls: clString, k: value{s: e.Val}, text: sqlparser.String(e), isStr: true}, nil
		case sqlparser.IntVal:
			return number(e.Val, true)
		case sqlparser.FloatVal, sqlparser.DecimalVal:
			return number(e.Val, false)
		case sqlparser.HexNum:
			u, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(e.Val), "0x"), 16, 63)
			if err != nil {
				return scalar{}, errorf(ErrType, "", "hexadecimal %s does not fit a 64-bit integer", e.Val)
			}
			return scalar{col: -1, cls: clInt, k: value{i: int64(u)}, text: e.Val}, nil
		case sqlparser.DateVal, sqlparser.TimestampVal:
			us, err := parseTimestamp(e.Val)
			if err != nil {
				return scalar{}, errorf(ErrType, "", "%s: %v", sqlparser.String(e), err)
			}
			return scalar{col: -1, cls: clTimestamp, k: value{i: us}, text: sqlparser.String(e), isTS: true}, nil
		}
	}
	return scalar{}, unsupported(e)
}

// number parses a numeric constant; an integer too large for int64 becomes a
// float.
func number(text string, integer bool) (scalar, error) {
	if integer {
		if i, err := strconv.ParseInt(text, 10, 64); err == nil {
			return scalar{col: -1, cls: clInt, k: value{i: i}, text: text}, nil
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsInf(f, 0) {
		return scalar{}, errorf(ErrType, "", "number %s is out of range", text)
	}
	return scalar{col: -1, cls: clFloat, k: value{f: f}, text: text}, nil
}

// timestampLayouts are the texts a timestamp constant may take; those without a
// zone are UTC.
var timestampLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999", "2006-01-02"}

func parseTimestamp(text string) (int64, error) {
	for _, l := range timestampLayouts {
		if t, err := time.Parse(l, text); err == nil {
			return t.UnixMicro(), nil
		}
	}
	return 0, errors.New("not an RFC 3339 timestamp (2024-05-01T12:00:00Z, 2024-05-01 12:00:00 or 2024-05-01, UTC unless a zone is given)")
}

func (c *compiler) typeError(s scalar, reason string) *Error {
	col := c.cols[s.col]
	return errorf(ErrType, col.name, "column %q has type %s and %s", col.name, col.typ, reason)
}

// meet returns the class in which l and r compare, converting constants as
// needed (a string into a timestamp, an integer into a float, a float into
// float32 precision), or a type error naming the column.
func (c *compiler) meet(l, r *scalar) (class, error) {
	// Put the column (if any) on the left for the checks below; the sides
	// keep their places in the comparison itself.
	a, b := l, r
	if a.col < 0 && b.col >= 0 {
		a, b = b, a
	}
	if a.col >= 0 && a.cls == clOther {
		return 0, c.typeError(*a, "can only be tested with IS [NOT] NULL")
	}
	if b.col >= 0 && b.cls == clOther {
		return 0, c.typeError(*b, "can only be tested with IS [NOT] NULL")
	}
	if a.cls == clNull || b.cls == clNull {
		return clNull, nil
	}
	if a.col < 0 && b.col < 0 && a.isStr && b.isStr {
		return 0, errorf(ErrType, "", "%s compared with %s compares two strings, not a column: quote column names with backticks (`name`), not double quotes", a.text, b.text)
	}
	switch {
	case a.cls == b.cls:
		if a.cls == clFloat {
			roundF32(a, b)
		}
		return a.cls, nil
	case isNumber(a.cls) && isNumber(b.cls):
		for _, s := range []*scalar{a, b} {
			if s.col < 0 && s.cls == clInt {
				s.k.f, s.cls = float64(s.k.i), clFloat
			}
		}
		roundF32(a, b)
		return clFloat, nil
	case a.cls == clTimestamp && b.col < 0 && b.isStr:
		us, err := parseTimestamp(b.k.s)
		if err != nil {
			return 0, c.mismatch(*a, *b, err.Error())
		}
		b.k, b.cls = value{i: us}, clTimestamp
		return clTimestamp, nil
	case a.cls == clTimestamp && b.col < 0 && b.cls == clInt:
		b.cls = clTimestamp // integer microseconds, as the codec reads them
		return clTimestamp, nil
	}
	return 0, c.mismatch(*a, *b, "")
}

func (c *compiler) mismatch(a, b scalar, detail string) *Error {
	what := b.text
	if b.col >= 0 {
		col := c.cols[b.col]
		what = "column " + strconv.Quote(col.name) + " of type " + col.typ.String()
	} else {
		what = b.cls.String() + " " + what
	}
	if a.col < 0 {
		return errorf(ErrType, "", "cannot compare %s %s with %s", a.cls, a.text, what)
	}
	msg := "cannot be compared with " + what
	if detail != "" {
		msg += ": " + detail
	}
	return c.typeError(a, msg)
}

func isNumber(c class) bool { return c == clInt || c == clFloat }

// roundF32 rounds the float constant compared with a float32 column to float32,
// so that the comparison is the one the client meant for the value it stored.
func roundF32(a, b *scalar) {
	for _, pair := range [][2]*scalar{{a, b}, {b, a}} {
		if col, k := pair[0], pair[1]; col.col >= 0 && col.f32 && k.col < 0 && k.cls == clFloat {
			k.k.f = float64(float32(k.k.f))
		}
	}
}

func (c *compiler) comparison(e *sqlparser.ComparisonExpr) (node, error) {
	if e.Modifier != 0 {
		return nil, unsupported(e)
	}
	switch e.Operator {
	case sqlparser.InOp, sqlparser.NotInOp:
		return c.in(e)
	case sqlparser.LikeOp, sqlparser.NotLikeOp:
		return c.like(e)
	}
	var op cmpOp
	switch e.Operator {
	case sqlparser.EqualOp:
		op = opEq
	case sqlparser.NotEqualOp:
		op = opNe
	case sqlparser.LessThanOp:
		op = opLt
	case sqlparser.LessEqualOp:
		op = opLe
	case sqlparser.GreaterThanOp:
		op = opGt
	case sqlparser.GreaterEqualOp:
		op = opGe
	case sqlparser.NullSafeEqualOp:
		op = opNullSafeEq
	default:
		return nil, unsupported(e)
	}
	l, err := c.scalar(e.Left)
	if err != nil {
		return nil, err
	}
	r, err := c.scalar(e.Right)
	if err != nil {
		return nil, err
	}
	cls, err := c.meet(&l, &r)
	if err != nil {
		return nil, err
	}
	if cls == clNull && op != opNullSafeEq {
		return constNode{unknown}, nil
	}
	return &cmpNode{op: op, cls: cls, l: l, r: r}, nil
}

func (c *compiler) between(e *sqlparser.BetweenExpr) (node, error) {
	x, err := c.scalar(e.Left)
	if err != nil {
		return nil, err
	}
	var sides [2]node
	for i, bound := range []sqlparser.Expr{e.From, e.To} {
		b, err := c.scalar(bound)
		if err != nil {
			return nil, err
		}
		x := x // meet may convert a constant x differently for each bound
		cls, err := c.meet(&x, &b)
		if err != nil {
			return nil, err
		}
		op := opGe
		if i == 1 {
			op = opLe
		}
		if cls == clNull {
			sides[i] = constNode{unknown}
		} else {
			sides[i] = &cmpNode{op: op, cls: cls, l: x, r: b}
		}
	}
	var n node = andNode{sides[0], sides[1]}
	if !e.IsBetween {
		n = notNode{n}
	}
	return n, nil
}

func (c *compiler) is(e *sqlparser.IsExpr, depth int) (node, error) {
	switch e.Right {
	case sqlparser.IsNullOp, sqlparser.IsNotNullOp:
		var n node
		if col, ok := e.Left.(*sqlparser.ColName); ok {
			s, err := c.column(col)
			if err != nil {
				return nil, err
			}
			n = isNullNode{s.col}
		} else {
			// A constant is null or not; anything else must be a predicate
			// (whose UNKNOWN is its null).
			s, err := c.scalar(e.Left)
			if err == nil {
				n = constNode{fromBool(s.cls == clNull)}
			} else if p, perr := c.predicate(e.Left, depth); perr == nil {
				n = isNode{p, unknown}
			} else {
				return nil, err
			}
		}
		if e.Right == sqlparser.IsNotNullOp {
			n = notNode{n}
		}
		return n, nil
	}
	p, err := c.predicate(e.Left, depth)
	if err != nil {
		return nil, err
	}
	switch e.Right {
	case sqlparser.IsTrueOp:
		return isNode{p, isTrue}, nil
	case sqlparser.IsNotTrueOp:
		return notNode{isNode{p, isTrue}}, nil
	case sqlparser.IsFalseOp:
		return isNode{p, isFalse}, nil
	case sqlparser.IsNotFalseOp:
		return notNode{isNode{p, isFalse}}, nil
	}
	return nil, unsupported(e)
}

func (c *compiler) in(e *sqlparser.ComparisonExpr) (node, error) {
	col, ok := e.Left.(*sqlparser.ColName)
	if !ok {
		return nil, errorf(ErrUnsupported, "", "IN needs a column on its left, got %s", sqlparser.String(e.Left))
	}
	x, err := c.column(col)
	if err != nil {
		return nil, err
	}
	tuple, ok := e.Right.(sqlparser.ValTuple)
	if !ok {
		return nil, unsupported(e.Right)
	}
	items := make([]scalar, 0, len(tuple))
	cls := x.cls
	for _, it := range tuple {
		s, err := c.scalar(it)
		if err != nil {
			return nil, err
		}
		if s.col >= 0 {
			return nil, errorf(ErrUnsupported, c.cols[s.col].name, "IN lists take constants, not columns")
		}
		xc := x
		got, err := c.meet(&xc, &s)
		if err != nil {
			return nil, err
		}
		if got == clFloat {
			cls = clFloat // an integer column meets a float item: compare as floats
		}
		items = append(items, s)
	}
	n := &inNode{col: x.col, cls: cls}
	for _, s := range items {
		switch {
		case s.cls == clNull:
			n.hasNull = true
		case cls == clString:
			n.addString(s.k.s)
		case cls == clFloat:
			f := s.k.f
			if s.cls == clInt {
				f = float64(s.k.i)
			}
			if x.f32 {
				f = float64(float32(f))
			}
			n.addFloat(f)
		default:
			n.addInt(s.k.i)
		}
	}
	if e.Operator == sqlparser.NotInOp {
		return notNode{n}, nil
	}
	return n, nil
}

func (c *compiler) like(e *sqlparser.ComparisonExpr) (node, error) {
	col, ok := e.Left.(*sqlparser.ColName)
	if !ok {
		return nil, errorf(ErrUnsupported, "", "LIKE needs a column on its left, got %s", sqlparser.String(e.Left))
	}
	x, err := c.column(col)
	if err != nil {
		return nil, err
	}
	if x.cls != clString {
		return nil, c.typeError(x, "LIKE applies to string columns only")
	}
	p, err := c.scalar(e.Right)
	if err != nil {
		return nil, err
	}
	if p.col >= 0 || (p.cls != clString && p.cls != clNull) {
		return nil, errorf(ErrType, x.name(c), "LIKE on %q needs a string constant as its pattern, got %s", c.cols[x.col].name, sqlparser.String(e.Right))
	}
	escape := '\\'
	if e.Escape != nil {
		lit, ok := e.Escape.(*sqlparser.Literal)
		if !ok || lit.Type != sqlparser.StrVal || len([]rune(lit.Val)) > 1 {
			return nil, errorf(ErrSyntax, "", "ESCAPE takes one character in quotes, got %s", sqlparser.String(e.Escape))
		}
		escape = -1 // ESCAPE '' turns escaping off
		for _, r := range lit.Val {
			escape = r
		}
	}
	if p.cls == clNull {
		return constNode{unknown}, nil
	}
	m, err := compileLike(p.k.s, escape)
	if err != nil {
		return nil, err
	}
	var n node = likeNode{col: x.col, m: m}
	if e.Operator == sqlparser.NotLikeOp {
		n = notNode{n}
	}
	return n, nil
}

func (s scalar) name(c *compiler) string {
	if s.col < 0 {
		return ""
	}
	return c.cols[s.col].name
}
