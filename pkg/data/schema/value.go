package schema

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// valueCodec converts one Arrow type to and from JSON. It is the single place
// where a type's JSON form is defined: decode and encode sit side by side so a
// value that decodes encodes back to JSON that decodes to the same value.
type valueCodec interface {
	// decode appends the non-null JSON value raw (valid JSON, trimmed) to b.
	decode(b array.Builder, raw []byte) error
	// encode appends the JSON form of a's non-null element i to dst.
	encode(dst []byte, a arrow.Array, i int) []byte
}

// slot is a place that holds a value: a column, a list element, a struct field.
// It owns null handling so the codecs only see values.
type slot struct {
	codec    valueCodec
	nullable bool
}

func (s slot) decode(b array.Builder, raw []byte) error {
	if isNull(raw) {
		if !s.nullable {
			return invalidValue("null is not allowed")
		}
		b.AppendNull()
		return nil
	}
	return s.codec.decode(b, raw)
}

func (s slot) encode(dst []byte, a arrow.Array, i int) []byte {
	if a.IsNull(i) {
		return append(dst, "null"...)
	}
	return s.codec.encode(dst, a, i)
}

// maxNesting bounds how deeply list and struct types may nest.
const maxNesting = 16

// codecFor returns the codec for t, or an error naming the unsupported type.
func codecFor(t arrow.DataType, depth int) (valueCodec, error) {
	if depth > maxNesting {
		return nil, fmt.Errorf("type nests deeper than %d levels", maxNesting)
	}
	switch t := t.(type) {
	case *arrow.StringType:
		return stringCodec{}, nil
	case *arrow.LargeStringType:
		return stringCodec{large: true}, nil
	case *arrow.Int8Type:
		return intCodec{bits: 8}, nil
	case *arrow.Int32Type:
		return intCodec{bits: 32}, nil
	case *arrow.Int64Type:
		return intCodec{bits: 64}, nil
	case *arrow.Float32Type:
		return floatCodec{bits: 32}, nil
	case *arrow.Float64Type:
		return floatCodec{bits: 64}, nil
	case *arrow.BooleanType:
		return boolCodec{}, nil
	case *arrow.BinaryType:
		return binaryCodec{}, nil
	case *arrow.TimestampType:
		if t.Unit != arrow.Microsecond || t.TimeZone != "UTC" {
			return nil, fmt.Errorf("unsupported type %s (timestamps are microseconds in UTC)", t)
		}
		return timestampCodec{}, nil
	case *arrow.ListType:
		item, err := codecFor(t.Elem(), depth+1)
		if err != nil {
			return nil, err
		}
		return listCodec{item: slot{item, t.ElemField().Nullable}}, nil
	case *arrow.FixedSizeListType:
		item, err := codecFor(t.Elem(), depth+1)
		if err != nil {
			return nil, err
		}
		return fixedListCodec{dim: int(t.Len()), item: slot{item, t.ElemField().Nullable}}, nil
	case *arrow.StructType:
		c := structCodec{fields: make([]slot, t.NumFields()), names: make([]string, t.NumFields()), index: map[string]int{}}
		for i, f := range t.Fields() {
			fc, err := codecFor(f.Type, depth+1)
			if err != nil {
				return nil, err
			}
			if _, dup := c.index[f.Name]; dup {
				return nil, fmt.Errorf("struct type %s has field %q twice", t, f.Name)
			}
			c.fields[i], c.names[i], c.index[f.Name] = slot{fc, f.Nullable}, f.Name, i
		}
		return c, nil
	default:
		return nil, fmt.Errorf("unsupported type %s", t)
	}
}

// wrongType is the error for a JSON value of the wrong kind.
func wrongType(want string, raw []byte) error {
	return invalidValue("expected %s, got %s", want, describe(raw))
}

// stringCodec: a JSON string. nonEmpty is set for the id column; jsonText for
// columns that hold JSON text, which accept any JSON value (a string is taken as
// the text itself, anything else is stored compacted). Text that is not valid
// UTF-8 is refused, never repaired (see unquote).
type stringCodec struct {
	large, nonEmpty, jsonText bool
}

func (c stringCodec) decode(b array.Builder, raw []byte) error {
	var s string
	switch {
	case raw[0] == '"':
		var err error
		if s, err = unquote(raw); err != nil {
			return err
		}
	case c.jsonText:
		// Stored as sent (compacted), so its keys and strings are checked here: a
		// reader parsing the text would get U+FFFD for what unquote refuses.
		if err := checkText(raw); err != nil {
			var ve *valueError
			if errors.As(err, &ve) {
				ve.reason = "JSON text: " + ve.reason
			}
			return err
		}
		s = string(compact(raw))
	default:
		return wrongType("a string", raw)
	}
	if c.nonEmpty {
		if err := checkID(s); err != nil {
			return err
		}
	}
	if c.large {
		b.(*array.LargeStringBuilder).Append(s)
	} else {
		b.(*array.StringBuilder).Append(s)
	}
	return nil
}

