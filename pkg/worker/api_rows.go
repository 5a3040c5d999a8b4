package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/schema"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/wal"
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

// addRows appends rows durably to this worker's shard; with ?flush=true it also
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
		rows, err := s.decodeRowsBody(w, r, k)
		if err != nil {
			return err
		}
		st, release, err := s.cfg.Stores.Open(r.Context(), k.kind, name)
		if err != nil {
			return err
		}
		defer release()
		rec, err := decodeRows(st, rows)
		if err != nil {
			return err
		}
		defer rec.Release()

		// Accepted: from here on the client cannot cancel the write.
		ctx, cancel := detached(r)
		defer cancel()
		added := int(rec.NumRows())
		seq := after
		if added > 0 {
			if seq, err = st.AppendAfter(ctx, rec, after); err != nil {
				return err
			}
			s.cfg.Series.AppendedRows.WithLabelValues(string(k.kind)).Add(float64(added))
			if st.Entry().SealOnAdd {
				s.cfg.Series.Flushes.WithLabelValues("success", string(k.kind)).Inc()
			}
		}
		if flush {
			if _, err := s.seal(ctx, st); err != nil {
				return internalError(err, "%d rows were added durably but the seal failed; they become visible at the next seal", added)
			}
		}
		w.Header().Set(SeqHeader, strconv.FormatUint(seq, 10))
		httpjson.WriteJSON(w, http.StatusOK, struct {
			Added int `json:"added"`
			// Seq is the causal token of this add (see AfterHeader). It exceeds
			// 2^53: a JavaScript client should take the header's text instead.
			Seq uint64 `json:"seq"`
		}{added, seq})
		return nil
	}
}

// seal seals st's memtable and counts the seal (a seal that found nothing to seal
// is not counted, as in the flush sweeper). It returns nil, nil then.
func (s *Server) seal(ctx context.Context, st *store.Store) (*wal.Generation, error) {
	kind := string(st.Entry().Kind)
	g, err := st.Seal(ctx)
	switch {
	case err != nil:
		s.cfg.Series.Flushes.WithLabelValues("failure", kind).Inc()
		return nil, err
	case g != nil:
		s.cfg.Series.Flushes.WithLabelValues("success", kind).Inc()
	}
	return g, nil
}

// listRows answers {"<rows>": [...], "count": n}: live rows in the store's stable
// order, after offset, at most limit, filtered (rollout stores only).
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
		opts := store.ListOptions{Limit: limit, Offset: offset}
		text, hasFilters := r.URL.Query()["filters"]
		switch {
		case hasFilters && k.kind == registry.KindRollout:
			f, err := schema.ParseRolloutFilters(text[0])
			if err != nil {
				return fmt.Errorf("filters: %w", err)
			}
			if !f.Empty() {
				opts.Filter = f.Mask
			}
		case hasFilters:
			return badRequest("filters are supported on rollout stores only")
		}
		st, release, err := s.cfg.Stores.Open(r.Context(), k.kind, name)
		if err != nil {
			return err
		}
		defer release()
		if err := syncTo(r, st); err != nil {
			return err
		}
		out := []json.RawMessage{}
		if limit > 0 { // store.ListOptions reads Limit 0 as "no limit"
			recs, err := st.List(r.Context(), opts)
			if err != nil {
				return err
			}
			out, err = encodeRows(recs)
			if err != nil {
				return err
			}
		}
		httpjson.WriteJSON(w, http.StatusOK, map[string]any{k.rows: out, "count": len(out)})
		return nil
	}
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

// encodeRows encodes the one-row batches of a List and releases them.
func encodeRows(recs []arrow.RecordBatch) ([]json.RawMessage, error) {
	defer func() {
		for _, rec := range recs {
			rec.Release()
		}
	}()
	out := make([]json.RawMessage, 0, len(recs))
	for _, rec := range recs {
		row, err := schema.EncodeRow(rec, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, nil
}

// getRow answers {"<row>": {...}}. A missing id is {"record": null} on rollout
// stores and a 404 naming it on generic stores.
func (s *Server) getRow(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		name, err := pathName(r)
		if err != nil {
			return err
		}
		id, err := pathID(r)
		if err != nil {
			return err
		}
		st, release, err := s.cfg.Stores.Open(r.Context(), k.kind, name)
		if err != nil {
			return err
		}
		defer release()
		if err := syncTo(r, st); err != nil {
			return err
		}
		rec, err := st.Get(r.Context(), id)
		if err != nil {
			return err
		}
		var row json.RawMessage // nil encodes as null
		if rec != nil {
			defer rec.Release()
			if row, err = schema.EncodeRow(rec, 0); err != nil {
				return err
			}
		} else if !k.missingRowIsNull {
			return notFound("row %q not found in %s store %q", id, k.kind, name)
		}
		httpjson.WriteJSON(w, http.StatusOK, map[string]json.RawMessage{k.row: row})
		return nil
	}
}
