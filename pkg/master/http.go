package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/pkg/dashboard"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// HTTP server limits. Every route is a small read, so the timeouts are short.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = time.Minute
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 1 << 20
)

// HealthTimeout bounds the etcd probe of GET /api/v1/health.
const HealthTimeout = 2 * time.Second

// Error codes of the {"error":{"code","message"}} answers (the worker's shape).
const (
	CodeInvalidRequest     = httpjson.CodeInvalidRequest   // 400: the client's mistake; the message says which
	CodeNotFound           = httpjson.CodeNotFound         // 404: no such route, task or stats row
	CodeMethodNotAllowed   = httpjson.CodeMethodNotAllowed // 405
	CodeFailedPrecondition = "FAILED_PRECONDITION"         // 409
	CodeInternal           = httpjson.CodeInternal         // 500: details are logged, not returned
	CodeUnavailable        = "UNAVAILABLE"                 // 503: etcd or the object store does not answer
	CodeDataLoss           = "DATA_LOSS"                   // 500: a stored object is corrupt; the message names it
	CodeUnauthenticated    = auth.CodeUnauthenticated      // 401: no valid credential
)

// HTTPConfig is what the master's HTTP API needs.
type HTTPConfig struct {
	Tasks     *tasks.Store
	Scanner   *scanner.Scanner
	Discovery Discovery
	// EtcdCheck reports whether etcd answers; health is 503 while it does not.
	// It is called with a context bounded by HealthTimeout.
	EtcdCheck func(ctx context.Context) error
	// Metrics is the registry GET /metrics serves.
	Metrics *prometheus.Registry
	// CallTimeout bounds one request's etcd work (DefaultCallTimeout).
	CallTimeout time.Duration
	Logger      *slog.Logger
	// Auth guards the task, stats and workers routes (health and metrics stay
	// open); nil: no authentication (--auth-disabled).
	Auth *auth.Guard
	// Dashboard, if set, is served under /ui/ (it checks its own sessions), and
	// GET / redirects to it.
	Dashboard http.Handler
}

// ErrorBody is the JSON body of every error answer.
type ErrorBody = httpjson.ErrorBody

// ErrorDetail is the error inside ErrorBody.
type ErrorDetail = httpjson.ErrorDetail

// HealthBody is the body of GET /api/v1/health.
type HealthBody struct {
	Status string `json:"status"` // "ok" or "etcd unreachable"
	Detail string `json:"detail,omitempty"`
}

// TaskPage is the body of GET /api/v1/tasks.
type TaskPage struct {
	Tasks         []tasks.Task `json:"tasks"`
	NextPageToken string       `json:"next_page_token,omitempty"`
}

// StatsPage is the body of GET /api/v1/stats.
type StatsPage struct {
	Stats         []scanner.Row `json:"stats"`
	NextPageToken string        `json:"next_page_token,omitempty"`
}

// WorkerList is the body of GET /api/v1/workers.
type WorkerList struct {
	Workers []WorkerEntry `json:"workers"`
}

type httpAPI struct {
	cfg HTTPConfig
}

// NewHTTPHandler returns the master's HTTP routes:
//
//	GET /metrics                 Prometheus metrics
//	GET /api/v1/health           {"status":"ok"}, or 503 {"status":"etcd unreachable"}
//	GET /api/v1/tasks            ?state=&kind=&target=&limit=&page_token=&newest_first=
//	GET /api/v1/tasks/{id}       one task
//	GET /api/v1/stats            ?limit=&page_token=
//	GET /api/v1/workers          the workers the master calls
//	GET /ui/…                    the operator dashboard (cfg.Dashboard), GET / redirects there
//
// The tasks, stats and workers routes require the credential cfg.Auth checks
// (401 UNAUTHENTICATED without it). Errors are {"error":{"code","message"}} with
// 400, 401, 404, 405, 503 or 500.
func NewHTTPHandler(cfg HTTPConfig) (http.Handler, error) {
	switch {
	case cfg.Tasks == nil:
		return nil, errors.New("master http: Tasks is required")
	case cfg.Scanner == nil:
		return nil, errors.New("master http: Scanner is required")
	case cfg.Discovery == nil:
		return nil, errors.New("master http: Discovery is required")
	case cfg.EtcdCheck == nil:
		return nil, errors.New("master http: EtcdCheck is required")
	}
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &httpAPI{cfg: cfg}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Metrics, promhttp.HandlerOpts{Registry: cfg.Metrics}))
	mux.HandleFunc("GET /api/v1/health", a.health)
	guard := cfg.Auth.Require
	mux.Handle("GET /api/v1/tasks", guard(a.route(a.listTasks)))
	mux.Handle("GET /api/v1/tasks/{id}", guard(a.route(a.getTask)))
	mux.Handle("GET /api/v1/stats", guard(a.route(a.listStats)))
	mux.Handle("GET /api/v1/workers", guard(a.route(a.listWorkers)))
	if cfg.Dashboard != nil {
		mux.Handle(dashboard.Root, cfg.Dashboard)
		mux.Handle("GET /{$}", http.RedirectHandler(dashboard.Root, http.StatusFound))
	}
	return httpjson.RouteErrors(mux), nil
}

// health answers ok when etcd answers a read within HealthTimeout: a master that
// cannot reach etcd can neither claim nor finish tasks.
func (a *httpAPI) health(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), HealthTimeout)
	defer cancel()
	if err := a.cfg.EtcdCheck(ctx); err != nil {
		httpjson.WriteJSON(w, http.StatusServiceUnavailable, HealthBody{Status: "etcd unreachable", Detail: err.Error()})
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, HealthBody{Status: "ok"})
}

