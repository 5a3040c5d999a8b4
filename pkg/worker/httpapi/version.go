package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// Reads at a version: ?version=<v> on a list or a get of rows reads the store as
// of base-table version v (store.View: the rows merges had committed by v, without
// the rows still in WAL generations), the version a store's info, an add's answer
// and POST /rollouts/{name}/checkout report. Such a read answers the same rows
// every time while v is retained; a version retention pruned, or one never
// written, is a 404 naming the readable range.

// rowSource is what the row routes read: the store now (base and pending rows) or
// a store.View at a version.
type rowSource interface {
	Get(ctx context.Context, id string) (arrow.RecordBatch, error)
	Page(ctx context.Context, opts store.ListOptions) (store.Page, error)
	Stream(ctx context.Context, opts store.ListOptions, fn func(rec arrow.RecordBatch, row int) error) error
	GetMany(ctx context.Context, ids, cols []string, fn func(rec arrow.RecordBatch) error) error
}

// versionParam parses ?version= (0 when absent): a positive integer. A version
// read is fixed, so a causal token (?after=, httpjson.AfterHeader) beside it asks for
// something it cannot mean and is refused.
func versionParam(r *http.Request) (uint64, error) {
	q := r.URL.Query()
	text, ok := q["version"]
	if !ok {
		return 0, nil
	}
	v, err := strconv.ParseUint(text[0], 10, 64)
	if err != nil || v == 0 {
		return 0, badRequest("version must be a table version (a positive integer), got %q", text[0])
	}
	if q.Get("after") != "" || r.Header.Get(httpjson.AfterHeader) != "" {
		return 0, badRequest("version and a causal token (after) cannot be combined: a read at a version does not change")
	}
	return v, nil
}

// rowRead is what a read of one row (GET .../{name}/<rows>/{id}, or its blob)
// or of several (the batch get) opened: the row's id (empty for the batch get),
// the store's handle and what to read rows from.
type rowRead struct {
	id  string
	st  *store.Store
	src rowSource
	// release gives the handle back, once the read has answered.
	release func()
}

// openRowRead opens the read of one row of a store of kind: the path's name and
// id and ?version= parsed, the store opened, and read at that version or now
// (rowsAt, which answers a version it cannot read with a 404). The one opening
// path of the row get, the blob get and (through openStoreRead) the batch get,
// so a fix to one lands in all.
func (s *Server) openRowRead(r *http.Request, kind registry.Kind) (rowRead, error) {
	name, err := pathName(r)
	if err != nil {
		return rowRead{}, err
	}
	id, err := pathID(r)
	if err != nil {
		return rowRead{}, err
	}
	rd, err := s.openStoreRead(r, kind, name)
	rd.id = id
	return rd, err
}

// readRow is the newest row of rd.id, nil when it has none, read without the
// columns omit names where they are not in memory already (the base table's
// rows: store.Store.ColumnsExcept), so a blob left out of the answer is not read
// from storage. The caller releases the row.
func (rd rowRead) readRow(ctx context.Context, omit []string) (arrow.RecordBatch, error) {
	var row arrow.RecordBatch
	err := rd.src.GetMany(ctx, []string{rd.id}, rd.st.ColumnsExcept(omit), func(rec arrow.RecordBatch) error {
		rec.Retain()
		row = rec
		return nil
	})
	return row, err
}

// openStoreRead is openRowRead for a route that reads rows of store name
// without an {id} in its path (the batch get): ?version= parsed, the store
// opened and read at that version or now.
func (s *Server) openStoreRead(r *http.Request, kind registry.Kind, name string) (rowRead, error) {
	version, err := versionParam(r)
	if err != nil {
		return rowRead{}, err
	}
	st, release, err := s.cfg.Stores.Open(r.Context(), kind, name)
	if err != nil {
		return rowRead{}, err
	}
	src, err := rowsAt(r, st, version)
	if err != nil {
		release()
		return rowRead{}, err
	}
	return rowRead{st: st, src: src, release: release}, nil
}

// rowsAt returns what a row route reads: st as of version v, or, for v = 0, st
// now, brought up to the request's causal token (syncTo).
//
// ?source=wal (Tidemark's, for the master's records route) reads the pending rows
// alone, not yet merged into any version; source=all, the default, reads both.
func rowsAt(r *http.Request, st *store.Store, v uint64) (rowSource, error) {
	switch source := r.URL.Query().Get("source"); {
	case source == "" || source == "all":
	case source == "wal" && v != 0:
		return nil, badRequest("source=wal and version cannot be combined: a version holds merged rows only")
	case source == "wal":
		if err := syncTo(r, st); err != nil {
			return nil, err
		}
		return st.Pending(r.Context())
	default:
		return nil, badRequest("source must be all or wal, got %q", source)
	}
	if v == 0 {
		if err := syncTo(r, st); err != nil {
			return nil, err
		}
		return st, nil
	}
	view, err := st.At(r.Context(), v)
	if err != nil {
		return nil, versionFailure(st.Entry(), err)
	}
	return view, nil
}

// versionFailure answers a version the store cannot be read at with a 404 that
// says why and which versions can be read; other failures stay as they are.
func versionFailure(e registry.Entry, err error) error {
	var ve *store.VersionError
	if !errors.As(err, &ve) {
		return err
	}
	title := "Rollout"
	if e.Kind == registry.KindGeneric {
		title = "Generic"
	}
	msg := fmt.Sprintf("Version %d of %s store '%s' does not exist", ve.Version, title, e.Name)
	if ve.Pruned {
		msg = fmt.Sprintf("Version %d of %s store '%s' is no longer retained", ve.Version, title, e.Name)
	}
	if ve.Oldest != 0 {
		msg += fmt.Sprintf("; the oldest readable version is %d, the newest %d", ve.Oldest, ve.Newest)
	}
	return &apiError{status: http.StatusNotFound, code: CodeNotFound, message: msg, cause: err}
}
