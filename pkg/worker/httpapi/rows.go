package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/worker/mergesvc"
)

// The bodies of POST /rollouts/{name}/records and POST /generic/{name}/rows. A
// missing or null array is a 400, so the field is a pointer.
type (
	addRecordsRequest struct {
		Records *[]json.RawMessage `json:"records"`
	}
	addRowsRequest struct {
		Rows *[]json.RawMessage `json:"rows"`
	}
)

// decodeRowsBody returns the row array of an add body of kind k.
func (s *Server) decodeRowsBody(w http.ResponseWriter, r *http.Request, k kindAPI) ([]json.RawMessage, error) {
	var rows *[]json.RawMessage
	if k.kind == registry.KindRollout {
		var req addRecordsRequest
		if err := decodeBody(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
			return nil, err
		}
		rows = req.Records
	} else {
		var req addRowsRequest
		if err := decodeBody(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
			return nil, err
		}
		rows = req.Rows
	}
	if rows == nil {
		return nil, badRequest("request body must be a JSON object with a %q array", k.rows)
	}
	return *rows, nil
}

// decodeRows turns JSON rows into one batch of st's input schema; a bad row fails
// the whole batch with a schema.Error naming the row and column. Rollout records
// get their defaults (created_at = now).
func decodeRows(st *store.Store, rows []json.RawMessage) (arrow.RecordBatch, error) {
	e := st.Entry()
	if e.Kind == registry.KindRollout {
		return schema.DecodeRollouts(rows, time.Now())
	}
	spec, err := schema.ParseSpec(e.Schema)
	if err != nil {
		return nil, internalError(err, "generic store %q has an unreadable registered schema", e.Name)
	}
	return spec.Codec().Decode(rows)
}

// addAnswer is the body of a 201 to POST .../records and POST .../rows: the
// reference's {version, ids, count} (ids for rollout stores only, as there) and
// Tidemark's causal token.
type addAnswer struct {
	// Version is the base table's version when the add was acknowledged. Adds go
	// to the WAL and do not advance it: it names the table, not the rows.
	Version uint64   `json:"version"`
	IDs     []string `json:"ids,omitempty"`
	Count   int      `json:"count"`
	// Seq is the causal token of this add (see httpjson.AfterHeader). It exceeds 2^53: a
	// JavaScript client should take the header's text instead.
	Seq uint64 `json:"seq"`
}

// addRows appends rows durably to this worker's shard; with ?flush it also
// seals, so the rows are visible to reads when it answers.
func (s *Server) addRows(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, err := pathName(r)
		if err != nil {
			return err
		}
		flush, err := flushParam(r)
		if err != nil {
			return err
		}
		after, err := afterParam(r)
		if err != nil {
			return err
		}
		// The body's bytes are reserved before it is read (503 when the blob
		// budget is full) and held until the add is answered.
		res, err := s.reserveBlobBytes(s.addReservation(r))
		if err != nil {
			return err
		}
		defer res.release()
		body, err := s.readAddBody(w, r, k)
		if err != nil {
			return err
		}
		defer body.release()
		rows := body.rows
		parsed := time.Now() // rollout_add_request_duration_seconds leaves body parsing out
		// The reference refuses an empty rollout append (an empty generic one is
		// a no-op there, answered 201 with count 0).
		if body.empty() && k.kind == registry.KindRollout {
			return badRequest("records array must not be empty")
		}
		var rec arrow.RecordBatch
		if body.multipart { // checked before the store is opened, as there
			if rec, err = decodeMultipartRollouts(rows, body.blobs, time.Now()); err != nil {
				return err
			}
			defer rec.Release()
		}
		st, release, err := s.cfg.Stores.Open(r.Context(), k.kind, name)
		if err != nil {
			return err
		}
		defer release()
		if rec == nil {
			if rec, err = body.decode(st); err != nil {
				return err
			}
			defer rec.Release()
		}
		if k.kind == registry.KindRollout {
			s.observeBlobSizes(name, rec)
		}
		if err := s.admitAdd(w, r, st); err != nil {
			return err
		}

		// Accepted: from here on the client cannot cancel the write.
		ctx, cancel := detached(r)
		defer cancel()
		added := int(rec.NumRows())
		seq := after
		if added > 0 {
			appendStart := time.Now()
			seq, err = st.AppendAfter(ctx, rec, after)
			s.cfg.Series.ObserveAdd(k.kind, time.Since(appendStart), err)
			if err != nil {
				return err
			}
			s.cfg.Series.AppendedRows.WithLabelValues(string(k.kind)).Add(float64(added))
			if st.Entry().SealOnAdd {
				s.cfg.Merges.Metrics().Flushes.WithLabelValues(mergesvc.ResultOK, string(k.kind)).Inc()
			}
		}
		if flush {
			if _, err := s.seal(ctx, st); err != nil {
				return internalError(err, "%d rows were added durably but the seal failed; they become visible at the next seal", added)
			}
		}
		ans := addAnswer{Version: st.Snapshot().Base.Version, Count: added, Seq: seq}
		if k.kind == registry.KindRollout {
			ids := rec.Column(0).(*array.String)
			ans.IDs = make([]string, ids.Len())
			for i := range ans.IDs {
				ans.IDs[i] = ids.Value(i)
			}
		}
		w.Header().Set(httpjson.SeqHeader, strconv.FormatUint(seq, 10))
		if k.kind == registry.KindRollout {
			s.cfg.Series.AddRequestDuration.WithLabelValues(strconv.FormatBool(flush)).Observe(time.Since(parsed).Seconds())
		}
		httpjson.WriteJSON(w, http.StatusCreated, ans)
		return nil
	}
}

