package httpapi

// Arrow adds: POST /api/v1/rollouts/{name}/records and POST
// /api/v1/generic/{name}/rows with Content-Type
// application/vnd.apache.arrow.stream. The body is one Arrow IPC stream (a
// schema message, then record batches) of at most Config.MaxBodyBytes; its
// batches become one add, checked against the store's schema as JSON rows are
// (schema.Codec.DecodeArrow, schema.DecodeRolloutsArrow), and go through the
// same admission, WAL append, seal and answer as a JSON add (addRows).
//
// The bytes are a client's, so they are decoded as stored IPC bytes are (the
// WAL's decodeEntry): internal/ipcguard first, since arrow-go sizes
// allocations from the metadata and an out-of-memory is no panic recover can
// catch; then arrow-go's reader under a recover, with every allocation of the
// add (message bodies, decompressed buffers, conversions, the concatenated
// batch) drawn from an allocator bounded by arrowMemoryPerBodyByte times the
// body limit. A stream that needs more is a 413; any other refusal is a 400
// naming the problem.

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/internal/ipcguard"
	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// ArrowStreamType is the media type of an Arrow IPC stream (its one home is
// internal/httpjson, which the clients share).
const ArrowStreamType = httpjson.ArrowStreamType

// arrowMemoryPerBodyByte bounds what one Arrow add may allocate while it is
// decoded and checked, per byte of Config.MaxBodyBytes: the message bodies
// (about the body's size), decompressed buffers, the conversions of types that
// are not the store's, and the concatenation of several batches into one.
const arrowMemoryPerBodyByte = 4

// isArrowStream reports whether r's body is labelled an Arrow IPC stream.
func isArrowStream(r *http.Request) bool {
	media, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && media == ArrowStreamType
}

// arrowAdd is the body of an Arrow add, decoded: the stream's schema and
// record batches, not yet checked against a store, and the allocator that
// holds them (and whatever the check allocates).
type arrowAdd struct {
	schema *arrow.Schema
	recs   []arrow.RecordBatch
	rows   int64
	mem    *boundedAllocator
}

func (a *arrowAdd) release() {
	if a == nil {
		return
	}
	for _, rec := range a.recs {
		rec.Release()
	}
	a.recs = nil
}

// readArrowAdd reads and decodes an Arrow add's body, at most MaxBodyBytes of
// it (413 above).
func (s *Server) readArrowAdd(w http.ResponseWriter, r *http.Request) (*arrowAdd, error) {
	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + bytes.MinRead) // one read past the end sees EOF
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, tooLarge
		}
		return nil, badRequest("could not read the request body: %v", err)
	}
	return decodeArrowStream(buf.Bytes(), newBoundedAllocator(memory.DefaultAllocator, arrowMemoryPerBodyByte*limit))
}

// decodeArrowStream decodes data, an Arrow IPC stream, allocating from mem.
// Every refusal is a 400 naming the problem, or a 413 when mem runs out; never
// a panic.
func decodeArrowStream(data []byte, mem *boundedAllocator) (a *arrowAdd, err error) {
	if len(data) == 0 {
		return nil, badRequest("request body is empty; expected an Arrow IPC stream (a schema message, then record batches)")
	}
	a = &arrowAdd{mem: mem}
	defer func() {
		if p := recover(); p != nil {
			a.release()
			a, err = nil, arrowRefusal(mem, fmt.Errorf("%v", p))
		}
	}()
	if err := ipcguard.CheckStream(data); err != nil {
		if errors.Is(err, ipcguard.ErrViewType) {
			return nil, badRequest("the Arrow stream has a column of a view type (string_view, binary_view, list_view), which this API does not read: "+
				"send string, binary and list columns (pyarrow: cast the table; Polars: write_ipc_stream(..., compat_level=pl.CompatLevel.oldest())) (%v)", err)
		}
		return nil, badRequest("malformed Arrow IPC stream: %v", err)
	}
	rd, err := ipc.NewReader(bytes.NewReader(data), ipc.WithAllocator(mem),
		ipc.WithBodySizeLimit(int64(len(data))), ipc.WithMetadataSizeLimit(int64(len(data))))
	if err != nil {
		return nil, arrowRefusal(mem, err)
	}
	defer rd.Release()
	a.schema = rd.Schema()
	for rd.Next() {
		rec := rd.RecordBatch()
		rec.Retain()
		a.recs = append(a.recs, rec)
		a.rows += rec.NumRows()
	}
	if err := rd.Err(); err != nil {
		a.release()
		return nil, arrowRefusal(mem, err)
	}
	return a, nil
}

