package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"errors"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/coord/consumers"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/worker/feed"
)

const (
	// defaultFeedLimit and maxFeedLimit bound ?limit= of a feed page: a page is
	// held in memory whole, as a list page is.
	defaultFeedLimit = 100
	maxFeedLimit     = maxListLimit
)

// CodeFeedUnavailable (503): the change feed cannot answer on this worker (no
// etcd to read horizons from), or could not read the store's horizon.
const CodeFeedUnavailable = "FEED_UNAVAILABLE"

// errNoHorizons answers the feed on a worker without etcd: nothing says which rows
// are safe to deliver.
var errNoHorizons = &apiError{status: http.StatusServiceUnavailable, code: CodeFeedUnavailable,
	message: "the change feed needs etcd (ETCD_ENDPOINTS): this worker has no store horizons to deliver rows up to"}

// changeAnswer is one row of a feed page: its cursor (the page's next cursor, had
// it ended there) and the row as the list route renders it.
type changeAnswer struct {
	Cursor string          `json:"cursor"`
	Row    json.RawMessage `json:"row"`
}

// changesAnswer is the body of a 200 to GET .../changes.
type changesAnswer struct {
	Changes    []changeAnswer `json:"changes"`
	NextCursor string         `json:"next_cursor"`
}

// feedRequest is a feed request's parameters.
type feedRequest struct {
	cursor rowkey.Position
	now    bool // ?cursor=now: from the horizon when the request began
	limit  int
	wait   time.Duration
	// columns is what ?columns= names: the columns answered (id always); nil
	// when it names none (every column but the blobs).
	columns []string
	filter  rowFilter
}

// parseFeedRequest reads ?cursor=, ?limit=, ?wait=, ?columns= and the filters,
// with a 400 naming what is wrong.
func (s *Server) parseFeedRequest(r *http.Request, k kindAPI) (feedRequest, error) {
	q := r.URL.Query()
	var fr feedRequest
	switch c := q.Get("cursor"); c {
	case "now":
		fr.now = true
	default:
		p, err := rowkey.ParseCursor(c)
		if err != nil {
			return feedRequest{}, badRequest("cursor: %v", err)
		}
		fr.cursor = p
	}
	limit, err := intParam(q.Get("limit"), "limit", defaultFeedLimit)
	if err != nil {
		return feedRequest{}, err
	}
	if limit < 1 || limit > maxFeedLimit {
		return feedRequest{}, badRequest("limit must be between 1 and %d, got %d", maxFeedLimit, limit)
	}
	fr.limit = limit
	if text := q.Get("wait"); text != "" {
		d, err := time.ParseDuration(text)
		if err != nil || d < 0 {
			return feedRequest{}, badRequest("wait must be a non-negative Go duration such as 10s or 500ms, got %q", text)
		}
		fr.wait = min(d, s.cfg.FeedMaxWait)
	}
	// No name at all (?columns=) is every column but the blobs, as in a get.
	for c := range strings.SplitSeq(q.Get("columns"), ",") {
		if c = strings.TrimSpace(c); c != "" && !slices.Contains(fr.columns, c) {
			fr.columns = append(fr.columns, c)
		}
	}
	if fr.filter, err = parseRowFilter(r, k); err != nil {
		return feedRequest{}, err
	}
	return fr, nil
}

