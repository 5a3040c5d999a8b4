package worker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/refmetrics"
	"github.com/tidemark-io/tidemark/pkg/coord/consumers"
	"github.com/tidemark-io/tidemark/pkg/coord/horizon"
	"github.com/tidemark-io/tidemark/pkg/coord/membership"
	"github.com/tidemark-io/tidemark/pkg/coord/pending"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/pkg/worker/feed"
	"github.com/tidemark-io/tidemark/pkg/worker/httpapi"
	"github.com/tidemark-io/tidemark/pkg/worker/maintain"
	"github.com/tidemark-io/tidemark/pkg/worker/mergesvc"
	"github.com/tidemark-io/tidemark/pkg/worker/rpc"
	"github.com/tidemark-io/tidemark/pkg/worker/sweep"
)

// Config is what a Worker needs. The parts' own configurations are taken whole;
// New sets the fields that tie the parts together (the shard, the logger, the
// metric hooks, the merge slots compaction reserves), so a caller cannot wire
// them inconsistently.
type Config struct {
	// InstanceID names this worker, and its shard in every store. Required.
	InstanceID string
	// Version is the build version registered in etcd and reported by GetInfo.
	Version string

	// HTTPListener serves the HTTP API and /metrics, GRPCListener the
	// WorkerService (with health and reflection). Required; Run closes them.
	HTTPListener, GRPCListener net.Listener
	// AdvertiseHTTP and AdvertiseGRPC are the addresses registered in etcd and
	// reported by GetInfo (membership.AdvertiseAddr of the listeners when empty).
	AdvertiseHTTP, AdvertiseGRPC string

	// Etcd, if set, lists the worker under Prefix/workers/ for the life of Run
	// (a lease of LeaseTTL, membership.DefaultLeaseTTL when zero), and is the
	// task queue the compact routes enqueue to and where named consumers keep
	// their cursors. nil: the worker is not registered (the master then calls it
	// through WORKER_ENDPOINTS) and the compact and consumer routes answer 503.
	Etcd     *clientv3.Client
	Prefix   string
	LeaseTTL time.Duration
	// HorizonInterval is how often the worker publishes its writers' change-feed
	// promises when nothing seals (DefaultHorizonInterval when zero): how far an
	// idle shard may hold the store's feed back. Only with Etcd.
	HorizonInterval time.Duration

	// Store configures every store handle (Store.Bucket is required); New sets
	// its Shard, Logger and read hooks. MaxOpenStores bounds the handles kept
	// open (store.NewStores).
	Store         store.Config
	MaxOpenStores int
	// Merge configures the merger; New sets its Logger and OnPhase.
	Merge merge.Config
	// Sweep configures the sweeps; New sets their Stores, Merger, Merges,
	// Metrics, Logger and Deletes, and MergePending for a worker without Etcd
	// (standalone: no master decides its merges, so its flush sweep merges).
	Sweep sweep.Config
	// Maintain configures compaction and cleanup; New sets its Reserver (the
	// merger: compactions take merge slots and budget), CostFactor and Logger.
	Maintain maintain.Config
	// FeedMaxWait caps the change feed's long polls (httpapi.ServerConfig's). The
	// feed needs Etcd: the stores' horizons are there.
	FeedMaxWait time.Duration

	// MaxBodyBytes, MaxInflightBlobBytes and LargeBlobLogBytes are
	// httpapi.ServerConfig's.
	MaxBodyBytes, MaxInflightBlobBytes, LargeBlobLogBytes int64
	// Auth guards the control surface (and the data routes too with
	// AuthDataRoutes); TLS, if set, serves both servers with it.
	Auth           *auth.Guard
	AuthDataRoutes bool
	TLS            *tls.Config
	// ShutdownTimeout bounds the servers' graceful stop and, separately, the
	// final seal (DefaultShutdownTimeout when zero).
	ShutdownTimeout time.Duration

	// Metrics is the registry /metrics serves (refmetrics.NewProcessRegistry()
	// when nil).
	Metrics *prometheus.Registry
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
}

