package httpapi

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/httpjson"
	"github.com/tidemark-io/tidemark/internal/httpserver"
	"github.com/tidemark-io/tidemark/internal/refmetrics"
	"github.com/tidemark-io/tidemark/pkg/coord/consumers"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/worker/feed"
	"github.com/tidemark-io/tidemark/pkg/worker/mergesvc"
)

// HTTP server limits. Bodies of later data routes (record batches with binary payloads)
// may be large, so the read and write timeouts are generous; the header timeout is
// short because slow headers are only ever a stuck or hostile client.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 2 * time.Minute
	writeTimeout      = 2 * time.Minute
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 1 << 20
)

// DefaultShutdownTimeout bounds graceful shutdown when ServerConfig leaves it zero.
const DefaultShutdownTimeout = 20 * time.Second

// ServerConfig is what a Server needs.
type ServerConfig struct {
	// InstanceID names this worker, and its shard in every store. Required.
	InstanceID string
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Metrics is the registry /metrics serves; nil means refmetrics.NewProcessRegistry().
	Metrics *prometheus.Registry
	// ShutdownTimeout bounds how long Serve waits for in-flight requests once its
	// context is done; zero means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// Stores and Merger serve the data API; without Stores only health and metrics
	// are served.
	Stores *store.Stores
	Merger *merge.Merger
	// Series are the API's metrics, registered in Metrics; nil creates them.
	Series *Metrics
	// MaxBodyBytes limits request bodies (DefaultMaxBodyBytes), and so the size
	// of one blob.
	MaxBodyBytes int64
	// MaxInflightBlobBytes is the in-flight blob budget: the bytes adds and blob
	// downloads may hold in memory at once (blobBudget); 503 above it. Zero means
	// DefaultMaxInflightBlobBytes, negative no budget.
	MaxInflightBlobBytes int64
	// LargeBlobLogBytes is the size at or above which an added rollout blob is
	// logged at warn level with its store and record id (observeBlobSizes).
	// Zero means DefaultLargeBlobLogBytes, negative never.
	LargeBlobLogBytes int64
	// Merges runs the merge routes (mergesvc.Service.MergeTarget, the one merge
	// path of the worker, which the gRPC service shares; HTTP triggers carry no
	// fencing token) and counts seals; nil builds one from Stores and Merger,
	// counting in series registered in Metrics.
	Merges *mergesvc.Service
	// Tasks, if set, is where POST .../compact and .../export enqueue their tasks
	// (the task store in etcd); without it those routes answer 503.
	Tasks TaskQueue
	// Consumers, if set, keeps the change feed's named consumers' committed
	// cursors (etcd); without it the consumer routes answer 503.
	Consumers *consumers.Cursors
	// Horizons, if set, is the worker's view of each store's horizon, up to which
	// the change feed (GET .../changes) delivers rows; without it (no etcd) that
	// route answers 503. FeedMaxWait caps its long polls' ?wait=
	// (feed.DefaultMaxWait when zero).
	Horizons    feed.Horizons
	FeedMaxWait time.Duration

	// Auth guards the control routes (POST /api/v1/internal/*, the merge-wal,
	// compact and export routes) always, and every data route (flush included) too when
	// AuthDataRoutes is set; health and metrics are never guarded. nil: no authentication
	// (--auth-disabled).
	Auth           *auth.Guard
	AuthDataRoutes bool
	// TLS, if set, serves HTTPS with it (its ClientCAs verify client
	// certificates, which Auth may require).
	TLS *tls.Config
}

// DefaultMaxBodyBytes bounds a request body: larger adds are refused with 413 before
// they are read into memory.
const DefaultMaxBodyBytes = 64 << 20

