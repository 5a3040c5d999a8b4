package master

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/grpcserver"
	"github.com/tidemark-io/tidemark/internal/refmetrics"
	"github.com/tidemark-io/tidemark/pkg/coord/consumers"
	"github.com/tidemark-io/tidemark/pkg/coord/horizon"
	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/pkg/coord/membership"
	"github.com/tidemark-io/tidemark/pkg/master/api"
	"github.com/tidemark-io/tidemark/pkg/master/dashboard"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/master/workerhttp"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// Master is one master replica: an etcd session, the scheduler and its runners,
// the stats scanner, the merge sweep, the prune loop, the AdminService and the
// HTTP API. Several replicas may run on one prefix; etcd coordinates them.
type Master struct {
	cfg     Config
	log     *slog.Logger
	session *sessionKeeper
	tasks   *tasks.Queue
	scanner *scanner.Scanner
	sweeper *scanner.MergeSweeper
	demand  *scanner.MergeDemand
	compact *scanner.CompactionSweeper
	orphans *fanout.Orphans
	sched   *Scheduler
	metrics *Metrics
	health  *health.Server
	grpc    *grpc.Server
	http    http.Handler
	ui      *dashboard.Dashboard // nil when disabled
	// horizons follows every store's change-feed horizon for the dashboard's
	// consumer lags; nil when the dashboard is disabled.
	horizons *horizon.View
}

// New checks cfg and builds a master; Run runs it.
func New(cfg Config) (*Master, error) {
	cfg, ttl, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	m := &Master{cfg: cfg, log: log, metrics: NewMetrics(cfg.Metrics)}
	m.session = &sessionKeeper{client: cfg.Client, ttl: ttl, log: log.With("component", "session")}
	m.tasks = tasks.New(cfg.Client, cfg.Prefix, tasks.WithLogger(log), tasks.WithHolder(cfg.ID),
		tasks.WithOnEnqueue(m.metrics.ObserveEnqueue))
	m.newScanning()
	runners, err := m.runners()
	if err != nil {
		return nil, err
	}
	sc := cfg.Scheduler
	sc.Tasks, sc.Lease, sc.Runners = m.tasks, m.session.lease, runners
	sc.OnFinish, sc.OnPhase, sc.Logger = m.metrics.ObserveTask, m.metrics.ObservePhase, log.With("component", "scheduler")
	sc.OnDone = m.compactOnDemand
	m.sched = NewScheduler(sc)
	m.session.lost = m.sched.AbandonLease
	if err := m.newServers(); err != nil {
		return nil, err
	}
	return m, nil
}

