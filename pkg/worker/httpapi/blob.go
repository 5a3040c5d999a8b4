package httpapi

// Blobs: a rollout record's binary_payload and a generic store's binary columns
// declared "blob": true (store.Store.BlobColumns). Their bytes live in the row,
// through the WAL, generations and base table like every other column, so a
// blob acknowledged is as durable as its row and survives merges and
// compactions unchanged. What sets them apart is who pays for them, as in the
// reference: lists never send them, a rollout record's GET leaves its
// binary_payload out, and a generic row's GET leaves its blob columns out
// unless ?columns= names them. A rollout record's bytes are read with
// GET /api/v1/rollouts/{name}/records/{id}/blob.
//
// The largest blob is bounded by the request body (Config.MaxBodyBytes, 413
// above): a WAL entry has no size limit of its own (an append larger than
// wal.Options.MaxEntryBytes gets an entry to itself).

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// blobChunkBytes is how much of a blob one write sends: a slow client holds
// the connection, not a second copy of the blob.
const blobChunkBytes = 256 << 10

// addReservation is what an add reserves of the blob budget before it reads its
// body: the declared Content-Length, or for a body of unknown length the
// largest one accepted (the reference admits those only when nothing else is in
// flight; Tidemark's bound lets them share the budget).
func (s *Server) addReservation(r *http.Request) int64 {
	if r.ContentLength < 0 || r.ContentLength > s.cfg.MaxBodyBytes {
		return s.cfg.MaxBodyBytes
	}
	return r.ContentLength
}

// DefaultLargeBlobLogBytes is the size at or above which an added blob is
// logged (ServerConfig.LargeBlobLogBytes): the reference's
// ROLLOUT_LARGE_BLOB_LOG_BYTES default, 16 MiB.
const DefaultLargeBlobLogBytes = 16 << 20

// observeBlobSizes records the size of each binary_payload of rec, a batch of
// rollout records added to store name, in rollout_blob_bytes, and logs each one
// of at least ServerConfig.LargeBlobLogBytes at warn level, once, with the
// store, the record's id and its size, as the reference does: the histogram
// says a large blob was written, the log says who wrote it (a label per store
// would be a series per store).
func (s *Server) observeBlobSizes(name string, rec arrow.RecordBatch) {
	idx := rec.Schema().FieldIndices(schema.BinaryPayloadColumn)
	if len(idx) != 1 {
		return
	}
	payload := rec.Column(idx[0]).(*array.Binary)
	var ids *array.String
	for i := range payload.Len() {
		if !payload.IsValid(i) {
			continue
		}
		n := len(payload.Value(i))
		s.cfg.Series.BlobBytes.Observe(float64(n))
		if limit := s.cfg.LargeBlobLogBytes; limit <= 0 || int64(n) < limit {
			continue
		}
		if ids == nil {
			ids = rec.Column(rec.Schema().FieldIndices(schema.IDColumn)[0]).(*array.String)
		}
		s.cfg.Logger.Warn("large inline blob written", "store", name, "record_id", ids.Value(i), "blob_bytes", n)
	}
}

// unnamedColumns returns the columns of cols that the ?columns= list text does
// not name: the blob columns a projected read still leaves out.
func unnamedColumns(cols []string, text string) []string {
	var out []string
	for _, c := range cols {
		named := false
		for n := range strings.SplitSeq(text, ",") {
			if strings.TrimSpace(n) == c {
				named = true
				break
			}
		}
		if !named {
			out = append(out, c)
		}
	}
	return out
}

// getBlob streams a rollout record's binary_payload as application/octet-stream
// with its Content-Length; 404 "Rollout 'x' has no payload" when the record is
// absent or has none, as in the reference. The bytes are reserved in the blob
// budget (503 when it is full) before the row is read, as the largest blob a
// row may hold, and the reservation shrinks to the blob's size once it is known
// and is held until the last byte is written. ?version= reads the record as of
// that table version, as the other row routes do.
func (s *Server) getBlob(w http.ResponseWriter, r *http.Request) error {
	rd, err := s.openRowRead(r, registry.KindRollout)
	if err != nil {
		return err
	}
	defer rd.release()
	res, err := s.reserveBlobBytes(s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	defer res.release()
	rec, err := rd.src.Get(r.Context(), rd.id)
	if err != nil {
		return err
	}
	if rec == nil {
		return notFound("Rollout '%s' has no payload", rd.id)
	}
	defer rec.Release()
	col := rec.Schema().FieldIndices(schema.BinaryPayloadColumn)
	if len(col) != 1 || rec.Column(col[0]).IsNull(0) {
		return notFound("Rollout '%s' has no payload", rd.id)
	}
	data := rec.Column(col[0]).(*array.Binary).Value(0)
	res.shrinkTo(int64(len(data)))

	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for len(data) > 0 {
		n := min(len(data), blobChunkBytes)
		// Each chunk gets the whole write timeout: a large blob to a slow client
		// takes longer than one request may.
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := w.Write(data[:n]); err != nil {
			s.cfg.Logger.Debug("blob download: client went away", "path", r.URL.Path, "err", err)
			return nil
		}
		data = data[n:]
	}
	return nil
}