// seal seals st's memtable and counts the seal (a seal that found nothing to seal
// is not counted, as in the flush sweeper). It returns nil, nil then.
func (s *Server) seal(ctx context.Context, st *store.Store) (*wal.Generation, error) {
	start := time.Now()
	g, err := st.Seal(ctx)
	s.cfg.Merges.Metrics().ObserveSeal(string(st.Entry().Kind), g != nil, err, time.Since(start))
	if err != nil {
		return nil, err
	}
	return g, nil
}

// listRows answers {"<rows>": [...], "count": n}: the live rows without their
// blob columns, filtered by ?filters= (rollout stores: a JSON object of
// equalities) or ?filter= (generic stores: a SQL predicate, package rowfilter),
// the filter applied before paging, in the store's stable id order, from
// ?start_after=<id> or ?cursor=<next_cursor> when given. With ?limit= it is a
// page, after ?offset=, and "next_cursor" when rows follow it; without, it is
// every row, streamed (listAll). With ?version= it reads the store as of that
// table version (api_version.go).
func (s *Server) listRows(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, err := pathName(r)
		if err != nil {
			return err
		}
		limit, offset, err := listPage(r)
		if err != nil {
			return err
		}
		format, err := parseAnswerFormat(w, r)
		if err != nil {
			return err
		}
		storage, err := orderParam(r)
		if err != nil {
			return err
		}
		version, err := versionParam(r)
		if err != nil {
			return err
		}
		start, err := startParam(r)
		if err != nil {
			return err
		}
		opts := store.ListOptions{Limit: limit, Offset: offset, StartAfter: start}
		fp, err := parseRowFilter(r, k)
		if err != nil {
			return err
		}
		st, release, err := s.cfg.Stores.Open(r.Context(), k.kind, name)
		if err != nil {
			return err
		}
		defer release()
		if opts.Filter, opts.FilterColumns, err = fp.compile(st); err != nil {
			return err
		}
		src, err := rowsAt(r, st, version)
		if err != nil {
			return err
		}
		if blobs := st.BlobColumns(); len(blobs) > 0 {
			opts.Columns = st.ColumnsExcept(blobs) // a blob the list leaves out is not read
		}
		if format.arrow {
			return s.listArrow(w, r, format, st, src, opts, limit, storage)
		}
		if storage {
			return s.listStorage(w, r, k, st, src, opts)
		}
		if limit < 0 {
			return s.listAll(w, r, k, src, opts, st.BlobColumns())
		}
		out := []json.RawMessage{}
		answer := map[string]any{}
		if limit > 0 { // store.ListOptions reads Limit 0 as "no limit"
			page, err := src.Page(r.Context(), opts)
			if err != nil {
				return err
			}
			out, err = encodeRows(k, page.Rows, st.BlobColumns())
			if err != nil {
				return err
			}
			if page.More {
				answer["next_cursor"] = encodeCursor(page.Next)
			}
		}
		answer[k.rows], answer["count"] = out, len(out)
		httpjson.WriteJSON(w, http.StatusOK, answer)
		return nil
	}
}

// rowFilter is the filter of a read of rows: ?filters= on rollout stores (a
// JSON object of equalities, parsed at once), ?filter= on generic stores (a SQL
// predicate, package rowfilter, compiled against the store's schema).
type rowFilter struct {
	rollout   *schema.Filters
	predicate *string
}