// Server is the worker's HTTP server.
type Server struct {
	cfg     ServerConfig
	handler http.Handler
	// draining is set once Serve's context is done: new requests are refused with
	// 503 while accepted ones finish (see admit).
	draining atomic.Bool
	// stopping is cancelled when draining is set: what waits inside a request
	// that has not begun its work (an add's backpressure wait) ends with it.
	stopping context.Context
	stop     context.CancelFunc
	// blobs is the in-flight blob budget (ServerConfig.MaxInflightBlobBytes).
	blobs *blobBudget
	// consumerLag refuses adds to stores whose consumers lag beyond their
	// max_consumer_lag; nil (every add admitted) without Consumers and Horizons.
	consumerLag *feed.Backpressure
}

// NewServer returns a server for cfg.
func NewServer(cfg ServerConfig) (*Server, error) {
	// The instance id is this worker's shard name in every store.
	if err := wal.ValidateShard(cfg.InstanceID); err != nil {
		return nil, fmt.Errorf("instance id: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = refmetrics.NewProcessRegistry()
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.Stores != nil && cfg.Merger == nil {
		return nil, fmt.Errorf("worker server: Stores without a Merger (the merge routes need one)")
	}
	if cfg.Series == nil {
		cfg.Series = NewMetrics(cfg.Metrics)
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Stores != nil && cfg.Merges == nil {
		m, err := mergesvc.New(mergesvc.Config{Stores: cfg.Stores, Merger: cfg.Merger,
			Metrics: mergesvc.NewMetrics(cfg.Metrics), Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		cfg.Merges = m
	}
	if cfg.MaxInflightBlobBytes == 0 {
		cfg.MaxInflightBlobBytes = DefaultMaxInflightBlobBytes
	}
	if cfg.FeedMaxWait <= 0 {
		cfg.FeedMaxWait = feed.DefaultMaxWait
	}
	if cfg.LargeBlobLogBytes == 0 {
		cfg.LargeBlobLogBytes = DefaultLargeBlobLogBytes
	}
	s := &Server{cfg: cfg, blobs: newBlobBudget(cfg.MaxInflightBlobBytes)}
	s.stopping, s.stop = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/health", s.health)
	if cfg.Stores != nil {
		s.registerDataRoutes(mux)
		s.registerConsumerRoutes(mux)
		if cfg.Consumers != nil {
			cfg.Metrics.MustRegister(feed.NewLagCollector(cfg.Stores, cfg.Consumers, cfg.Horizons, cfg.Logger))
			if cfg.Horizons != nil {
				s.consumerLag = feed.NewBackpressure(cfg.Consumers, cfg.Horizons, nil, cfg.Logger)
			}
		}
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Metrics, promhttp.HandlerOpts{
		Registry: cfg.Metrics, // promhttp's own error counters land in the same registry
	}))
	s.handler = s.admit(mux, httpjson.RouteErrors(mux))
	return s, nil
}

// Handler returns the server's routes, for tests that need no listener.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve answers requests on ln until ctx is done, then shuts down gracefully: it stops
// accepting, waits up to the shutdown timeout for in-flight requests, and closes ln.
// It returns nil after a clean shutdown, and an error if serving failed or requests
// were still running when the timeout passed (they are then cut off).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	log := s.cfg.Logger
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// New requests are refused (health answers draining) before the shutdown
	// starts waiting for the accepted ones.
	return httpserver.Serve(ctx, hs, ln, s.cfg.ShutdownTimeout, log.With("instance_id", s.cfg.InstanceID, "tls", s.cfg.TLS != nil),
		func() { s.draining.Store(true); s.stop() })
}

// healthResponse is the body of GET /api/v1/health.
type healthResponse struct {
	Status     string `json:"status"`
	InstanceID string `json:"instance_id"`
}

// health answers "ok", or "draining" with 503 once the server is shutting down, so
// load balancers stop sending requests.
func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if s.draining.Load() {
		httpjson.WriteJSON(w, http.StatusServiceUnavailable, healthResponse{Status: "draining", InstanceID: s.cfg.InstanceID})
		return
	}
	httpjson.WriteJSON(w, http.StatusOK, healthResponse{Status: "ok", InstanceID: s.cfg.InstanceID})
}