// arrowRefusal is the answer to an Arrow add that failed with err: a 413 if it
// ran out of its memory (arrow-go turns many panics into errors, so the
// allocator's own record decides), else a 400.
func arrowRefusal(mem *boundedAllocator, err error) error {
	if mem.exceeded.Load() {
		return &apiError{status: http.StatusRequestEntityTooLarge, code: CodePayloadTooLarge, message: fmt.Sprintf(
			"the Arrow stream needs more than %d bytes of memory to decode and check: send fewer rows per request, or uncompressed buffers", mem.limit)}
	}
	var ae *apiError
	if errors.As(err, &ae) || errors.Is(err, schema.ErrInvalid) {
		return err
	}
	return badRequest("malformed Arrow IPC stream: %v", err)
}

// decode checks the stream's batches against st's input schema and returns
// them as one batch of it (schema.DecodeRolloutsArrow for rollout stores, with
// their defaults, created_at = now; the registered spec's codec for generic
// ones). A mismatch is a 400 naming the column (and the row, when it is about
// a value). The caller releases the batch.
func (a *arrowAdd) decode(st *store.Store) (rec arrow.RecordBatch, err error) {
	defer func() {
		if p := recover(); p != nil {
			rec, err = nil, arrowRefusal(a.mem, fmt.Errorf("%v", p))
		}
	}()
	e := st.Entry()
	if e.Kind == registry.KindRollout {
		rec, err = schema.DecodeRolloutsArrow(a.mem, a.schema, a.recs, time.Now())
	} else {
		spec, perr := schema.ParseSpec(e.Schema)
		if perr != nil {
			return nil, internalError(perr, "generic store %q has an unreadable registered schema", e.Name)
		}
		rec, err = spec.Codec().DecodeArrow(a.mem, a.schema, a.recs)
	}
	if err != nil {
		return nil, arrowRefusal(a.mem, err)
	}
	return rec, nil
}

// decode returns the add's rows as one batch of st's input schema: the Arrow
// stream's, or the JSON rows' (decodeRows).
func (b addBody) decode(st *store.Store) (arrow.RecordBatch, error) {
	if b.arrow != nil {
		return b.arrow.decode(st)
	}
	return decodeRows(st, b.rows)
}

// empty reports whether the add has no rows.
func (b addBody) empty() bool {
	if b.arrow != nil {
		return b.arrow.rows == 0
	}
	return len(b.rows) == 0
}

// release releases what the body holds (an Arrow stream's batches).
func (b addBody) release() { b.arrow.release() }

// errArrowMemory is the panic of a boundedAllocator out of its memory.
var errArrowMemory = errors.New("arrow add: out of its memory")

// boundedAllocator is the allocator of one Arrow add: it hands out at most
// limit bytes at once, and past that panics (recovered by the decoding, which
// answers 413) instead of letting a stream whose metadata asks for gigabytes
// (a decompressed size is the client's word) take the process down.
type boundedAllocator struct {
	mem      memory.Allocator
	limit    int64
	used     atomic.Int64
	exceeded atomic.Bool
}

func newBoundedAllocator(mem memory.Allocator, limit int64) *boundedAllocator {
	return &boundedAllocator{mem: mem, limit: limit}
}

func (a *boundedAllocator) take(n int) {
	if n < 0 || a.used.Add(int64(n)) > a.limit {
		a.exceeded.Store(true)
		panic(errArrowMemory)
	}
}

func (a *boundedAllocator) Allocate(size int) []byte {
	a.take(size)
	return a.mem.Allocate(size)
}

func (a *boundedAllocator) Reallocate(size int, b []byte) []byte {
	if grow := size - len(b); grow > 0 {
		a.take(grow)
	} else {
		a.used.Add(int64(grow))
	}
	return a.mem.Reallocate(size, b)
}

func (a *boundedAllocator) Free(b []byte) {
	a.used.Add(-int64(len(b)))
	a.mem.Free(b)
}
