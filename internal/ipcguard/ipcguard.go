// Package ipcguard checks the flatbuffer metadata of Arrow IPC data before arrow-go
// decodes it.
//
// arrow-go trusts the flatbuffers of an IPC stream or file: it sizes slices from
// vector lengths it never compares with the buffer (one flipped bit in the length of
// a schema's custom metadata asks for 62 GB) and follows child references without a
// depth bound. Both kill the process (out of memory, stack overflow), which recover
// cannot catch; index-out-of-range panics it can. So every decoder of stored IPC
// bytes calls CheckStream or CheckFile first, and wraps the decoding in a recover.
//
// Invariants: a check reads only data, allocates nothing proportional to a length
// it reads, and visits at most one table per four bytes of metadata (real metadata
// never shares a table between two parents), so it is linear in the input however
// the input is crafted. Passing the check does not make data valid; it makes the
// arrow-go decoding of it bounded in memory and depth.
package ipcguard

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed means IPC bytes whose metadata arrow-go must not be given.
var ErrMalformed = errors.New("malformed Arrow IPC metadata")

// ErrViewType is the ErrMalformed of a column of a view type (string_view,
// binary_view, list_view): well-formed, maybe, but never read (see fieldTable).
// A client sending one is told to send the plain type instead.
var ErrViewType = errors.New("a column of view type")

const (
	continuation = 0xFFFFFFFF
	// maxDepth bounds nested types (list<struct<list<...>>>); arrow-go recurses once
	// per level, and a cycle of child references would recurse forever.
	maxDepth  = 64
	fileMagic = "ARROW1"
)

// Flatbuffer Type union ids of the view types (arrow's format/Schema.fbs).
const (
	typeBinaryView    = 23
	typeUtf8View      = 24
	typeListView      = 25
	typeLargeListView = 26
)

// CheckStream checks every message of an IPC stream (the format of WAL entries and
// of the schema message in table manifests).
func CheckStream(data []byte) (err error) {
	defer guard(&err)
	_, err = checkMessages(data, 0)
	return err
}

