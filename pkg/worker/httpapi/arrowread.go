package httpapi

// The Arrow answers of the read routes: a list (a page, a stream in id order, a
// stream in storage order), a get, a batch get and a change-feed page. Each reads
// what its JSON answer reads, with the same parameters, through one store.View
// whose version and schema are known before any row is (the stream's schema goes
// first), and hands its rows to an arrowBatcher.

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// currentView is what an Arrow answer reads: src when it is a view already (a
// version, source=wal), else st now, fixed (store.Store.Current).
func currentView(ctx context.Context, st *store.Store, src rowSource) (*store.View, error) {
	if v, ok := src.(*store.View); ok {
		return v, nil
	}
	return st.Current(ctx)
}

// listArrow answers a list of st read from src with opts (listRows parsed them):
// with storage, every row in storage order (store.Scan); without limit (< 0),
// every row in id order, streamed; else one page, read whole before its answer
// so that its headers carry its count and next cursor.
func (s *Server) listArrow(w http.ResponseWriter, r *http.Request, f answerFormat, st *store.Store, src rowSource, opts store.ListOptions, omit []string, limit int, storage bool) error {
	ctx := r.Context()
	view, err := currentView(ctx, st, src)
	if err != nil {
		return err
	}
	schema := arrowSchema(view.Schema(), without(omit), arrowMetadata(st, view.Version()))
	header := arrowHeader(view.Version())
	switch {
	case storage:
		sc, err := view.OpenScan(ctx, scanOptions(opts))
		if err != nil {
			return err
		}
		return s.serveArrow(w, r, f, schema, header, func(emit func(arrow.RecordBatch) error) error {
			b := newArrowBatcher(ctx, schema, schema.NumFields(), nil, emit)
			defer b.Release()
			if err := sc.Each(ctx, b.AddBatch); err != nil {
				return err
			}
			return b.Finish()
		})
	case limit < 0:
		return s.serveArrow(w, r, f, schema, header, func(emit func(arrow.RecordBatch) error) error {
			b := newArrowBatcher(ctx, schema, schema.NumFields(), nil, emit)
			defer b.Release()
			if err := view.Stream(ctx, opts, b.AddRow); err != nil {
				return err
			}
			return b.Finish()
		})
	}
	page, err := readArrowPage(ctx, view, opts, limit, schema)
	if err != nil {
		return err
	}
	defer page.release()
	header.Set(httpjson.CountHeader, strconv.Itoa(page.rows))
	if page.more {
		header.Set(httpjson.NextCursorHeader, encodeCursor(page.last))
	}
	return s.serveArrow(w, r, f, schema, header, page.write)
}

// arrowPage is one page of a list, in the answer's batches.
type arrowPage struct {
	batches []arrow.RecordBatch
	rows    int
	// more says rows follow the page; last is then its last row's id.
	more bool
	last string
}

func (p *arrowPage) write(emit func(arrow.RecordBatch) error) error {
	for _, rec := range p.batches {
		if err := emit(rec); err != nil {
			return err
		}
	}
	return nil
}

func (p *arrowPage) release() {
	for _, rec := range p.batches {
		rec.Release()
	}
	p.batches = nil
}

// errPageRead stops the walk of a page once a row past it is seen.
var errPageRead = errors.New("page read")

// readArrowPage reads the page of at most limit rows that opts selects from
// view (what store.View.Page answers), into batches of schema.
func readArrowPage(ctx context.Context, view *store.View, opts store.ListOptions, limit int, schema *arrow.Schema) (*arrowPage, error) {
	p := &arrowPage{}
	if limit == 0 {
		return p, nil
	}
	opts.Limit = limit // the walk reads the page's row groups at once
	b := newArrowBatcher(ctx, schema, schema.NumFields(), nil, func(rec arrow.RecordBatch) error {
		rec.Retain()
		p.batches = append(p.batches, rec)
		return nil
	})
	defer b.Release()
	err := view.Stream(ctx, opts, func(rec arrow.RecordBatch, i int) error {
		if p.rows == limit {
			p.more = true
			return errPageRead
		}
		p.rows++
		if p.rows == limit { // the next cursor, needed only when a row follows
			ids, _, err := rowkey.Columns(rec)
			if err != nil {
				return err
			}
			p.last = strings.Clone(ids.Value(i))
		}
		return b.AddRow(rec, i)
	})
	if errors.Is(err, errPageRead) {
		err = nil
	}
	if err == nil {
		err = b.Finish()
	}
	if err != nil {
		p.release()
		return nil, err
	}
	return p, nil
}