// Worker is one worker process: the HTTP data API, the gRPC WorkerService the
// master calls, the sweeps, and the etcd registration, over one set of store
// handles, one merger and one merge service (so HTTP and gRPC merges share one
// record of fencing tokens).
type Worker struct {
	cfg          Config
	log          *slog.Logger
	stores       *store.Stores
	service      *rpc.WorkerService
	http         *httpapi.Server
	grpc         *grpc.Server
	sweeper      *sweep.Sweeper
	registration *membership.Registration // nil: not registered
	publisher    *pending.Publisher       // nil: not registered
	peers        *pending.View            // nil: not registered
	keeper       *horizon.Keeper          // nil: no etcd, no change feed
	horizons     *horizon.View            // nil: no etcd, no change feed
	horizonWake  chan struct{}
}

// DefaultShutdownTimeout is Config.ShutdownTimeout's default.
const DefaultShutdownTimeout = httpapi.DefaultShutdownTimeout

// DefaultHorizonInterval is Config.HorizonInterval's default.
const DefaultHorizonInterval = time.Second

// horizonSpacing is the least time between two publications of the promises: a
// worker sealing many stores at once writes them in one transaction.
const horizonSpacing = 100 * time.Millisecond

// New builds the worker of cfg; Run starts it. Nothing is served, registered or
// swept before Run.
func New(cfg Config) (*Worker, error) {
	if cfg.HTTPListener == nil || cfg.GRPCListener == nil {
		return nil, errors.New("worker: HTTPListener and GRPCListener are required")
	}
	if cfg.Store.Bucket == nil {
		return nil, errors.New("worker: Store.Bucket is required")
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
	log := cfg.Logger
	var err error
	if cfg.AdvertiseHTTP == "" {
		if cfg.AdvertiseHTTP, err = membership.AdvertiseAddr(cfg.HTTPListener.Addr()); err != nil {
			return nil, err
		}
	}
	if cfg.AdvertiseGRPC == "" {
		if cfg.AdvertiseGRPC, err = membership.AdvertiseAddr(cfg.GRPCListener.Addr()); err != nil {
			return nil, err
		}
	}
	reads := newReadSeries(cfg.Metrics)
	merges := mergesvc.NewMetrics(cfg.Metrics)

	var registration *membership.Registration
	var queue httpapi.TaskQueue
	var publisher *pending.Publisher // nil: not registered
	var peers *pending.View          // every worker's entries; nil: not registered
	var stores *store.Stores
	var keeper *horizon.Keeper
	var view *horizon.View
	horizonWake := make(chan struct{}, 1)
	var cursors *consumers.Cursors // nil: no etcd, no named consumers
	if cfg.Etcd != nil {
		// Every writer registers its shard for the change feed before it numbers a
		// row, and this worker's feed reads every store's horizon.
		keeper = horizon.NewKeeper(cfg.Etcd, cfg.Prefix, cfg.InstanceID, nil, log)
		view = horizon.NewView(cfg.Etcd, cfg.Prefix, nil, log)
		ttl := cfg.LeaseTTL
		if ttl == 0 {
			ttl = membership.DefaultLeaseTTL
		}
		registration, err = membership.NewRegistration(cfg.Etcd, membership.Worker{
			InstanceID: cfg.InstanceID,
			GRPCAddr:   cfg.AdvertiseGRPC,
			HTTPAddr:   cfg.AdvertiseHTTP,
			Version:    cfg.Version,
		}, membership.WithPrefix(cfg.Prefix), membership.WithLeaseTTL(ttl), membership.WithLogger(log))
		if err != nil {
			return nil, fmt.Errorf("worker: %w", err)
		}
		queue = tasks.New(cfg.Etcd, cfg.Prefix, tasks.WithLogger(log), tasks.WithHolder(cfg.InstanceID))
		cursors = consumers.New(cfg.Etcd, cfg.Prefix)
		// The master merges a store as soon as its pending entries say it is
		// due, instead of at its next stats scan.
		publisher = pending.NewPublisher(cfg.Etcd, func() []pending.Entry { return stores.Pending() },
			registration.Lease, pending.PublisherConfig{Prefix: cfg.Prefix, Instance: cfg.InstanceID, Logger: log})
		// And adds slow down on the whole store's pending count, every worker's
		// shard, not only on what this worker's snapshot holds.
		peers = pending.NewView(cfg.Etcd, cfg.Prefix, nil, log)
	}

	// The drains of this worker's WAL writers hand the files that came due to the
	// cleanup sweeper instead of deleting them inside a merge's commit.
	deletes := wal.NewDeleteQueue(0)
	sc := cfg.Store
	sc.Shard, sc.Logger = cfg.InstanceID, log
	sc.WALOptions = append(slices.Clip(sc.WALOptions), wal.WithDeleteQueue(deletes))
	sc.OnSlowRead = func(target registry.Target, _ int) {
		reads.ReadFanoutWarnings.WithLabelValues(string(target.Kind)).Inc()
	}
	sc.OnRead = func(_ registry.Target, n int) { reads.ReadPendingGenerations.Observe(float64(n)) }
	if publisher != nil {
		sc.OnSnapshot = func(registry.Target) {
			publisher.Notify()
			// A seal may have moved a promise: publish it soon, not at the next tick.
			select {
			case horizonWake <- struct{}{}:
			default:
			}
		}
	}
	if keeper != nil {
		sc.Horizon = keeper
	}
	if peers != nil {
		sc.StorePending = peers.Generations
	}
	stores = store.NewStores(sc, cfg.MaxOpenStores)

	mc := cfg.Merge
	mc.Logger, mc.OnPhase = log, merges.ObserveMergePhase
	merger := merge.New(mc)
	// The one merge service: HTTP and gRPC merges share its record of fencing
	// tokens, and every part counts its seals and merges in its series.
	mergeSvc, err := mergesvc.New(mergesvc.Config{Stores: stores, Merger: merger, Metrics: merges, Logger: log})
	if err != nil {
		return nil, err
	}

	wc := cfg.Sweep
	wc.Stores, wc.Merger, wc.Merges, wc.Logger, wc.Deletes = stores, merger, mergeSvc, log, deletes
	wc.Metrics = sweep.NewMetrics(cfg.Metrics)
	// One owner per merge decision: with etcd the master decides when a store is
	// merged (its merge sweep, merges on demand); a standalone worker has no one
	// else to, so its flush sweep merges what its shard holds pending.
	wc.MergePending = cfg.Etcd == nil
	sweeper, err := sweep.New(wc)
	if err != nil {
		return nil, err
	}

	ac := cfg.Maintain
	ac.Reserver, ac.CostFactor, ac.Logger = merger, merge.PassCostFactor, log.With("component", "maintain")
	svc, err := rpc.NewWorkerService(rpc.WorkerServiceConfig{
		InstanceID: cfg.InstanceID,
		Version:    cfg.Version,
		GRPCAddr:   cfg.AdvertiseGRPC,
		HTTPAddr:   cfg.AdvertiseHTTP,
		Stores:     stores,
		Merger:     merger,
		Merges:     mergeSvc,
		Maintainer: maintain.New(ac),
		Horizons:   rpcHorizons(view),
		Metrics:    rpc.NewMetrics(cfg.Metrics),
		Logger:     log,
	})
	if err != nil {
		return nil, err
	}

	var hz feed.Horizons // nil, not a nil *horizon.View: the feed's 503 tests for it
	if view != nil {
		hz = view
	}
	srv, err := httpapi.NewServer(httpapi.ServerConfig{
		InstanceID:           cfg.InstanceID,
		Logger:               log,
		Metrics:              cfg.Metrics,
		ShutdownTimeout:      cfg.ShutdownTimeout,
		Stores:               stores,
		Merger:               merger,
		MaxBodyBytes:         cfg.MaxBodyBytes,
		MaxInflightBlobBytes: cfg.MaxInflightBlobBytes,
		LargeBlobLogBytes:    cfg.LargeBlobLogBytes,
		Merges:               mergeSvc,
		Tasks:                queue,
		Consumers:            cursors,
		Horizons:             hz,
		FeedMaxWait:          cfg.FeedMaxWait,
		Auth:                 cfg.Auth,
		AuthDataRoutes:       cfg.AuthDataRoutes,
		TLS:                  cfg.TLS,
	})
	if err != nil {
		return nil, err
	}
	gs, err := rpc.NewGRPCServer(rpc.GRPCConfig{Service: svc, Logger: log, Auth: cfg.Auth, TLS: cfg.TLS})
	if err != nil {
		return nil, err
	}
	return &Worker{cfg: cfg, log: log, stores: stores, service: svc, http: srv, grpc: gs,
		sweeper: sweeper, registration: registration, publisher: publisher, peers: peers,
		keeper: keeper, horizons: view, horizonWake: horizonWake}, nil
}

// Handler returns the worker's HTTP routes, for tests that need no listener.
func (w *Worker) Handler() http.Handler { return w.http.Handler() }

// Stores returns the worker's store handles.
func (w *Worker) Stores() *store.Stores { return w.stores }

// Run serves until ctx is done or a server fails, then stops in the order that loses
// nothing and strands nothing:
//
//  1. deregister (revoke the lease), so the master stops calling this worker;
//  2. stop both servers gracefully: accepted requests and merges finish, new ones
//     are refused;
//  3. stop the sweeps;
//  4. seal every open store, so rows acknowledged here (durable in WAL entries
//     already) are visible to every worker without waiting for this one to return.
//
// A server that fails starts the same shutdown; its error is returned. Run is
// called once.
func (w *Worker) Run(ctx context.Context) error {
	log, timeout := w.log, w.cfg.ShutdownTimeout
	log.Info("worker starting", "instance_id", w.cfg.InstanceID, "version", w.cfg.Version, "data_url", w.cfg.Store.Bucket.String(),
		"grpc_addr", w.cfg.AdvertiseGRPC, "http_addr", w.cfg.AdvertiseHTTP, "registered", w.registration != nil)
	sweepCtx, stopSweeps := context.WithCancel(context.WithoutCancel(ctx))
	var sweeps sync.WaitGroup
	sweeps.Go(func() { w.sweeper.Run(sweepCtx) })
	sweeps.Go(func() {
		// Rows acknowledged before a crash and never sealed are durable but read by
		// no one until sealed; do not wait for a write to the store to find them.
		stores, rows, err := w.stores.SealLeftovers(sweepCtx)
		if err != nil && sweepCtx.Err() == nil {
			log.Warn("sealing rows left unsealed by an earlier run failed for some stores; their next write or merge seals them", "err", err)
		}
		if stores > 0 {
			log.Info("sealed rows an earlier run acknowledged and left unsealed", "stores", stores, "rows", rows)
		}
	})

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	registered := make(chan struct{})
	var published sync.WaitGroup
	defer func() { stopRun(); published.Wait() }()
	if w.registration != nil {
		go func() { defer close(registered); _ = w.registration.Run(runCtx) }()
		// The pending entries live under the registration's lease and go when
		// Run revokes it.
		published.Go(func() { w.publisher.Run(runCtx) })
		interval := w.cfg.HorizonInterval
		if interval <= 0 {
			interval = DefaultHorizonInterval
		}
		published.Go(func() {
			w.keeper.Run(runCtx, w.stores.Promises, w.horizonWake, interval, horizonSpacing, nil)
		})
		published.Go(func() { w.horizons.Run(runCtx) })
		published.Go(func() { w.peers.Run(runCtx) })
	} else {
		log.Info("no etcd client: not registering (the master needs this worker in WORKER_ENDPOINTS)")
		close(registered)
	}
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	go func() {
		<-runCtx.Done()
		<-registered // lease revoked (or given up on)
		stopServing()
	}()
	var servers errgroup.Group
	servers.Go(func() error {
		err := w.http.Serve(serveCtx, w.cfg.HTTPListener) // returns after in-flight requests finished
		stopRun()
		return err
	})
	servers.Go(func() error {
		err := rpc.ServeGRPC(serveCtx, w.grpc, w.cfg.GRPCListener, rpc.GRPCServeOptions{
			ShutdownTimeout: timeout, Health: w.service.Health(), Logger: log,
		})
		stopRun()
		return err
	})
	serveErr := servers.Wait()
	<-registered
	stopSweeps()
	sweeps.Wait()
	sealCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := w.stores.Close(sealCtx); err != nil {
		log.Warn("sealing stores at shutdown", "err", err)
	}
	if serveErr == nil {
		log.Info("worker stopped", "instance_id", w.cfg.InstanceID)
	}
	return serveErr
}

// rpcHorizons is the horizons an export reads: nil, not a nil *horizon.View,
// without etcd.
func rpcHorizons(view *horizon.View) rpc.Horizons {
	if view == nil {
		return nil
	}
	return view
}