func (c stringCodec) encode(dst []byte, a arrow.Array, i int) []byte {
	var s string
	if c.large {
		s = a.(*array.LargeString).Value(i)
	} else {
		s = a.(*array.String).Value(i)
	}
	// JSON text goes out as the JSON value it holds (the reference API's
	// metadata is a JSON value). Text that is not JSON - a string a client sent
	// as plain text - goes out as that string.
	if c.jsonText && json.Valid([]byte(s)) {
		return append(dst, s...)
	}
	return appendString(dst, s)
}

// checkID is the check of an id beyond its type, whichever way it came (a JSON
// string, an Arrow utf8 value): not empty, at most MaxIDBytes, UTF-8. Text
// from JSON is UTF-8 by the time it gets here (unquote); an Arrow value need
// not be.
func checkID(s string) error {
	if s == "" {
		return invalidValue("must not be empty")
	}
	if len(s) > MaxIDBytes {
		return invalidValue("is %d bytes, at most %d", len(s), MaxIDBytes)
	}
	if !utf8.ValidString(s) {
		return badUTF8([]byte(s), 0)
	}
	return nil
}

// intCodec: a JSON number written as an integer (no fraction, no exponent) that
// fits the column's width.
type intCodec struct{ bits int }

func (c intCodec) decode(b array.Builder, raw []byte) error {
	v, err := parseInt(raw, c.bits)
	if err != nil {
		return err
	}
	switch c.bits {
	case 8:
		b.(*array.Int8Builder).Append(int8(v))
	case 32:
		b.(*array.Int32Builder).Append(int32(v))
	default:
		b.(*array.Int64Builder).Append(v)
	}
	return nil
}

func (c intCodec) encode(dst []byte, a arrow.Array, i int) []byte {
	var v int64
	switch c.bits {
	case 8:
		v = int64(a.(*array.Int8).Value(i))
	case 32:
		v = int64(a.(*array.Int32).Value(i))
	default:
		v = a.(*array.Int64).Value(i)
	}
	return strconv.AppendInt(dst, v, 10)
}

// parseInt parses the JSON number raw as an exact integer of the given width. The
// literal itself is parsed, never a float64, so every int64 is exact.
func parseInt(raw []byte, bits int) (int64, error) {
	if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return 0, wrongType("an integer", raw)
	}
	v, err := strconv.ParseInt(string(raw), 10, bits)
	if errors.Is(err, strconv.ErrRange) {
		return 0, invalidValue("integer %s is out of range for int%d", raw, bits)
	}
	if err != nil {
		return 0, wrongType("an integer", raw)
	}
	return v, nil
}

// floatCodec: any JSON number that is finite at the column's width, and not a
// nonzero number so small that it would be stored as zero. Encoding writes the
// shortest text that parses back to the same value.
type floatCodec struct{ bits int }

func (c floatCodec) decode(b array.Builder, raw []byte) error {
	if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return wrongType("a number", raw)
	}
	v, err := strconv.ParseFloat(string(raw), c.bits)
	if err != nil {
		return invalidValue("number %s is out of range for float%d", raw, c.bits)
	}
	// ParseFloat rounds an underflow to zero without an error; 1e-400 stored as 0
	// would be a different value than the client sent, just as 1e400 stored as
	// +Inf would. A zero result is rare, so the check costs nothing on the usual path.
	if v == 0 && nonzeroDigits(raw) {
		return invalidValue("number %s is too small for float%d (it would be stored as 0)", raw, c.bits)
	}
	if c.bits == 32 {
		b.(*array.Float32Builder).Append(float32(v))
	} else {
		b.(*array.Float64Builder).Append(v)
	}
	return nil
}

func (c floatCodec) encode(dst []byte, a arrow.Array, i int) []byte {
	var v float64
	if c.bits == 32 {
		v = float64(a.(*array.Float32).Value(i))
	} else {
		v = a.(*array.Float64).Value(i)
	}
	// JSON has no NaN or infinity; decoding never produces them, so they can only
	// come from a batch built elsewhere. null is the one faithful-enough answer.
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(dst, "null"...)
	}
	return strconv.AppendFloat(dst, v, 'g', -1, c.bits)
}