// scanOptions are the ScanOptions of a list's options: its columns and filter.
func scanOptions(opts store.ListOptions) store.ScanOptions {
	return store.ScanOptions{Columns: opts.Columns, Filter: opts.Filter, FilterColumns: opts.FilterColumns}
}

// getRowArrow answers a get of one row (rd, opened by getRow) as an Arrow stream
// of one row: its columns but the blob ones, or those columns names (text, when
// given) and id. A generic row that does not exist is a 404; a rollout record, a
// stream of no rows, as JSON answers {"record": null}.
func (s *Server) getRowArrow(w http.ResponseWriter, r *http.Request, k kindAPI, f answerFormat, rd rowRead, columns []string) error {
	ctx := r.Context()
	view, err := currentView(ctx, rd.st, rd.src)
	if err != nil {
		return err
	}
	omit := rd.st.BlobColumns()
	keep := without(omit)
	if columns != nil {
		named, err := namedColumns(view.Schema(), columns[0])
		if err != nil {
			return err
		}
		omit = unnamedColumns(omit, columns[0])
		if len(named) > 0 {
			keep = func(c string) bool { return named[c] }
		} else {
			keep = without(omit)
		}
	}
	schema := arrowSchema(view.Schema(), keep, arrowMetadata(rd.st, view.Version()))
	// A point read's base row has the columns it names only: _seq among them.
	var rec arrow.RecordBatch
	err = view.GetMany(ctx, []string{rd.id}, append(rd.st.ColumnsExcept(omit), rowkey.SeqColumn), func(row arrow.RecordBatch) error {
		row.Retain()
		rec = row
		return nil
	})
	if err != nil {
		return err
	}
	if rec == nil && !k.missingRowIsNull {
		return notFound("Row '%s' does not exist", rd.id)
	}
	header := arrowHeader(view.Version())
	header.Set(httpjson.CountHeader, "0")
	if rec != nil {
		defer rec.Release()
		header.Set(httpjson.CountHeader, "1")
	}
	return s.serveArrow(w, r, f, schema, header, func(emit func(arrow.RecordBatch) error) error {
		b := newArrowBatcher(ctx, schema, schema.NumFields(), nil, emit)
		defer b.Release()
		if rec != nil {
			if err := b.AddBatch(rec); err != nil {
				return err
			}
		}
		return b.Finish()
	})
}

// namedColumns is the set of columns text (comma-separated, blanks ignored)
// names, as projectColumns reads it: a name table lacks, or a hidden one, is a
// 400 naming it. Empty: no name at all.
func namedColumns(table *arrow.Schema, text string) (map[string]bool, error) {
	named := map[string]bool{}
	for c := range strings.SplitSeq(text, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if strings.HasPrefix(c, "_") || len(table.FieldIndices(c)) == 0 {
			return nil, badRequest("columns: no column %q in this store's schema", c)
		}
		named[c] = true
	}
	return named, nil
}

