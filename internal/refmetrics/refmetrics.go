// Package refmetrics holds the metric conventions Tidemark shares with the
// reference system (lance-context) so that its dashboards and alerts work
// against both: the HTTP request series every server exports and the histogram
// bucket ladders.
//
// Invariants: a label value is never a raw request path (only the route pattern
// that matched, or "unknown"), and the method label takes one of the standard
// methods or "other", so a client cannot grow the number of series.
package refmetrics

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// RequestBuckets are the reference's upper bounds (seconds) of request-scale
// latencies; JobBuckets those of jobs that can take minutes (merges, tasks).
// Few buckets on purpose: each one is a series.
var (
	RequestBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60}
	JobBuckets     = []float64{0.5, 2, 10, 30, 120, 600, 1800}
)

// UnknownPath is the path label of a request no route pattern matched (404, 405).
const UnknownPath = "unknown"

// HTTP is a server's request series: http_requests_total and
// http_request_duration_seconds, both by method, path (the route pattern without
// its method, e.g. /api/v1/rollouts/{name}) and status.
type HTTP struct {
	Requests *prometheus.CounterVec
	Duration *prometheus.HistogramVec
}

// NewHTTP creates the request series and registers them with reg (none when reg
// is nil).
func NewHTTP(reg prometheus.Registerer) *HTTP {
	labels := []string{"method", "path", "status"}
	h := &HTTP{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_requests_total", Help: "HTTP requests by method, route path and status code.",
		}, labels),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "http_request_duration_seconds", Help: "End-to-end HTTP handler latency, by method, route path and status code.",
			Buckets: RequestBuckets,
		}, labels),
	}
	if reg != nil {
		reg.MustRegister(h.Requests, h.Duration)
	}
	return h
}

// Observe records one request answered status after d; pattern is the ServeMux
// pattern that matched ("" for none).
func (h *HTTP) Observe(method, pattern string, status int, d time.Duration) {
	labels := []string{MethodLabel(method), PathLabel(pattern), strconv.Itoa(status)}
	h.Requests.WithLabelValues(labels...).Inc()
	h.Duration.WithLabelValues(labels...).Observe(d.Seconds())
}

// Wrap returns next recording every request in h, its path label found by mux.
// A handler that writes nothing answered 200 (net/http's default).
func (h *HTTP) Wrap(mux *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		_, pattern := mux.Handler(r)
		rec := &StatusRecorder{ResponseWriter: w}
		defer func() { h.Observe(r.Method, pattern, rec.StatusOr200(), time.Since(start)) }()
		next.ServeHTTP(rec, r)
	})
}

// PathLabel is the path label for a ServeMux pattern: the pattern without its
// method ("GET /api/v1/rollouts/{name}" is "/api/v1/rollouts/{name}"), as the
// reference labels a request by the route template that matched; UnknownPath
// when none did.
func PathLabel(pattern string) string {
	if pattern == "" {
		return UnknownPath
	}
	if _, path, ok := strings.Cut(pattern, " "); ok {
		return strings.TrimSpace(path)
	}
	return pattern
}

// MethodLabel bounds the method label to the standard methods ("other").
func MethodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// StatusRecorder remembers the status a handler answered.
type StatusRecorder struct {
	http.ResponseWriter
	Status int
}

// WriteHeader records the first status written.
func (w *StatusRecorder) WriteHeader(status int) {
	if w.Status == 0 {
		w.Status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

// Write records 200 if no status was written before.
func (w *StatusRecorder) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer (Flush,
// deadlines) of streamed answers.
func (w *StatusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// StatusOr200 is the status answered, 200 if the handler wrote nothing.
func (w *StatusRecorder) StatusOr200() int {
	if w.Status == 0 {
		return http.StatusOK
	}
	return w.Status
}

// NewProcessRegistry returns a Prometheus registry holding the Go runtime and
// process collectors (go_*, process_*), which every Tidemark process exports
// beside its own series, as the reference's do.
func NewProcessRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}