// listChanges answers GET /rollouts/{name}/changes and /generic/{name}/changes: the
// rows whose newest version was written after ?cursor= (absent: from the
// beginning; now: from the store's horizon), oldest first, up to the horizon,
// at most ?limit= (100; at most 10,000) of them, and the next cursor. With
// ?wait= it waits (up to FEED_MAX_WAIT) for the horizon to move while the page is
// empty, and ends early with the empty page when the server shuts down. Filters
// (?filter= on generic stores, ?filters= on rollout stores) apply as in a list;
// ?columns= names the columns answered (id always), blob columns are left out
// unless named. ?consumer= without ?cursor= starts from that named consumer's
// committed cursor.
func (s *Server) listChanges(k kindAPI) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		if s.cfg.Horizons == nil {
			return errNoHorizons
		}
		name, err := pathName(r)
		if err != nil {
			return err
		}
		fr, err := s.parseFeedRequest(r, k)
		if err != nil {
			return err
		}
		format, err := parseAnswerFormat(w, r)
		if err != nil {
			return err
		}
		st, release, err := s.cfg.Stores.Open(r.Context(), k.kind, name)
		if err != nil {
			return err
		}
		defer release()
		if consumer := r.URL.Query().Get("consumer"); consumer != "" && !r.URL.Query().Has("cursor") {
			// A consumer resuming: from its committed cursor (the beginning if it
			// never committed).
			if err := consumers.ValidateName(consumer); err != nil {
				return badRequest("consumer: %v", err)
			}
			p, _, err := s.committedCursor(r.Context(), st.Target(), consumer)
			if err != nil {
				return err
			}
			fr.cursor, fr.now = p, false
		}
		opts := store.ChangesOptions{Limit: fr.limit}
		if opts.Filter, opts.FilterColumns, err = fr.filter.compile(st); err != nil {
			return err
		}
		omit := st.BlobColumns()
		switch {
		case fr.columns != nil:
			all := st.ColumnsExcept(nil)
			for _, c := range fr.columns {
				if !slices.Contains(all, c) {
					return badRequest("columns: no column %q in this store's schema", c)
				}
			}
			omit = slices.DeleteFunc(all, func(c string) bool { return c == rowkey.IDColumn || slices.Contains(fr.columns, c) })
			opts.Columns = fr.columns
		case len(omit) > 0:
			opts.Columns = st.ColumnsExcept(omit) // a blob the page leaves out is not read
		}
		page, err := s.feedPage(w, r, st, fr, opts)
		if err != nil {
			return err
		}
		defer page.Release()
		s.cfg.Series.Feed.Pages.WithLabelValues(string(k.kind)).Inc()
		s.cfg.Series.Feed.Rows.WithLabelValues(string(k.kind)).Add(float64(len(page.Changes)))
		if format.arrow {
			return s.changesArrow(w, r, format, st, page, omit)
		}
		ans := changesAnswer{Changes: make([]changeAnswer, 0, len(page.Changes)), NextCursor: page.Next.Cursor()}
		enc := &rowEncoders{rollout: k.kind == registry.KindRollout, omit: omit}
		for _, c := range page.Changes {
			row, err := enc.appendRow(nil, c.Row, 0)
			if err != nil {
				return err
			}
			ans.Changes = append(ans.Changes, changeAnswer{Cursor: c.Position.Cursor(), Row: row})
		}
		httpjson.WriteJSON(w, http.StatusOK, ans)
		return nil
	}
}

// feedPage reads st's feed with feed.Read (which keeps the order the feed's
// correctness rests on), letting a long poll's answer come after the server's
// write timeout, and answering a horizon that could not be read with a 503.
func (s *Server) feedPage(w http.ResponseWriter, r *http.Request, st *store.Store, fr feedRequest, opts store.ChangesOptions) (store.ChangesPage, error) {
	if fr.wait > 0 {
		// The answer may come after a wait longer than the server's write timeout.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(fr.wait + writeTimeout))
	}
	page, err := feed.Read(r.Context(), s.cfg.Horizons, st, feed.Request{Cursor: fr.cursor, Now: fr.now, Wait: fr.wait, Options: opts},
		s.stopping.Done())
	if errors.Is(err, feed.ErrHorizonUnavailable) {
		return store.ChangesPage{}, &apiError{status: http.StatusServiceUnavailable, code: CodeFeedUnavailable,
			message: "the store's horizon could not be read from etcd; retry later", cause: err}
	}
	return page, err
}
