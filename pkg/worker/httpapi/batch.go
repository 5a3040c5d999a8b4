package httpapi

// The batch row get, POST /api/v1/generic/{name}/get-rows: several rows of a
// generic store by id in one request, as the reference's newer servers serve it
// (routes/generic.rs get_rows, lance-context-api GetRowsRequest). The body is
// {"ids": [...], "columns": [...]}; the answer {"rows": [...]} holds each id
// found once, in the order first asked, and leaves missing ids out. Without
// "columns" a row has every column but the blob ones (as the single get without
// ?columns=); with it, the named columns and id, blob columns included when
// named, so "columns": ["id"] (or []) is an existence check that reads no
// payload. ?version= reads at a table version, as the single get does.
//
// Bounds: at most MaxBatchGetIDs ids (duplicates counted, as the reference
// counts them), a 400 saying so before the store is opened; a body of at most
// maxBatchGetBodyBytes (413 above). Rows are read from one snapshot, a few at
// a time, with only the columns answered (store.Store.GetMany: a blob not asked
// for is not read from the base table), and written out chunk by chunk
// (streamRows), so memory holds those few rows and one chunk, however many ids.

import (
	"encoding/json"
	"net/http"
	"slices"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// MaxBatchGetIDs is the most ids one batch get takes, duplicates included: the
// reference's MAX_BATCH_GET_IDS.
const MaxBatchGetIDs = 1024

// maxBatchGetBodyBytes bounds a batch get's body: MaxBatchGetIDs ids of
// schema.MaxIDBytes each, every byte escaped (\uXXXX, 6 bytes), with room for a
// column list. A body of more ids than MaxBatchGetIDs but under this is a 400
// naming the count; one over it is a 413.
const maxBatchGetBodyBytes = MaxBatchGetIDs*(6*schema.MaxIDBytes+3) + 1<<20

// getRowsRequest is the body of a batch get. Ids are kept raw until checked, so
// one that is not valid UTF-8 (no stored id is) is refused, not repaired into
// another id by encoding/json. A null or absent columns means "no projection".
type getRowsRequest struct {
	IDs     *[]json.RawMessage `json:"ids"`
	Columns *[]string          `json:"columns"`
}

// getRows answers POST /generic/{name}/get-rows.
func (s *Server) getRows(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, err := pathName(r)
		if err != nil {
			return err
		}
		format, err := parseAnswerFormat(w, r)
		if err != nil {
			return err
		}
		var req getRowsRequest
		if err := decodeBody(w, r, maxBatchGetBodyBytes, &req); err != nil {
			return err
		}
		ids, err := batchIDs(req.IDs)
		if err != nil {
			return err
		}
		rd, err := s.openStoreRead(r, k.kind, name)
		if err != nil {
			return err
		}
		defer rd.release()
		read, omit, err := batchColumns(rd.st, req.Columns)
		if err != nil {
			return err
		}
		if format.arrow {
			return s.getRowsArrow(w, r, format, rd, ids, read)
		}
		return s.streamRows(w, r, k, omit, false, func(each func(rec arrow.RecordBatch, i int) error) error {
			return rd.src.GetMany(r.Context(), ids, read, func(rec arrow.RecordBatch) error { return each(rec, 0) })
		})
	}
}

// batchIDs checks a batch get's ids (present, at most MaxBatchGetIDs, each a
// UTF-8 string) and returns them with duplicates dropped, each in the place it
// was first asked for.
func batchIDs(raw *[]json.RawMessage) ([]string, error) {
	if raw == nil {
		return nil, badRequest(`request body must be a JSON object with an "ids" array`)
	}
	if len(*raw) > MaxBatchGetIDs {
		return nil, badRequest("batch get accepts at most %d IDs", MaxBatchGetIDs)
	}
	ids := make([]string, 0, len(*raw))
	seen := make(map[string]bool, len(*raw))
	for i, v := range *raw {
		if !utf8.Valid(v) {
			return nil, badRequest("ids[%d] is not valid UTF-8", i)
		}
		var id string
		if err := json.Unmarshal(v, &id); err != nil {
			return nil, badRequest("ids[%d] must be a string, got %s", i, v)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// batchColumns returns the columns of generic store st a batch get reads and
// those it leaves out of its answer. Without "columns" (named nil), every column
// but the blob ones, which are not even read from the base table; with it, the
// named columns and id, which is always returned. A name the schema lacks (or a
// hidden one, "_seq") is a 400 naming it, whether or not any row is found.
func batchColumns(st *store.Store, named *[]string) (read, omit []string, err error) {
	if named == nil {
		return st.ColumnsExcept(st.BlobColumns()), st.BlobColumns(), nil
	}
	cols := st.ColumnsExcept(nil)
	want := map[string]bool{schema.IDColumn: true}
	for _, c := range *named {
		if !slices.Contains(cols, c) {
			return nil, nil, badRequest("columns: no column %q in this store's schema", c)
		}
		want[c] = true
	}
	for _, c := range cols {
		if want[c] {
			read = append(read, c)
		} else {
			omit = append(omit, c)
		}
	}
	return read, omit, nil
}
