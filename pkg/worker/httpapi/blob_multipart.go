package httpapi

// Multipart adds: POST /api/v1/rollouts/{name}/records with Content-Type
// multipart/form-data, the reference's way to send artifact bytes without the
// base64 inflation of JSON. The body is
//
//  1. a first part named "metadata": the JSON add body {"records": [...]};
//  2. one raw part per record that carries a blob, named for that record's
//     zero-based index in records ("0", "1", ...), in any order.
//
// Records are matched by index, not id, because ids are the client's and may
// repeat. The bytes of a part become the record's binary_payload (replacing one
// sent inline as base64). As in the reference, the whole request is refused
// with a 400 before anything is written when a part's name is not a record
// index, an index has no record or is sent twice, a part's length disagrees with
// its record's payload_size, or a record declares payload_size and gets no bytes.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// metadataPart is the name of the first part of a multipart add.
const metadataPart = "metadata"

// addBody is the decoded body of an add: its rows, and for a multipart add the
// bytes of each record index's part; or an Arrow stream (add_arrow.go).
type addBody struct {
	rows      []json.RawMessage
	blobs     map[int][]byte
	multipart bool
	arrow     *arrowAdd
}

// readAddBody reads the body of an add of kind k: JSON, an Arrow IPC stream
// (add_arrow.go), or for a rollout store multipart/form-data too (the reference
// takes multipart on that route only). A body over Config.MaxBodyBytes fails
// with *http.MaxBytesError (413) either way.
func (s *Server) readAddBody(w http.ResponseWriter, r *http.Request, k kindAPI) (addBody, error) {
	if isArrowStream(r) {
		a, err := s.readArrowAdd(w, r)
		return addBody{arrow: a}, err
	}
	if k.kind != registry.KindRollout {
		rows, err := s.decodeRowsBody(w, r, k)
		return addBody{rows: rows}, err
	}
	ct := r.Header.Get("Content-Type")
	media, params, err := mime.ParseMediaType(ct)
	if err != nil || media != "multipart/form-data" {
		if err := checkJSONContentType(r); err != nil {
			// The reference's wording, which names both encodings this route takes.
			return addBody{}, &apiError{status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMediaType,
				message: fmt.Sprintf("unsupported Content-Type '%s': expected application/json or multipart/form-data", ct)}
		}
		rows, err := s.decodeRowsBody(w, r, k)
		return addBody{rows: rows}, err
	}
	boundary := params["boundary"]
	if boundary == "" {
		return addBody{}, badRequest("invalid multipart request: the Content-Type has no boundary parameter")
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return addBody{}, &http.MaxBytesError{Limit: s.cfg.MaxBodyBytes}
	}
	rows, blobs, err := parseMultipartAdd(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), boundary)
	return addBody{rows: rows, blobs: blobs, multipart: true}, err
}

// parseMultipartAdd reads a multipart add body (see the top of this file): the
// records of its metadata part, and the bytes of each binary part by record
// index. Every refusal is a 400 in the reference's words, except a body over
// the reader's limit, whose *http.MaxBytesError is returned as it is (413).
func parseMultipartAdd(body io.Reader, boundary string) ([]json.RawMessage, map[int][]byte, error) {
	mr := multipart.NewReader(body, boundary)
	first, err := mr.NextRawPart()
	switch {
	case errors.Is(err, io.EOF):
		return nil, nil, badRequest("multipart body is empty")
	case err != nil:
		return nil, nil, multipartError("malformed multipart body", err)
	}
	if name := first.FormName(); name != metadataPart {
		if name == "" {
			name = "<unnamed>"
		}
		return nil, nil, badRequest("first multipart part must be named '%s', found '%s'", metadataPart, name)
	}
	meta, err := io.ReadAll(first)
	if err != nil {
		return nil, nil, multipartError("failed to read metadata part", err)
	}
	records, err := decodeMetadata(meta)
	if err != nil {
		return nil, nil, err
	}
	blobs := map[int][]byte{}
	for {
		p, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			return records, blobs, nil
		}
		if err != nil {
			return nil, nil, multipartError("malformed multipart body", err)
		}
		name := p.FormName()
		if name == "" {
			return nil, nil, badRequest("multipart part is missing a name")
		}
		idx, ok := recordIndex(name)
		if !ok {
			return nil, nil, badRequest("unexpected multipart part '%s': expected a record index", name)
		}
		if idx >= len(records) {
			return nil, nil, badRequest("multipart part '%d' has no matching record (%d records supplied)", idx, len(records))
		}
		data, err := io.ReadAll(p)
		if err != nil {
			return nil, nil, multipartError(fmt.Sprintf("failed to read binary part '%d'", idx), err)
		}
		if _, dup := blobs[idx]; dup {
			return nil, nil, badRequest("duplicate multipart part for record index %d", idx)
		}
		blobs[idx] = data
	}
}