// parseRowFilter reads the filter parameters of r, before the store is opened:
// a filter of the other kind of store, or rollout filters that do not parse,
// are 400s.
func parseRowFilter(r *http.Request, k kindAPI) (rowFilter, error) {
	var fp rowFilter
	text, hasFilters := r.URL.Query()["filters"]
	switch {
	case hasFilters && k.kind == registry.KindRollout:
		f, err := schema.ParseRolloutFilters(text[0])
		if err != nil {
			return rowFilter{}, fmt.Errorf("filters: %w", err)
		}
		if !f.Empty() {
			fp.rollout = &f
		}
	case hasFilters:
		return rowFilter{}, badRequest("filters are supported on rollout stores only")
	}
	predicate, hasFilter := r.URL.Query()["filter"]
	if hasFilter && k.kind == registry.KindRollout {
		return rowFilter{}, badRequest("filter is supported on generic stores only (rollout lists take filters=)")
	}
	if hasFilter {
		fp.predicate = &predicate[0]
	}
	return fp, nil
}

// compile returns the filter's mask function and the columns it reads for
// st (nil, nil: no filter), so that paging counts matching rows only. A
// predicate that does not parse, names a column the schema lacks or compares
// mismatched types is a 400 saying which (rowfilter.Error).
func (fp rowFilter) compile(st *store.Store) (func(arrow.RecordBatch) ([]bool, error), []string, error) {
	switch {
	case fp.rollout != nil:
		return fp.rollout.Mask, fp.rollout.Columns(), nil
	case fp.predicate == nil:
		return nil, nil, nil
	}
	mask, cols, err := st.CompileFilter(*fp.predicate)
	if err != nil {
		return nil, nil, badRequest("%v", err)
	}
	return mask, cols, nil
}

// listChunkBytes is how much of a streamed list is encoded before it is written
// to the client: what a list holds in memory besides the batch being read.
const listChunkBytes = 64 << 10

// listAll streams every row of st matching opts.Filter, after opts.Offset of
// them, without the columns in omit, in storage order (store.Store.Stream), as
// one JSON answer {"<rows>":[...],"count":n} (streamRows).
func (s *Server) listAll(w http.ResponseWriter, r *http.Request, k kindAPI, st rowSource, opts store.ListOptions, omit []string) error {
	read := func(each func(rec arrow.RecordBatch, i int) error) error {
		return st.Stream(r.Context(), opts, each)
	}
	return s.streamRows(w, r, k, omit, true, read)
}

// streamRows writes the rows read hands to each, without the columns in omit,
// as one JSON answer {"<rows>":[...]} (with "count":n after the array if
// withCount) written chunk by chunk, so memory holds a chunk, not the answer.
// Nothing is written before the first chunk fills, so a read that fails early
// (a deleted store, too many pending generations) still gets its error answer.
// One that fails once rows went out cannot change the status any more: the
// connection is cut, so the client sees a truncated answer instead of a shorter
// list that looks whole.
func (s *Server) streamRows(w http.ResponseWriter, r *http.Request, k kindAPI, omit []string, withCount bool, read func(each func(rec arrow.RecordBatch, i int) error) error) error {
	rc := http.NewResponseController(w)
	started := false
	buf := make([]byte, 0, listChunkBytes+4096)
	buf = append(buf, `{"`+k.rows+`":[`...)
	flush := func() error {
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
		}
		// Each chunk gets the whole write timeout: a list of millions of rows
		// takes longer than one request may.
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err := w.Write(buf)
		buf = buf[:0]
		return err
	}
	enc := &rowEncoders{rollout: k.kind == registry.KindRollout, omit: omit}
	count := 0
	err := read(func(rec arrow.RecordBatch, i int) error {
		if count > 0 {
			buf = append(buf, ',')
		}
		var err error
		if buf, err = enc.appendRow(buf, rec, i); err != nil {
			return err
		}
		count++
		if len(buf) >= listChunkBytes {
			return flush()
		}
		return nil
	})
	if err != nil {
		if !started {
			return err
		}
		s.cfg.Logger.Warn("streamed list cut off", "route", r.Pattern, "path", r.URL.Path, "rows_sent", count, "err", err)
		panic(http.ErrAbortHandler)
	}
	buf = append(buf, ']')
	if withCount {
		buf = append(buf, `,"count":`...)
		buf = strconv.AppendInt(buf, int64(count), 10)
	}
	buf = append(buf, "}\n"...)
	if err := flush(); err != nil {
		s.cfg.Logger.Debug("streamed list: client went away", "path", r.URL.Path, "err", err)
	}
	return nil
}

// rowEncoders encodes rows of batches whose schema may change from one batch to
// the next (the base table's and the generations' are built apart), leaving the
// columns in omit out (blob columns).
type rowEncoders struct {
	rollout bool
	omit    []string
	schema  *arrow.Schema
	enc     *schema.RowEncoder
}

