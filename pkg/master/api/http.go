package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/internal/httpserver"
	"github.com/tidemark-io/tidemark/internal/refmetrics"
	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/master/dashboard"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/master/workerhttp"
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
	CodeAlreadyExists      = "ALREADY_EXISTS"              // 409: an export's id names another task
	CodeInternal           = httpjson.CodeInternal         // 500: details are logged, not returned
	CodeUnavailable        = "UNAVAILABLE"                 // 503: etcd or the object store does not answer
	CodeDataLoss           = "DATA_LOSS"                   // 500: a stored object is corrupt; the message names it
	CodeUnauthenticated    = auth.CodeUnauthenticated      // 401: no valid credential
	CodeBadGateway         = "BAD_GATEWAY"                 // 502: a worker answered what the master cannot pass on
)

// HTTPConfig is what the master's HTTP API needs.
type HTTPConfig struct {
	// Admin enqueues the tasks of POST /api/v1/tasks (target check, dedupe, wake)
	// and reads the store registry for the experiment routes.
	Admin     *AdminService
	Tasks     *tasks.Queue
	Scanner   *scanner.Scanner
	Discovery fanout.Discovery
	// EtcdCheck reports whether etcd answers; health is 503 while it does not.
	// It is called with a context bounded by HealthTimeout.
	EtcdCheck func(ctx context.Context) error
	// Metrics is the registry GET /metrics serves.
	Metrics *prometheus.Registry
	// CallTimeout bounds one request's etcd work (DefaultCallTimeout).
	CallTimeout time.Duration
	Logger      *slog.Logger
	// Auth guards every /api/v1 route but health (health and metrics stay open);
	// nil: no authentication (--auth-disabled).
	Auth *auth.Guard
	// DataURL is the bucket's URL without credentials (objstore.Bucket.String()):
	// experiments' uri is their table directory under it.
	DataURL string
	// Workers reads records through a worker's HTTP data API. Required.
	Workers *workerhttp.Client
	// Dashboard, if set, is served under /ui/ (it checks its own sessions), and
	// GET / redirects to it.
	Dashboard http.Handler
	// Requests, if set, counts and times every request (http_requests_total).
	Requests *refmetrics.HTTP
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

// StatsPage is the body of GET /api/v1/stats.
type StatsPage struct {
	Stats         []stats.Row `json:"stats"`
	NextPageToken string      `json:"next_page_token,omitempty"`
}

// WorkerList is the body of GET /api/v1/workers.
type WorkerList struct {
	Workers []WorkerEntry `json:"workers"`
}

type httpAPI struct {
	cfg HTTPConfig
}

// NewHTTPHandler returns the master's HTTP routes, the reference system's
// (lance-context master's routes.rs) and Tidemark's own:
//
//	GET  /metrics                            Prometheus metrics
//	GET  /api/v1/health                      {"status":"ok"}, or 503 {"status":"etcd unreachable"}
//	GET  /api/v1/tasks                       {tasks,total,limit,offset,next_page_token}: ?limit=&offset= or
//	                                         ?page_token=, &state=&kind=&target=&newest_first= (default true)
//	POST /api/v1/tasks                       {kind,target,depends_on}: enqueue, 202 with the task
//	GET  /api/v1/tasks/{id}                  one task
//	POST /api/v1/rescan                      observe every store now: {scanned,...}
//	GET  /api/v1/experiments                 {experiments,total,limit,offset}: ?search=&limit=&offset=
//	GET  /api/v1/experiments/{name}          one store's summary; ?fresh=true observes it first
//	GET  /api/v1/experiments/{name}/records  {records,has_more,limit,offset,source}, read through a worker
//	GET  /api/v1/stats                       ?limit=&page_token=
//	GET  /api/v1/workers                     the workers the master calls
//	GET  /ui/…                               the operator dashboard (cfg.Dashboard), GET / redirects there
//
// Every /api/v1 route but health requires the credential cfg.Auth checks (401
// UNAUTHENTICATED without it). Tasks' and experiments' timestamps are Unix
// milliseconds, as in the reference. Errors are {"error":{"code","message"}}
// with 400, 401, 404, 405, 409, 502, 503 or 500.
func NewHTTPHandler(cfg HTTPConfig) (http.Handler, error) {
	switch {
	case cfg.Admin == nil:
		return nil, errors.New("master http: Admin is required")
	case cfg.Tasks == nil:
		return nil, errors.New("master http: Tasks is required")
	case cfg.Scanner == nil:
		return nil, errors.New("master http: Scanner is required")
	case cfg.Discovery == nil:
		return nil, errors.New("master http: Discovery is required")
	case cfg.EtcdCheck == nil:
		return nil, errors.New("master http: EtcdCheck is required")
	case cfg.Workers == nil:
		return nil, errors.New("master http: Workers is required")
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
	mux.Handle("POST /api/v1/tasks", guard(a.route(a.enqueueTask)))
	mux.Handle("GET /api/v1/tasks/{id}", guard(a.route(a.getTask)))
	mux.Handle("POST /api/v1/rescan", guard(a.routeWithin(RescanTimeout, a.rescan)))
	mux.Handle("GET /api/v1/experiments", guard(a.route(a.listExperiments)))
	mux.Handle("GET /api/v1/experiments/{name}", guard(a.route(a.getExperiment)))
	mux.Handle("GET /api/v1/experiments/{name}/records", guard(a.routeWithin(RecordsTimeout, a.listRecords)))
	mux.Handle("GET /api/v1/stats", guard(a.route(a.listStats)))
	mux.Handle("GET /api/v1/workers", guard(a.route(a.listWorkers)))
	if cfg.Dashboard != nil {
		mux.Handle(dashboard.Root, cfg.Dashboard)
		mux.Handle("GET /{$}", http.RedirectHandler(dashboard.Root, http.StatusFound))
	}
	if cfg.Requests != nil {
		return cfg.Requests.Wrap(mux, httpjson.RouteErrors(mux)), nil
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

// route runs h under the call timeout.
func (a *httpAPI) route(h routeFunc) http.Handler { return a.routeWithin(a.cfg.CallTimeout, h) }

// routeWithin runs h under timeout.
func (a *httpAPI) routeWithin(timeout time.Duration, h routeFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		body, err := h(ctx, r)
		if err != nil {
			a.writeFailure(w, r, err)
			return
		}
		writeAnswer(w, body)
	})
}

// writeFailure answers err with the status its code maps to. Internal errors are
// logged and answered without their details, as the worker does.
func (a *httpAPI) writeFailure(w http.ResponseWriter, r *http.Request, err error) {
	if answered, ok := errors.AsType[*workerAnswerError](err); ok {
		a.cfg.Logger.Warn("master API request failed on a worker's answer", "method", r.Method, "route", r.Pattern, "path", r.URL.Path, "err", err)
		httpjson.WriteError(w, answered.status, answered.code, answered.message)
		return
	}
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
	case codes.AlreadyExists:
		status, name = http.StatusConflict, CodeAlreadyExists
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

func (a *httpAPI) listStats(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	if err := onlyParams(q, "limit", "page_token"); err != nil {
		return nil, err
	}
	limit, err := pageParam(q.Get("limit"), "limit", 0)
	if err != nil {
		return nil, err
	}
	rows, next, err := statsPage(ctx, a.cfg.Scanner, limit, q.Get("page_token"))
	if err != nil {
		return nil, err
	}
	if rows == nil {
		rows = []stats.Row{}
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

// Serve answers requests of h on ln until ctx is done, then shuts down gracefully:
// it stops accepting, waits up to timeout for requests in flight, and cuts off the
// rest. It returns nil after a clean shutdown. ln is closed in every case.
func Serve(ctx context.Context, h http.Handler, ln net.Listener, timeout time.Duration, log *slog.Logger) error {
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return httpserver.Serve(ctx, hs, ln, timeout, log, nil)
}
