package worker

import (
	"net/http"
	"strconv"
	"time"

	"github.com/tidemark-io/tidemark/internal/httpjson"
)

// Routes served while draining: load balancers and Prometheus must still see the
// worker (health then says "draining" with a 503).
const (
	healthPattern  = "GET /api/v1/health"
	metricsPattern = "GET /metrics"
)

// unmatchedRoute labels requests no pattern matched (404, 405), so raw paths never
// become label values.
const unmatchedRoute = "unmatched"

// admit wraps the routes with what every request goes through: while the server is
// draining, new requests are refused with 503 OVERLOADED (except health and
// metrics), and every request is counted in Series.Requests{route,method,code} and
// timed in Series.RequestDuration{route}, where route is the mux pattern that
// matched (e.g. "GET /api/v1/rollouts/{name}"), never the raw path.
func (s *Server) admit(mux *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		_, route := mux.Handler(r)
		exempt := route == healthPattern || route == metricsPattern
		if route == "" {
			route = unmatchedRoute
		}
		rec := &statusRecorder{ResponseWriter: w}
		// Deferred, so that a request whose handler cut its answer off (a streamed
		// list whose read failed midway panics with http.ErrAbortHandler) is
		// counted too, under the status it had sent.
		defer func() {
			if p := recover(); p != nil {
				if rec.status == 0 {
					rec.status = http.StatusInternalServerError // what the client gets: no answer
				}
				defer panic(p) // net/http's to handle, once the request is counted
			}
			if rec.status == 0 {
				rec.status = http.StatusOK // the handler wrote nothing: net/http answers 200
			}
			s.cfg.Series.Requests.WithLabelValues(route, methodLabel(r.Method), strconv.Itoa(rec.status)).Inc()
			s.cfg.Series.RequestDuration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}()
		if s.draining.Load() && !exempt {
			rec.Header().Set("Connection", "close")
			httpjson.WriteError(rec, http.StatusServiceUnavailable, CodeOverloaded, "worker is shutting down")
			return
		}
		next.ServeHTTP(rec, r)
	})
}

// methodLabel bounds the method label to the standard methods.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// statusRecorder remembers the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusRecorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