func (e *rowEncoders) appendRow(dst []byte, rec arrow.RecordBatch, i int) ([]byte, error) {
	switch s := rec.Schema(); {
	case s == e.schema:
	case e.enc != nil && s.Equal(e.schema):
		// The same schema in another object: compare pointers from now on.
		e.schema = s
		e.enc = e.enc.WithSchema(s)
	default:
		enc, err := schema.NewRowEncoder(s, e.rollout, e.omit...)
		if err != nil {
			return dst, err
		}
		e.schema, e.enc = s, enc
	}
	return e.enc.AppendRow(dst, rec, i)
}

// syncTo makes a read that carries a causal token see every write acknowledged
// with ?flush=true before the token was answered (store.Store.Sync).
func syncTo(r *http.Request, st *store.Store) error {
	after, err := afterParam(r)
	if err != nil || after == 0 {
		return err
	}
	return st.Sync(r.Context(), after)
}

// encodeRows encodes the one-row batches of a List, without the columns in
// omit, and releases them.
func encodeRows(k kindAPI, recs []arrow.RecordBatch, omit []string) ([]json.RawMessage, error) {
	defer func() {
		for _, rec := range recs {
			rec.Release()
		}
	}()
	enc := &rowEncoders{rollout: k.kind == registry.KindRollout, omit: omit}
	out := make([]json.RawMessage, 0, len(recs))
	for _, rec := range recs {
		row, err := enc.appendRow(nil, rec, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, nil
}

// getRow answers a rollout record as {"record": {...}}, or {"record": null} when
// there is none, and a generic row as the bare row object, or a 404 "Row 'x' does
// not exist" - the reference's answers. ?columns= (generic stores) names the
// columns to return, comma-separated; id is always among them. Blob columns
// (a record's binary_payload, a generic store's "blob" columns) are left out
// unless ?columns= names them (api_blob.go). ?version= reads the row as of that
// table version (api_version.go).
func (s *Server) getRow(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		columns, hasColumns := r.URL.Query()["columns"]
		if hasColumns && k.kind == registry.KindRollout {
			return badRequest("columns is supported on generic stores only")
		}
		format, err := parseAnswerFormat(w, r)
		if err != nil {
			return err
		}
		rd, err := s.openRowRead(r, k.kind)
		if err != nil {
			return err
		}
		defer rd.release()
		if format.arrow {
			return s.getRowArrow(w, r, k, format, rd, columns)
		}
		omit := rd.st.BlobColumns() // unless named: a blob is read on request only
		if hasColumns {
			omit = unnamedColumns(omit, columns[0])
		}
		rec, err := rd.readRow(r.Context(), omit)
		if err != nil {
			return err
		}
		if rec == nil {
			if k.missingRowIsNull {
				httpjson.WriteJSON(w, http.StatusOK, map[string]json.RawMessage{k.row: nil})
				return nil
			}
			return notFound("Row '%s' does not exist", rd.id)
		}
		defer rec.Release()
		if hasColumns {
			proj, err := projectColumns(rec, columns[0])
			if err != nil {
				return err
			}
			defer proj.Release()
			rec = proj
		}
		row, err := (&rowEncoders{rollout: k.kind == registry.KindRollout, omit: omit}).appendRow(nil, rec, 0)
		if err != nil {
			return err
		}
		if k.missingRowIsNull {
			httpjson.WriteJSON(w, http.StatusOK, map[string]json.RawMessage{k.row: row})
		} else {
			httpjson.WriteJSON(w, http.StatusOK, json.RawMessage(row))
		}
		return nil
	}
}

// projectColumns returns the columns of rec that text (comma-separated names,
// blanks ignored) names, and id, in schema order. No name at all selects every
// column. A name the schema lacks is a 400 naming it.
func projectColumns(rec arrow.RecordBatch, text string) (arrow.RecordBatch, error) {
	want := map[string]bool{schema.IDColumn: true}
	named := false
	for c := range strings.SplitSeq(text, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if strings.HasPrefix(c, "_") || len(rec.Schema().FieldIndices(c)) == 0 {
			return nil, badRequest("columns: no column %q in this store's schema", c)
		}
		want[c], named = true, true
	}
	var fields []arrow.Field
	var cols []arrow.Array
	for i, f := range rec.Schema().Fields() {
		if !named || want[f.Name] {
			fields = append(fields, f)
			cols = append(cols, rec.Column(i))
		}
	}
	return array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, rec.NumRows()), nil
}
