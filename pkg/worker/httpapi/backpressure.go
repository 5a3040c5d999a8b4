package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/worker/feed"
)

// CodeConsumerLag (503): an add to a store with max_consumer_lag, refused while
// one of its named consumers lags behind the store's horizon by more
// (feed.ErrConsumerLag); the message names the consumer, its lag and the limit.
// Nothing was written.
const CodeConsumerLag = "CONSUMER_LAG"

// errShuttingDown ends an add's backpressure wait when the server starts draining:
// the add was not written, and the client sends it again (to another worker).
var errShuttingDown = &apiError{status: http.StatusServiceUnavailable, code: CodeOverloaded,
	message: "worker is shutting down; the add was not written, send it again"}

// admitAdd is the add backpressure every add request goes through before its rows
// are written. First, a store with max_consumer_lag refuses the add (503
// CONSUMER_LAG, Retry-After) while one of its named consumers lags behind by more
// (feed.Backpressure, counted in tidemark_add_consumer_lag_refusals_total).
// Then store.Store.AdmitAdd: it waits while the store is behind on its
// merges, and refuses (503 OVERLOADED, Retry-After) when it is too far behind. A
// wait is answered in httpjson.BackpressureHeader and observed in
// tidemark_add_backpressure_delay_seconds; a refusal is counted in
// tidemark_add_backpressure_refusals_total.
//
// The delay is per request, not per row: rows of concurrent requests are group
// committed into one WAL entry anyway, so what costs a merge is the generations
// the entries are sealed into, not the rows in them; and a client that sends large
// batches is already the one to spare, so it is not made to wait longer for them.
//
// The wait follows the request's context, not the detached one the write runs
// under: a client that gives up while it waits has nothing written. It ends too
// when the server starts draining (errShuttingDown), so a shutdown does not wait
// for adds that have not begun.
func (s *Server) admitAdd(w http.ResponseWriter, r *http.Request, st *store.Store) error {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(s.stopping, func() { cancel(errShuttingDown) })
	defer stop()
	e := st.Entry()
	kind := string(e.Kind)
	if err := s.consumerLag.Admit(ctx, e.Target(), time.Duration(e.MaxConsumerLag)); err != nil {
		if errors.Is(err, feed.ErrConsumerLag) {
			s.cfg.Series.Feed.ConsumerLagRefusals.WithLabelValues(kind).Inc()
			return &apiError{status: http.StatusServiceUnavailable, code: CodeConsumerLag, message: err.Error(), cause: err}
		}
		return err
	}
	a, err := st.AdmitAdd(ctx)
	if a.Delay > 0 {
		w.Header().Set(httpjson.BackpressureHeader, strconv.FormatInt(a.Delay.Milliseconds(), 10))
	}
	switch {
	case errors.Is(err, store.ErrOverloaded):
		s.cfg.Series.BackpressureRefusals.WithLabelValues(kind).Inc()
		return err
	case err != nil:
		return err
	case a.Delay > 0:
		s.cfg.Series.BackpressureDelay.WithLabelValues(kind).Observe(a.Delay.Seconds())
	}
	return nil
}