// nonzeroDigits reports whether the JSON number raw has a nonzero digit before its
// exponent, i.e. does not spell zero.
func nonzeroDigits(raw []byte) bool {
	for _, c := range raw {
		switch {
		case c == 'e' || c == 'E':
			return false
		case c >= '1' && c <= '9':
			return true
		}
	}
	return false
}

type boolCodec struct{}

func (boolCodec) decode(b array.Builder, raw []byte) error {
	switch string(raw) {
	case "true":
		b.(*array.BooleanBuilder).Append(true)
	case "false":
		b.(*array.BooleanBuilder).Append(false)
	default:
		return wrongType("a boolean", raw)
	}
	return nil
}

func (boolCodec) encode(dst []byte, a arrow.Array, i int) []byte {
	return strconv.AppendBool(dst, a.(*array.Boolean).Value(i))
}

// binaryCodec: standard base64 with padding (what encoding/json does for []byte
// and Python's base64.b64encode produces). With byteArrays (generic stores, see
// byteArrayBinaries) a JSON array of integers 0-255 is taken too, as the
// reference's generic codec takes it. Output is always base64.
type binaryCodec struct{ byteArrays bool }

func (c binaryCodec) decode(b array.Builder, raw []byte) error {
	switch {
	case raw[0] == '[' && c.byteArrays:
		return decodeByteArray(b.(*array.BinaryBuilder), raw)
	case raw[0] == '[':
		return wrongType("a base64 string", raw)
	case raw[0] != '"' && c.byteArrays:
		return wrongType("a base64 string or an array of bytes (integers 0-255)", raw)
	case raw[0] != '"':
		return wrongType("a base64 string", raw)
	}
	s, err := unquote(raw)
	if err != nil {
		return err
	}
	v, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return invalidValue("invalid base64: %v", err)
	}
	b.(*array.BinaryBuilder).Append(v)
	return nil
}

// decodeByteArray appends the bytes of raw, a JSON array of integers 0-255. An
// element that is not one is an error at its index ("[3]").
func decodeByteArray(b *array.BinaryBuilder, raw []byte) error {
	// Each element takes at least two bytes of text ("0,"), so this never
	// reserves more than half the value's text.
	v := make([]byte, 0, len(raw)/2)
	err := eachElement(raw, func(i int, elem []byte) error {
		n, err := strconv.ParseUint(string(elem), 10, 8)
		if err != nil {
			return atPath(invalidValue("expected a byte (an integer 0-255), got %s", describe(elem)), "["+strconv.Itoa(i)+"]")
		}
		v = append(v, byte(n))
		return nil
	})
	if err != nil {
		return err
	}
	b.Append(v)
	return nil
}

// byteArrayBinaries is the codecOption of generic stores: their binary values,
// in a column or inside its lists, take an array of bytes beside base64.
func byteArrayBinaries(_ string, c valueCodec) valueCodec {
	switch c := c.(type) {
	case binaryCodec:
		c.byteArrays = true
		return c
	case listCodec:
		c.item.codec = byteArrayBinaries("", c.item.codec)
		return c
	case fixedListCodec:
		c.item.codec = byteArrayBinaries("", c.item.codec)
		return c
	case structCodec:
		fields := make([]slot, len(c.fields))
		for i, f := range c.fields {
			f.codec = byteArrayBinaries("", f.codec)
			fields[i] = f
		}
		c.fields = fields
		return c
	}
	return c
}

func (binaryCodec) encode(dst []byte, a arrow.Array, i int) []byte {
	v := a.(*array.Binary).Value(i)
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, v)
	return append(dst, '"')
}

// Timestamps are microseconds since the Unix epoch in UTC. Input is an integer
// count of microseconds or an RFC 3339 string (any offset; digits below the
// microsecond are truncated). Output is always RFC 3339 in UTC with exactly six
// fractional digits, e.g. "2024-05-01T12:00:00.000000Z". Only years 0001-9999
// are accepted, the range RFC 3339 can write, so every stored timestamp encodes
// to a string that decodes to the same value.
const TimestampLayout = "2006-01-02T15:04:05.000000Z07:00"

var (
	minTimestamp = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	maxTimestamp = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC).UnixMicro()
)

// checkMicros refuses a timestamp outside years 0001-9999, whichever way it
// came (JSON, Arrow).
func checkMicros(us int64) error {
	if us < minTimestamp || us > maxTimestamp {
		return invalidValue("timestamp %d µs is outside years 0001-9999", us)
	}
	return nil
}

type timestampCodec struct{}