// getRowsArrow answers a batch get (rd, opened by getRows) of ids, reading the
// columns read, as an Arrow stream: the rows found, in the order first asked.
func (s *Server) getRowsArrow(w http.ResponseWriter, r *http.Request, f answerFormat, rd rowRead, ids, read []string) error {
	ctx := r.Context()
	view, err := currentView(ctx, rd.st, rd.src)
	if err != nil {
		return err
	}
	schema := arrowSchema(view.Schema(), func(c string) bool { return slices.Contains(read, c) }, arrowMetadata(rd.st, view.Version()))
	return s.serveArrow(w, r, f, schema, arrowHeader(view.Version()), func(emit func(arrow.RecordBatch) error) error {
		b := newArrowBatcher(ctx, schema, schema.NumFields(), nil, emit)
		defer b.Release()
		cols := append(slices.Clip(read), rowkey.SeqColumn)
		err := view.GetMany(ctx, ids, cols, func(rec arrow.RecordBatch) error { return b.AddRow(rec, 0) })
		if err != nil {
			return err
		}
		return b.Finish()
	})
}

// changesArrow answers a change-feed page of st (read by listChanges) as an
// Arrow stream: each change's row without the columns omit names, and its
// cursor in a last column, _cursor; the next cursor in a header.
func (s *Server) changesArrow(w http.ResponseWriter, r *http.Request, f answerFormat, st *store.Store, page store.ChangesPage, omit []string) error {
	v := page.Version
	if v == 0 { // the page read nothing: the version of the store as this worker sees it
		v = st.Snapshot().Base.Version
	}
	cursor := arrow.Field{Name: cursorColumn, Type: arrow.BinaryTypes.String}
	schema := arrowSchema(st.Snapshot().Base.ArrowSchema(), without(omit), arrowMetadata(st, v), cursor)
	header := arrowHeader(v)
	header.Set(httpjson.NextCursorHeader, page.Next.Cursor())
	header.Set(httpjson.CountHeader, strconv.Itoa(len(page.Changes)))
	done := 0
	cursors := func(n int) ([]arrow.Array, error) {
		bld := array.NewStringBuilder(memory.DefaultAllocator)
		defer bld.Release()
		for _, c := range page.Changes[done : done+n] {
			bld.Append(c.Position.Cursor())
		}
		done += n
		return []arrow.Array{bld.NewArray()}, nil
	}
	return s.serveArrow(w, r, f, schema, header, func(emit func(arrow.RecordBatch) error) error {
		b := newArrowBatcher(r.Context(), schema, schema.NumFields()-1, cursors, emit)
		defer b.Release()
		for _, c := range page.Changes {
			if err := b.AddRow(c.Row, 0); err != nil {
				return err
			}
		}
		return b.Finish()
	})
}

// listStorage answers a JSON list of every row of st (read from src with opts)
// in storage order (?order=storage): store.Scan's batches, streamed as listAll
// streams the id-ordered walk's rows.
func (s *Server) listStorage(w http.ResponseWriter, r *http.Request, k kindAPI, st *store.Store, src rowSource, opts store.ListOptions, omit []string) error {
	ctx := r.Context()
	view, err := currentView(ctx, st, src)
	if err != nil {
		return err
	}
	sc, err := view.OpenScan(ctx, scanOptions(opts))
	if err != nil {
		return err
	}
	return s.streamRows(w, r, k, omit, true, func(each func(rec arrow.RecordBatch, i int) error) error {
		return sc.Each(ctx, func(rec arrow.RecordBatch) error {
			for i := range int(rec.NumRows()) {
				if err := each(rec, i); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// orderParam parses ?order=: id, the default (a list in id order), or storage
// (every row in storage order, the fast snapshot read: store.Scan). Storage
// order has no cursor, so with a limit, cursor, start_after or offset it is a
// 400 naming the conflict.
func orderParam(r *http.Request) (storage bool, err error) {
	q := r.URL.Query()
	order, ok := q["order"]
	switch {
	case !ok || order[0] == "id":
		return false, nil
	case order[0] != "storage":
		return false, badRequest("order must be id or storage, got %q", order[0])
	}
	for _, p := range []string{"limit", "cursor", "start_after", "offset"} {
		if q.Has(p) {
			return false, badRequest("order=storage reads every row, in storage order, and cannot be combined with %s: pages and cursors are in id order (order=id)", p)
		}
	}
	return true, nil
}