// withDefaults checks c and fills in what it leaves to defaults; ttl is LeaseTTL
// in etcd's unit (whole seconds, rounded up).
func (c Config) withDefaults() (_ Config, ttl int, _ error) {
	switch {
	case c.Client == nil:
		return c, 0, errors.New("master: Client (etcd) is required")
	case c.Bucket == nil:
		return c, 0, errors.New("master: Bucket (DATA_URL) is required")
	}
	if c.FanOut.Shape != "" {
		if _, err := fanout.ParseShape(string(c.FanOut.Shape)); err != nil {
			return c, 0, fmt.Errorf("master: FanOut.Shape (MERGE_FANOUT): %w", err)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registry == nil {
		c.Registry = registry.New(c.Bucket)
	}
	c.Prefix = keys.NormalizePrefix(c.Prefix)
	if c.Discovery == nil {
		c.Discovery = &membership.Discovery{Client: c.Client, Prefix: c.Prefix}
	}
	if c.Metrics == nil {
		c.Metrics = refmetrics.NewProcessRegistry()
	}
	setDefault(&c.LeaseTTL, DefaultLeaseTTL)
	setDefault(&c.ShutdownTimeout, DefaultShutdownTimeout)
	setDefault(&c.ProbeInterval, DefaultProbeInterval)
	setDefault(&c.OrphanGrace, fanout.DefaultOrphanGrace)
	setDefault(&c.TaskRetention.Count, DefaultRetentionCount)
	setDefault(&c.TaskRetention.Age, DefaultRetentionAge)
	// Derived settings (issue 43: fewer settings): each follows the one it
	// depends on unless a caller sets it.
	setDefault(&c.TaskRetention.PruneInterval, PruneIntervalFor(c.TaskRetention.Age))
	setDefault(&c.FanOut.WorkerTimeout, WorkerTimeoutFor(c.Scheduler.TaskTimeout))
	setDefault(&c.Scheduler.MergeConcurrency, MergeConcurrencyFor(c.Scheduler.TaskConcurrency))
	ttl = int((c.LeaseTTL + time.Second - 1) / time.Second)
	if ttl < 2 {
		return c, 0, fmt.Errorf("master: lease TTL %s is shorter than 2s", c.LeaseTTL)
	}
	return c, ttl, nil
}

// PruneIntervalFor is the period of the deletion of old finished tasks that
// TASK_RETENTION_AGE age implies: DefaultPruneInterval, or a quarter of age when
// that is shorter (at least a second), so a task outlives its age by at most a
// quarter of it.
func PruneIntervalFor(age time.Duration) time.Duration {
	if age <= 0 {
		age = DefaultRetentionAge
	}
	return max(min(DefaultPruneInterval, age/4), time.Second)
}

// WorkerTimeoutFor is the bound on one worker's merge in a merge_wal fan-out
// that TASK_TIMEOUT taskTimeout implies: a sixth of it (10 min at the default
// hour), so a stuck worker fails the task with its name well before the task's
// own deadline, with room left for the serial shape's other workers.
func WorkerTimeoutFor(taskTimeout time.Duration) time.Duration {
	if taskTimeout <= 0 {
		taskTimeout = DefaultTaskTimeout
	}
	return taskTimeout / 6
}

// MergeConcurrencyFor is the merge_wal tasks running at once on a replica that
// TASK_CONCURRENCY taskConcurrency implies: four times as many (8 at the
// default 2), since a merge_wal task costs the master a few calls while the
// workers do the work, and stores must not wait for each other's merges.
func MergeConcurrencyFor(taskConcurrency int) int {
	if taskConcurrency <= 0 {
		taskConcurrency = DefaultTaskConcurrency
	}
	return 4 * taskConcurrency
}

// newScanning builds the stats scanner, the merge and compaction sweeps, merges on
// demand, and the orphan tracker the merge sweep and the fan-out share.
func (m *Master) newScanning() {
	cfg, log := m.cfg, m.cfg.Logger
	scan := cfg.Scan
	scan.Logger, scan.Registerer = log, cfg.Metrics
	m.scanner = scanner.New(cfg.Client, m.tasks, cfg.Bucket, m.session.scannerLease, scan)

	// The sweep rescans a target it merged since its row was scanned, so a busy
	// store is merged every sweep rather than every scan.
	sweep := cfg.MergeSweep
	sweep.ScanInterval, sweep.Rescan = scan.Interval, m.scanner.Rescan
	sweep.Logger, sweep.Registerer = log, cfg.Metrics
	// A static worker list (WORKER_ENDPOINTS) names workers by address unless told
	// their instance ids, and a worker missing from it is not gone: only workers
	// registered in etcd say which shards have an owner. Without them, nothing is
	// adopted (a live worker's shard would be, and the two would fence each other).
	if _, static := cfg.Discovery.(fanout.StaticDiscovery); !static {
		m.orphans = fanout.NewOrphans(cfg.Discovery, cfg.OrphanGrace, clock.RealClock{}, cfg.Metrics)
		sweep.Orphans = m.orphans.Check
	}
	m.sweeper = scanner.NewMergeSweeper(cfg.Client, m.tasks, m.session.scannerLease, sweep)

	// Workers say within a second that a store is due; the sweep above stays
	// the reconciliation (and the only path for orphaned shards).
	demand := cfg.MergeDemand
	demand.MinGenerations, demand.RetryAfterFailure = sweep.MinGenerations, sweep.Interval
	demand.Logger, demand.Registerer = log, cfg.Metrics
	m.demand = scanner.NewMergeDemand(cfg.Client, m.tasks, m.session.scannerLease, demand)

	compaction := cfg.CompactionSweep
	compaction.Logger, compaction.Registerer = log, cfg.Metrics
	m.compact = scanner.NewCompactionSweeper(cfg.Client, m.tasks, m.session.scannerLease, compaction)
}

// runners are the runners by kind: merge_wal's fan-out and the maintenance
// runner over Discovery and Caller, replaced or added to by Config.Runners.
func (m *Master) runners() (map[tasks.Kind]Runner, error) {
	cfg, log := m.cfg, m.cfg.Logger
	runners := map[tasks.Kind]Runner{}
	if cfg.Caller != nil {
		fc := cfg.FanOut
		fc.Discovery, fc.Caller, fc.Row, fc.Orphans = cfg.Discovery, cfg.Caller, m.scanner.Row, m.orphans
		fc.OnWorkerDone, fc.Logger = m.metrics.ObserveWorker, log.With("component", "fanout")
		runners[tasks.KindMergeWAL] = fanout.New(fc)
		if mc, ok := cfg.Caller.(fanout.MaintainCaller); ok {
			maint := &fanout.Maintenance{Discovery: cfg.Discovery, Caller: mc, Logger: log.With("component", "maintenance")}
			for _, k := range []tasks.Kind{tasks.KindCompact, tasks.KindVerify, tasks.KindRepair} {
				runners[k] = maint
			}
		}
		if ec, ok := cfg.Caller.(fanout.ExportCaller); ok {
			runners[tasks.KindExport] = &fanout.Exporter{Discovery: cfg.Discovery, Caller: ec, Tasks: m.tasks,
				Logger: log.With("component", "export")}
		}
	}
	for k, r := range cfg.Runners {
		if !k.Valid() {
			return nil, fmt.Errorf("master: runner for unknown task kind %q", k)
		}
		if r == nil {
			return nil, fmt.Errorf("master: nil runner for %s", k)
		}
		runners[k] = r
	}
	if runners[tasks.KindMergeWAL] == nil {
		return nil, errors.New("master: Caller is required (merge_wal calls the workers)")
	}
	return runners, nil
}

// newServers builds the AdminService and its gRPC server, the dashboard and the
// HTTP API.
func (m *Master) newServers() error {
	cfg, log := m.cfg, m.cfg.Logger
	admin, err := api.NewAdminService(api.AdminConfig{
		Tasks: m.tasks, Scanner: m.scanner, Registry: cfg.Registry, Discovery: cfg.Discovery,
		Wake: m.sched.Wake, Logger: log.With("component", "admin"), Orphans: m.orphans,
	})
	if err != nil {
		return err
	}
	m.health = health.NewServer()
	m.grpc = api.NewGRPCServer(admin, m.health, log.With("component", "grpc"),
		append(auth.ServerCredentials(cfg.TLS), cfg.Auth.ServerOptions()...)...)
	wc := cfg.WorkerHTTP
	wc.Discovery, wc.Logger = cfg.Discovery, log.With("component", "worker-http")
	workers := workerhttp.New(wc)
	var ui http.Handler
	if !cfg.Dashboard.Disabled {
		m.horizons = horizon.NewView(cfg.Client, cfg.Prefix, clock.RealClock{}, log)
		m.ui, err = dashboard.New(dashboard.Config{
			Admin: admin, Client: cfg.Client, Prefix: cfg.Prefix, Guard: cfg.Auth, Secure: cfg.TLS != nil,
			Workers: workers, Logger: log.With("component", "dashboard"),
			Consumers: consumers.New(cfg.Client, cfg.Prefix), Horizons: m.horizons,
		})
		if err != nil {
			return err
		}
		ui = m.ui
	}
	m.http, err = api.NewHTTPHandler(api.HTTPConfig{
		Admin: admin, Tasks: m.tasks, Scanner: m.scanner, Discovery: cfg.Discovery, DataURL: cfg.Bucket.String(),
		Workers: workers, EtcdCheck: m.checkEtcd, Metrics: cfg.Metrics, Logger: log.With("component", "http"),
		Auth: cfg.Auth, Dashboard: ui, Requests: m.metrics.HTTP,
	})
	return err
}

// Tasks is the master's task queue.
func (m *Master) Tasks() *tasks.Queue { return m.tasks }

// Handler is the master's HTTP API.
func (m *Master) Handler() http.Handler { return m.http }

// Lease is the lease of the master's current etcd session (clientv3.NoLease
// before Run started one).
func (m *Master) Lease() clientv3.LeaseID { return m.session.lease() }

// Run runs the master until ctx is done, then shuts down gracefully, and returns
// nil after a clean stop. Call it once.
//
// It starts an etcd session (its lease carries this replica's claims and
// coordination locks) and keeps one for as long as it runs: when the lease's
// keepalive ends (etcd unreachable for longer than the TTL, or the lease revoked),
// it starts a new session, reusing the lease if etcd still has it. Losing etcd
// never stops the master: the scheduler, the scanner and the sweep fail their
// rounds and back off, and resume when etcd answers again.
//
// On shutdown the scheduler stops claiming, lets running tasks finish for up to
// ShutdownTimeout and releases the rest to the queue; the servers stop
// gracefully; the scanner and sweep give up their coordination locks; and the
// session's lease is revoked, so nothing this replica held waits for a TTL.
func (m *Master) Run(ctx context.Context) error {
	if err := m.session.start(ctx); err != nil {
		closeListeners(m.cfg.GRPCListener, m.cfg.HTTPListener)
		return fmt.Errorf("master: etcd session: %w", err)
	}
	keeperCtx, stopKeeper := context.WithCancel(context.WithoutCancel(ctx))
	keeperDone := make(chan struct{})
	go func() { defer close(keeperDone); m.session.run(keeperCtx) }()
	defer func() {
		stopKeeper()
		<-keeperDone
		if err := m.session.close(); err != nil {
			m.log.Warn("master lease not revoked; what it holds ends with its TTL", "err", err)
		}
	}()

	rctx, cancel := context.WithTimeout(ctx, api.DefaultCallTimeout)
	n, err := m.tasks.RecoverOrphans(rctx)
	cancel()
	if err != nil {
		m.log.Warn("orphan recovery at startup failed; claims retry it", "err", err)
	} else if n > 0 {
		m.log.Info("orphaned tasks requeued at startup", "tasks", n)
	}
	m.logRunners()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg      sync.WaitGroup
		errMu   sync.Mutex
		srvErrs []error
	)
	failed := func(err error) {
		if err == nil {
			return
		}
		errMu.Lock()
		srvErrs = append(srvErrs, err)
		errMu.Unlock()
		m.log.Error("master: a server failed; shutting down", "err", err)
		stop()
	}
	m.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	m.health.SetServingStatus(api.AdminServiceName, healthpb.HealthCheckResponse_SERVING)
	wg.Go(func() { m.sched.Run(runCtx, m.cfg.ShutdownTimeout) })
	wg.Go(func() { m.scanner.Run(runCtx) })
	wg.Go(func() { m.sweeper.Run(runCtx) })
	wg.Go(func() { m.demand.Run(runCtx) })
	wg.Go(func() { m.compact.Run(runCtx) })
	wg.Go(func() { m.pruneLoop(runCtx) })
	wg.Go(func() { m.probeLoop(runCtx) })
	if m.ui != nil {
		wg.Go(func() { m.ui.Run(runCtx) })
		wg.Go(func() { m.horizons.Run(runCtx) })
	}
	if d, ok := m.cfg.Discovery.(*membership.Discovery); ok {
		if r, ok := m.cfg.Caller.(fanout.ConnRetainer); ok {
			// A worker's connection is closed when it deregisters (lease revoked
			// or expired), not at the next merge's discovery, which may never come.
			wg.Go(func() { d.Watch(runCtx, r.Retain) })
		}
	}
	if ln := m.cfg.GRPCListener; ln != nil {
		wg.Go(func() { failed(grpcserver.Serve(runCtx, m.grpc, ln, m.cfg.ShutdownTimeout, m.health, m.log)) })
	}
	if ln := m.cfg.HTTPListener; ln != nil {
		if m.cfg.TLS != nil {
			ln = tls.NewListener(ln, m.cfg.TLS)
		}
		wg.Go(func() { failed(api.Serve(runCtx, m.http, ln, m.cfg.ShutdownTimeout, m.log)) })
	}
	m.log.Info("master running", "prefix", m.cfg.Prefix, "lease", leaseHex(m.session.lease()))
	wg.Wait()
	m.log.Info("master stopped")
	return errors.Join(srvErrs...)
}

// logRunners says which kinds this replica claims, and which it leaves queued.
func (m *Master) logRunners() {
	var claimed, unclaimed []string
	for _, k := range tasks.Kinds() {
		if _, ok := m.sched.cfg.Runners[k]; ok {
			claimed = append(claimed, fmt.Sprintf("%s (concurrency %d)", k, m.sched.concurrency(k)))
		} else {
			unclaimed = append(unclaimed, string(k))
		}
	}
	m.log.Info("scheduler runs task kinds", "kinds", strings.Join(claimed, ", "))
	if len(unclaimed) > 0 {
		m.log.Info("no runner for these task kinds: their tasks stay queued", "kinds", strings.Join(unclaimed, ", "))
	}
}

// checkEtcd reads one key under the prefix: a linearizable read, which needs a
// quorum just as claims and finishes do.
func (m *Master) checkEtcd(ctx context.Context) error {
	key := m.tasks.Keys().Health()
	if _, err := m.cfg.Client.Get(ctx, key, clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcd read of %s: %w", key, err)
	}
	return nil
}

// probeLoop keeps master_etcd_up, the gRPC health status and
// master_task_queue_depth current.
func (m *Master) probeLoop(ctx context.Context) {
	t := time.NewTicker(m.cfg.ProbeInterval)
	defer t.Stop()
	up := true
	for {
		pctx, cancel := context.WithTimeout(ctx, api.HealthTimeout)
		err := m.checkEtcd(pctx)
		var depth int64
		if err == nil {
			depth, err = m.tasks.QueueDepth(pctx)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			m.metrics.EtcdUp.Set(0)
			m.health.SetServingStatus(api.AdminServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
			if up {
				m.log.Warn("etcd unreachable: scheduling pauses until it answers", "err", err)
			}
			up = false
		default:
			m.metrics.EtcdUp.Set(1)
			m.metrics.QueueDepth.Set(float64(depth))
			m.health.SetServingStatus(api.AdminServiceName, healthpb.HealthCheckResponse_SERVING)
			if !up {
				m.log.Info("etcd reachable again")
			}
			up = true
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pruneLoop deletes old finished tasks at once and then every prune interval.
func (m *Master) pruneLoop(ctx context.Context) {
	t := time.NewTicker(m.cfg.TaskRetention.PruneInterval)
	defer t.Stop()
	for {
		if _, err := m.tasks.Prune(ctx, m.cfg.TaskRetention.Count, m.cfg.TaskRetention.Age); err != nil && ctx.Err() == nil {
			m.log.Warn("pruning finished tasks failed; the next round retries", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func closeListeners(lns ...net.Listener) {
	for _, ln := range lns {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

func leaseHex(id clientv3.LeaseID) string { return fmt.Sprintf("%x", int64(id)) }