func (timestampCodec) decode(b array.Builder, raw []byte) error {
	var us int64
	switch {
	case raw[0] == '"':
		s, err := unquote(raw)
		if err != nil {
			return err
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return invalidValue("invalid RFC 3339 timestamp %q", s)
		}
		if y := t.UTC().Year(); y < 1 || y > 9999 {
			return invalidValue("timestamp %q is outside years 0001-9999 UTC", s)
		}
		us = t.UnixMicro()
	case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
		v, err := parseInt(raw, 64)
		if err != nil {
			return invalidValue("expected microseconds since the epoch as an integer or an RFC 3339 string, got %s", describe(raw))
		}
		us = v
	default:
		return wrongType("an RFC 3339 string or integer microseconds", raw)
	}
	if err := checkMicros(us); err != nil {
		return err
	}
	b.(*array.TimestampBuilder).Append(arrow.Timestamp(us))
	return nil
}

func (timestampCodec) encode(dst []byte, a arrow.Array, i int) []byte {
	t := time.UnixMicro(int64(a.(*array.Timestamp).Value(i))).UTC()
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, TimestampLayout)
	return append(dst, '"')
}

// listCodec: a JSON array of item values.
type listCodec struct{ item slot }

func (c listCodec) decode(b array.Builder, raw []byte) error {
	if raw[0] != '[' {
		return wrongType("an array", raw)
	}
	lb := b.(*array.ListBuilder)
	lb.Append(true)
	vb := lb.ValueBuilder()
	return eachElement(raw, func(i int, elem []byte) error {
		if err := c.item.decode(vb, elem); err != nil {
			return atPath(err, "["+strconv.Itoa(i)+"]")
		}
		return nil
	})
}

func (c listCodec) encode(dst []byte, a arrow.Array, i int) []byte {
	l := a.(*array.List)
	start, end := l.ValueOffsets(i)
	return appendArray(dst, c.item, l.ListValues(), int(start), int(end))
}

func appendArray(dst []byte, item slot, values arrow.Array, start, end int) []byte {
	dst = append(dst, '[')
	for j := start; j < end; j++ {
		if j > start {
			dst = append(dst, ',')
		}
		dst = item.encode(dst, values, j)
	}
	return append(dst, ']')
}

// fixedListCodec: a JSON array of exactly dim item values (a vector).
type fixedListCodec struct {
	dim  int
	item slot
}

func (c fixedListCodec) decode(b array.Builder, raw []byte) error {
	if raw[0] != '[' {
		return wrongType(fmt.Sprintf("an array of %d elements", c.dim), raw)
	}
	n := 0
	_ = eachElement(raw, func(int, []byte) error { n++; return nil })
	if n != c.dim {
		return invalidValue("expected %d elements, got %d", c.dim, n)
	}
	lb := b.(*array.FixedSizeListBuilder)
	lb.Append(true)
	vb := lb.ValueBuilder()
	return eachElement(raw, func(i int, elem []byte) error {
		if err := c.item.decode(vb, elem); err != nil {
			return atPath(err, "["+strconv.Itoa(i)+"]")
		}
		return nil
	})
}

func (c fixedListCodec) encode(dst []byte, a arrow.Array, i int) []byte {
	l := a.(*array.FixedSizeList)
	start, end := l.ValueOffsets(i)
	return appendArray(dst, c.item, l.ListValues(), int(start), int(end))
}

// structCodec: a JSON object with the struct's fields as keys; a key that is not a
// field is an error, a missing key is null.
type structCodec struct {
	fields []slot
	names  []string
	index  map[string]int
}

func (c structCodec) decode(b array.Builder, raw []byte) error {
	if raw[0] != '{' {
		return wrongType("an object", raw)
	}
	vals := make([][]byte, len(c.fields))
	err := eachMember(raw, func(k string, v []byte) error {
		j, ok := c.index[k]
		if !ok {
			return &valueError{path: "." + k, reason: "not a field of this struct"}
		}
		if vals[j] != nil {
			return &valueError{path: "." + k, reason: "field given twice"}
		}
		vals[j] = v
		return nil
	})
	if err != nil {
		return err
	}
	sb := b.(*array.StructBuilder)
	sb.Append(true)
	for j, f := range c.fields {
		v := vals[j]
		if v == nil {
			if !f.nullable {
				return &valueError{path: "." + c.names[j], reason: "required field is missing"}
			}
			v = []byte("null")
		}
		if err := f.decode(sb.FieldBuilder(j), v); err != nil {
			return atPath(err, "."+c.names[j])
		}
	}
	return nil
}

func (c structCodec) encode(dst []byte, a arrow.Array, i int) []byte {
	s := a.(*array.Struct)
	dst = append(dst, '{')
	for j, f := range c.fields {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, c.names[j])
		dst = append(dst, ':')
		dst = f.encode(dst, s.Field(j), i)
	}
	return append(dst, '}')
}