// multipartError is the 400 for a body that could not be read as multipart, or
// the 413 if it could not be read because it is over the limit.
func multipartError(what string, err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return tooLarge
	}
	return badRequest("%s: %v", what, err)
}

// recordIndex parses a binary part's name as the reference does (Rust's usize
// parse): decimal digits, an optional leading +, leading zeros allowed.
func recordIndex(name string) (int, bool) {
	n, err := strconv.ParseUint(strings.TrimPrefix(name, "+"), 10, 62)
	if err != nil {
		return 0, false
	}
	return int(n), true
}

// decodeMetadata reads the metadata part, an add body {"records": [...]}, as a
// JSON add body is read (unknown fields and trailing data refused).
func decodeMetadata(meta []byte) ([]json.RawMessage, error) {
	var req addRecordsRequest
	dec := json.NewDecoder(bytes.NewReader(meta))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if err == nil {
		if _, tail := dec.Token(); !errors.Is(tail, io.EOF) {
			return nil, badRequest("invalid metadata JSON: unexpected data after the request object")
		}
		if req.Records == nil {
			return nil, badRequest("invalid metadata JSON: it must be a JSON object with a %q array", "records")
		}
		return *req.Records, nil
	}
	var ae *apiError
	if errors.As(bodyError(err), &ae) {
		return nil, badRequest("invalid metadata JSON: %s", ae.message)
	}
	return nil, badRequest("invalid metadata JSON: %v", err)
}

// maxBlobBatchBytes is the most blob bytes one add may carry: the offsets of an
// Arrow binary column are 32-bit.
const maxBlobBatchBytes = math.MaxInt32

// decodeMultipartRollouts decodes the records of a multipart add (defaults as
// for JSON, created_at = now) and gives each record whose index has a part that
// part's bytes as its binary_payload, after checking them against the
// record's payload_size as the reference does. The caller releases the batch.
func decodeMultipartRollouts(records []json.RawMessage, blobs map[int][]byte, now time.Time) (arrow.RecordBatch, error) {
	rec, err := schema.DecodeRollouts(records, now)
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	payloadCol := rec.Schema().FieldIndices(schema.BinaryPayloadColumn)[0]
	payload := rec.Column(payloadCol).(*array.Binary)
	size := rec.Column(rec.Schema().FieldIndices(schema.PayloadSizeColumn)[0]).(*array.Int64)

	total := 0
	for _, idx := range slices.Sorted(maps.Keys(blobs)) {
		n := len(blobs[idx])
		if size.IsValid(idx) && size.Value(idx) != int64(n) {
			return nil, badRequest("record index %d: payload_size %d does not match received %d bytes", idx, size.Value(idx), n)
		}
		total += n
	}
	// A record that declares a payload and has none would be stored without
	// its artifact: training data silently dropped.
	for i := range int(rec.NumRows()) {
		if _, ok := blobs[i]; !ok && size.IsValid(i) && payload.IsNull(i) {
			return nil, badRequest("record index %d declares payload_size but no binary part was supplied", i)
		}
	}
	if total+len(payload.ValueBytes()) > maxBlobBatchBytes {
		return nil, &apiError{status: http.StatusRequestEntityTooLarge, code: CodePayloadTooLarge,
			message: fmt.Sprintf("the blobs of one add total %d bytes, at most %d: send fewer records per request", total, maxBlobBatchBytes)}
	}

	b := array.NewBinaryBuilder(memory.DefaultAllocator, arrow.BinaryTypes.Binary)
	defer b.Release()
	b.ReserveData(total + len(payload.ValueBytes()))
	for i := range int(rec.NumRows()) {
		switch data, ok := blobs[i]; {
		case ok:
			b.Append(data)
		case payload.IsNull(i):
			b.AppendNull()
		default:
			b.Append(payload.Value(i))
		}
	}
	attached := b.NewArray()
	defer attached.Release()
	cols := slices.Clone(rec.Columns())
	cols[payloadCol] = attached
	return array.NewRecordBatch(rec.Schema(), cols, rec.NumRows()), nil
}