// CheckFile checks an IPC file (the format of WAL generations): its footer, and the
// message at every block the footer lists.
func CheckFile(data []byte) (err error) {
	defer guard(&err)
	const tail = 4 + len(fileMagic)
	if len(data) < 8+tail || string(data[:len(fileMagic)]) != fileMagic || string(data[len(data)-len(fileMagic):]) != fileMagic {
		return fmt.Errorf("%w: not an Arrow IPC file", ErrMalformed)
	}
	footerLen := int64(int32(binary.LittleEndian.Uint32(data[len(data)-tail:])))
	footerEnd := int64(len(data) - tail)
	if footerLen <= 0 || footerLen > footerEnd-8 {
		return fmt.Errorf("%w: footer of %d bytes in a %d-byte file", ErrMalformed, footerLen, len(data))
	}
	fb := data[footerEnd-footerLen : footerEnd]
	w := newWalker(fb)
	footer, err := w.root()
	if err != nil {
		return err
	}
	if s, ok, err := w.table(footer, 1); err != nil {
		return err
	} else if ok {
		if err := w.schema(s); err != nil {
			return err
		}
	}
	for _, slot := range []int{2, 3} { // dictionaries, recordBatches: [Block], 24 bytes each
		start, n, err := w.vector(footer, slot, 24)
		if err != nil {
			return err
		}
		for i := range n {
			b := start + 24*i
			off := int64(binary.LittleEndian.Uint64(fb[b:]))
			meta := int64(int32(binary.LittleEndian.Uint32(fb[b+8:])))
			body := int64(binary.LittleEndian.Uint64(fb[b+16:]))
			limit := footerEnd - footerLen
			if off < 8 || meta <= 0 || body < 0 || off > limit || meta > limit-off || body > limit-off-meta {
				return fmt.Errorf("%w: block %d at %d (%d+%d bytes) outside the file's %d bytes", ErrMalformed, i, off, meta, body, limit)
			}
			if _, _, err := checkMessage(data[off:off+meta+body], 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkMessages checks the messages of a stream from offset off to the end of data
// or an end-of-stream marker, and returns where it stopped.
func checkMessages(data []byte, off int) (int, error) {
	for off < len(data) {
		next, done, err := checkMessage(data, off)
		if err != nil || done {
			return next, err
		}
		off = next
	}
	return off, nil
}

// checkMessage checks the message at data[off:] and returns the offset after its
// body, or done at an end-of-stream marker.
func checkMessage(data []byte, off int) (next int, done bool, err error) {
	if len(data)-off < 4 {
		return 0, false, fmt.Errorf("%w: %d stray bytes at offset %d", ErrMalformed, len(data)-off, off)
	}
	if binary.LittleEndian.Uint32(data[off:]) == continuation {
		off += 4
		if len(data)-off < 4 {
			return 0, false, fmt.Errorf("%w: message length cut off at offset %d", ErrMalformed, off)
		}
	}
	n := int64(int32(binary.LittleEndian.Uint32(data[off:])))
	off += 4
	if n == 0 {
		return off, true, nil
	}
	if n < 0 || n > int64(len(data)-off) {
		return 0, false, fmt.Errorf("%w: message metadata of %d bytes at offset %d, %d left", ErrMalformed, n, off, len(data)-off)
	}
	meta := data[off : off+int(n)]
	body, err := checkMessageMeta(meta)
	if err != nil {
		return 0, false, err
	}
	off += int(n)
	if body < 0 || body > int64(len(data)-off) {
		return 0, false, fmt.Errorf("%w: message body of %d bytes at offset %d, %d left", ErrMalformed, body, off, len(data)-off)
	}
	return off + int(body), false, nil
}

// Message: version(0) header_type(1) header(2) bodyLength(3) custom_metadata(4).
// MessageHeader: 1 Schema, 2 DictionaryBatch, 3 RecordBatch.
func checkMessageMeta(meta []byte) (body int64, err error) {
	w := newWalker(meta)
	msg, err := w.root()
	if err != nil {
		return 0, err
	}
	if err := w.keyValues(msg, 4); err != nil {
		return 0, err
	}
	body = w.int64Field(msg, 3)
	header, ok, err := w.table(msg, 2)
	if err != nil || !ok {
		return body, err
	}
	switch w.uint8Field(msg, 1) {
	case 1:
		err = w.schema(header)
	case 2: // DictionaryBatch: id(0) data(1: RecordBatch) isDelta(2)
		var rb int
		if rb, ok, err = w.table(header, 1); err == nil && ok {
			err = w.recordBatch(rb)
		}
	case 3:
		err = w.recordBatch(header)
	}
	return body, err
}

// walker reads one flatbuffer, checking every offset and length against it.
type walker struct {
	b      []byte
	visits int // tables left to visit
}

func newWalker(b []byte) *walker { return &walker{b: b, visits: len(b)/4 + 1} }

func (w *walker) bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

func (w *walker) u32(pos int) (uint32, error) {
	if pos < 0 || pos > len(w.b)-4 {
		return 0, w.bad("offset %d outside %d bytes of metadata", pos, len(w.b))
	}
	return binary.LittleEndian.Uint32(w.b[pos:]), nil
}

// deref follows the uoffset stored at pos.
func (w *walker) deref(pos int) (int, error) {
	v, err := w.u32(pos)
	if err != nil {
		return 0, err
	}
	to := int64(pos) + int64(v)
	if to > int64(len(w.b)-4) {
		return 0, w.bad("reference at %d points past the metadata", pos)
	}
	return int(to), nil
}

func (w *walker) root() (int, error) {
	t, err := w.deref(0)
	if err != nil {
		return 0, err
	}
	return t, w.visit(t)
}

// visit checks the vtable of the table at t and counts the visit.
func (w *walker) visit(t int) error {
	if w.visits--; w.visits < 0 {
		return w.bad("more tables than the metadata has room for")
	}
	s, err := w.u32(t)
	if err != nil {
		return err
	}
	vt := int64(t) - int64(int32(s))
	if vt < 0 || vt > int64(len(w.b)-4) {
		return w.bad("vtable of table %d outside the metadata", t)
	}
	if size := int64(binary.LittleEndian.Uint16(w.b[vt:])); size < 4 || vt+size > int64(len(w.b)) {
		return w.bad("vtable of %d bytes at %d", size, vt)
	}
	return nil
}

// field returns the position of field slot of table t, or false when absent. A
// field is present exactly when the flatbuffers library says so (its vtable entry is
// below the vtable's declared size, odd sizes included), or a field absent here
// would be read there unchecked.
func (w *walker) field(t, slot int) (int, bool) {
	s := binary.LittleEndian.Uint32(w.b[t:])
	vt := int(int64(t) - int64(int32(s)))
	entry := 4 + 2*slot
	if entry >= int(binary.LittleEndian.Uint16(w.b[vt:])) {
		return 0, false
	}
	if vt+entry+2 > len(w.b) {
		return len(w.b), true // past the end: every read of it fails its bounds check
	}
	fo := int(binary.LittleEndian.Uint16(w.b[vt+entry:]))
	if fo == 0 {
		return 0, false
	}
	return t + fo, true
}

// table returns the table referenced by field slot of t, visited.
func (w *walker) table(t, slot int) (int, bool, error) {
	pos, ok := w.field(t, slot)
	if !ok {
		return 0, false, nil
	}
	to, err := w.deref(pos)
	if err != nil {
		return 0, false, err
	}
	return to, true, w.visit(to)
}

// vector returns the first element and length of the vector in field slot of t,
// after checking that n elements of elem bytes fit in the metadata.
func (w *walker) vector(t, slot, elem int) (start, n int, err error) {
	pos, ok := w.field(t, slot)
	if !ok {
		return 0, 0, nil
	}
	v, err := w.deref(pos)
	if err != nil {
		return 0, 0, err
	}
	l := int64(binary.LittleEndian.Uint32(w.b[v:]))
	if l*int64(elem) > int64(len(w.b)-v-4) {
		return 0, 0, w.bad("vector of %d elements at %d in %d bytes of metadata", l, v, len(w.b))
	}
	return v + 4, int(l), nil
}

// tables calls fn for every table of the table vector in field slot of t.
func (w *walker) tables(t, slot int, fn func(int) error) error {
	start, n, err := w.vector(t, slot, 4)
	if err != nil {
		return err
	}
	for i := range n {
		e, err := w.deref(start + 4*i)
		if err != nil {
			return err
		}
		if err := w.visit(e); err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

func (w *walker) str(t, slot int) error {
	_, _, err := w.vector(t, slot, 1)
	return err
}

// keyValues checks a [KeyValue] field: key(0) value(1), both strings.
func (w *walker) keyValues(t, slot int) error {
	return w.tables(t, slot, func(kv int) error {
		if err := w.str(kv, 0); err != nil {
			return err
		}
		return w.str(kv, 1)
	})
}

func (w *walker) uint8Field(t, slot int) uint8 {
	pos, ok := w.field(t, slot)
	if !ok || pos >= len(w.b) {
		return 0
	}
	return w.b[pos]
}

func (w *walker) int64Field(t, slot int) int64 {
	pos, ok := w.field(t, slot)
	if !ok || pos < 0 || pos > len(w.b)-8 {
		return 0
	}
	return int64(binary.LittleEndian.Uint64(w.b[pos:]))
}

// Schema: endianness(0) fields(1) custom_metadata(2) features(3: [long]).
func (w *walker) schema(s int) error {
	if err := w.keyValues(s, 2); err != nil {
		return err
	}
	if _, _, err := w.vector(s, 3, 8); err != nil {
		return err
	}
	return w.tables(s, 1, func(f int) error { return w.fieldTable(f, 1) })
}

// Field: name(0) nullable(1) type_type(2) type(3) dictionary(4) children(5)
// custom_metadata(6). Union (type 14): mode(0) typeIds(1: [int]).
func (w *walker) fieldTable(f, depth int) error {
	if depth > maxDepth {
		return w.bad("types nested deeper than %d", maxDepth)
	}
	if err := w.str(f, 0); err != nil {
		return err
	}
	if err := w.keyValues(f, 6); err != nil {
		return err
	}
	switch t := w.uint8Field(f, 2); t {
	case typeBinaryView, typeUtf8View, typeListView, typeLargeListView:
		// arrow-go reads a view column's variadic buffer count at the column's
		// index in the record batch's vector without comparing the index with the
		// vector's length: past its end it reads whatever follows as a count and
		// sizes a slice by it (a fuzzed entry asked for 0x1800000002 buffers).
		// Tidemark writes no view types, so none may be read.
		return fmt.Errorf("%w: %w %d, which Tidemark never writes", ErrMalformed, ErrViewType, t)
	}
	if typ, ok, err := w.table(f, 3); err != nil {
		return err
	} else if ok {
		if w.uint8Field(f, 2) == 14 {
			if _, _, err := w.vector(typ, 1, 4); err != nil {
				return err
			}
		}
	}
	if _, _, err := w.table(f, 4); err != nil {
		return err
	}
	return w.tables(f, 5, func(c int) error { return w.fieldTable(c, depth+1) })
}

// RecordBatch: length(0) nodes(1: [FieldNode], 16 bytes) buffers(2: [Buffer], 16
// bytes) compression(3) variadicBufferCounts(4: [long]). A variadic count sizes a
// slice of buffers, so none may exceed the message's buffer count.
func (w *walker) recordBatch(rb int) error {
	if _, _, err := w.vector(rb, 1, 16); err != nil {
		return err
	}
	_, nbuf, err := w.vector(rb, 2, 16)
	if err != nil {
		return err
	}
	if _, _, err := w.table(rb, 3); err != nil {
		return err
	}
	start, n, err := w.vector(rb, 4, 8)
	if err != nil {
		return err
	}
	for i := range n {
		if c := int64(binary.LittleEndian.Uint64(w.b[start+8*i:])); c < 0 || c > int64(nbuf) {
			return w.bad("variadic buffer count %d with %d buffers", c, nbuf)
		}
	}
	return nil
}

// guard turns a panic of a check (a bug, or an offset check missed) into an error:
// the check exists to keep malformed input from killing the process.
func guard(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %v", ErrMalformed, r)
	}
}
