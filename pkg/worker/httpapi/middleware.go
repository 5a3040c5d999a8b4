package httpapi

import (
	"net/http"
	"time"

	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/internal/refmetrics"
)

// Routes served while draining: load balancers and Prometheus must still see the
// worker (health then says "draining" with a 503).
const (
	healthPattern  = "GET /api/v1/health"
	metricsPattern = "GET /metrics"
)

// admit wraps the routes with what every request goes through: while the server is
// draining, new requests are refused with 503 OVERLOADED (except health and
// metrics), and every request is counted in Series.Requests{method,path,status}
// and timed in Series.RequestDuration with the same labels, where path is the mux
// pattern that matched without its method (e.g. "/api/v1/rollouts/{name}"), never
// the raw path.
func (s *Server) admit(mux *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		_, route := mux.Handler(r)
		exempt := route == healthPattern || route == metricsPattern
		rec := &refmetrics.StatusRecorder{ResponseWriter: w}
		// Deferred, so that a request whose handler cut its answer off (a streamed
		// list whose read failed midway panics with http.ErrAbortHandler) is
		// counted too, under the status it had sent.
		defer func() {
			if p := recover(); p != nil {
				if rec.Status == 0 {
					rec.Status = http.StatusInternalServerError // what the client gets: no answer
				}
				defer panic(p) // net/http's to handle, once the request is counted
			}
			s.cfg.Series.HTTP.Observe(r.Method, route, rec.StatusOr200(), time.Since(start))
		}()
		if s.draining.Load() && !exempt {
			rec.Header().Set("Connection", "close")
			httpjson.WriteError(rec, http.StatusServiceUnavailable, CodeOverloaded, "worker is shutting down")
			return
		}
		next.ServeHTTP(rec, r)
	})
}