// routeFunc is an API route: it returns its answer or its failure, which route
// turns into the JSON error shape in one place.
type routeFunc func(ctx context.Context, r *http.Request) (any, error)

func (a *httpAPI) route(h routeFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), a.cfg.CallTimeout)
		defer cancel()
		body, err := h(ctx, r)
		if err != nil {
			a.writeFailure(w, r, err)
			return
		}
		httpjson.WriteJSON(w, http.StatusOK, body)
	})
}

// writeFailure answers err with the status its code maps to. Internal errors are
// logged and answered without their details, as the worker does.
func (a *httpAPI) writeFailure(w http.ResponseWriter, r *http.Request, err error) {
	code, msg := classify(r.Context(), err)
	var status int
	var name string
	switch code {
	case codes.InvalidArgument:
		status, name = http.StatusBadRequest, CodeInvalidRequest
	case codes.NotFound:
		status, name = http.StatusNotFound, CodeNotFound
	case codes.FailedPrecondition:
		status, name = http.StatusConflict, CodeFailedPrecondition
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		status, name = http.StatusServiceUnavailable, CodeUnavailable
		a.cfg.Logger.Warn("master API request refused", "method", r.Method, "route", r.Pattern, "path", r.URL.Path, "err", err)
	case codes.DataLoss:
		status, name = http.StatusInternalServerError, CodeDataLoss
		a.cfg.Logger.Error("master API request failed on a corrupt object", "method", r.Method, "route", r.Pattern, "path", r.URL.Path, "err", err)
	default:
		status, name = http.StatusInternalServerError, CodeInternal
		a.cfg.Logger.Error("master API request failed", "method", r.Method, "route", r.Pattern, "path", r.URL.Path, "err", err)
		msg = "internal error"
	}
	httpjson.WriteError(w, status, name, msg)
}

func (a *httpAPI) listTasks(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	if err := onlyParams(q, "state", "kind", "target", "limit", "page_token", "newest_first"); err != nil {
		return nil, err
	}
	limit, err := intParam(q, "limit")
	if err != nil {
		return nil, err
	}
	newest := false
	if v := q.Get("newest_first"); v != "" {
		if newest, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("%w: newest_first %q is not a boolean", tasks.ErrInvalidArgument, v)
		}
	}
	list, next, err := a.cfg.Tasks.List(ctx, tasks.ListFilter{
		State:       tasks.State(q.Get("state")),
		Kind:        tasks.Kind(q.Get("kind")),
		Target:      q.Get("target"),
		Limit:       limit,
		PageToken:   q.Get("page_token"),
		NewestFirst: newest,
	})
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = []tasks.Task{}
	}
	return TaskPage{Tasks: list, NextPageToken: next}, nil
}

func (a *httpAPI) getTask(ctx context.Context, r *http.Request) (any, error) {
	if err := onlyParams(r.URL.Query()); err != nil {
		return nil, err
	}
	return a.cfg.Tasks.Get(ctx, r.PathValue("id"))
}

func (a *httpAPI) listStats(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	if err := onlyParams(q, "limit", "page_token"); err != nil {
		return nil, err
	}
	limit, err := intParam(q, "limit")
	if err != nil {
		return nil, err
	}
	rows, next, err := statsPage(ctx, a.cfg.Scanner, limit, q.Get("page_token"))
	if err != nil {
		return nil, err
	}
	if rows == nil {
		rows = []scanner.Row{}
	}
	return StatsPage{Stats: rows, NextPageToken: next}, nil
}

func (a *httpAPI) listWorkers(ctx context.Context, r *http.Request) (any, error) {
	if err := onlyParams(r.URL.Query()); err != nil {
		return nil, err
	}
	ws, err := listWorkers(ctx, a.cfg.Discovery)
	if err != nil {
		return nil, err
	}
	return WorkerList{Workers: ws}, nil
}

// onlyParams refuses query parameters a route does not know, so a misspelt filter
// (?stat=queued) is a 400 instead of an unfiltered list.
func onlyParams(q url.Values, known ...string) error {
	var unknown []string
	for k := range q {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	want := "none"
	if len(known) > 0 {
		want = strings.Join(known, ", ")
	}
	return fmt.Errorf("%w: unknown query parameter %s (known: %s)", tasks.ErrInvalidArgument, strings.Join(unknown, ", "), want)
}

func intParam(q url.Values, name string) (int, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q is not an integer", tasks.ErrInvalidArgument, name, v)
	}
	return n, nil
}

// serveHTTP answers requests on ln until ctx is done, then shuts down gracefully:
// it stops accepting, waits up to timeout for requests in flight, and cuts off the
// rest. It returns nil after a clean shutdown. ln is closed in every case.
func serveHTTP(ctx context.Context, h http.Handler, ln net.Listener, timeout time.Duration, log *slog.Logger) error {
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	addr := ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("http server listening", "addr", addr)
	select {
	case err := <-served:
		return fmt.Errorf("http server on %s: %w", addr, err)
	case <-ctx.Done():
	}
	log.Info("http server shutting down", "addr", addr, "timeout", timeout.String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	shutdownErr := hs.Shutdown(sctx)
	if shutdownErr != nil {
		_ = hs.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http server on %s: %w", addr, err)
	}
	if shutdownErr != nil {
		return fmt.Errorf("http server on %s: requests still running after %s: %w", addr, timeout, shutdownErr)
	}
	log.Info("http server stopped", "addr", addr)
	return nil
}
