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

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/grpcserver"
	"github.com/tidemark-io/tidemark/pkg/objstore"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// Defaults of the master's settings (MASTER_LEASE_TTL, TASK_CONCURRENCY,
// MERGE_WAL_CONCURRENCY, MERGE_WAL_WORKER_TIMEOUT, SHUTDOWN_TIMEOUT, ...).
const (
	DefaultLeaseTTL         = 10 * time.Second
	DefaultTaskConcurrency  = 2
	DefaultMergeConcurrency = 2
	DefaultWorkerTimeout    = 10 * time.Minute
	DefaultTaskTimeout      = time.Hour
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultPruneInterval    = time.Hour
	DefaultPruneKeep        = 10000
	DefaultPruneMaxAge      = 7 * 24 * time.Hour
	DefaultProbeInterval    = 15 * time.Second
)

// sessionOpTimeout bounds each attempt to start a session (lease check, grant):
// short, so that an attempt begun while etcd was away does not delay the next one
// long after etcd is back (an etcd restart resets lease TTLs, so a prompt attempt
// still finds the old lease). revokeTimeout bounds the revoke at shutdown.
const (
	sessionOpTimeout = 2 * time.Second
	revokeTimeout    = 5 * time.Second
)

// errNoSession means the master has no live etcd session right now: its lease's
// keepalive ended and a new session is not up yet (etcd unreachable).
var errNoSession = errors.New("no live etcd session (etcd unreachable?)")

// Config is what a Master needs.
type Config struct {
	// Client is the etcd client (internal/etcdcli.New). Required.
	Client *clientv3.Client
	// Prefix is the etcd key prefix P (tasks.DefaultPrefix when empty).
	Prefix string
	// Bucket holds the store registries and the stores (DATA_URL). Required.
	Bucket *objstore.Bucket
	// Registry is the store registry in Bucket (registry.New(Bucket) when nil).
	Registry *registry.Registry
	// Discovery lists the workers merge_wal calls (EtcdDiscovery on Client and
	// Prefix when nil; a StaticDiscovery for WORKER_ENDPOINTS).
	Discovery Discovery
	// Caller calls the workers; required unless Runners replaces merge_wal's.
	Caller Caller
	// Runners add to or replace the built-in runners by kind. The master has one
	// runner of its own, merge_wal's serial FanOut; compact and index_id have none
	// yet, so their tasks stay queued unless a runner is given here.
	Runners map[tasks.Kind]Runner

	// GRPCListener serves the AdminService (with health and reflection), and
	// HTTPListener the HTTP API and /metrics; either may be nil to not serve it.
	// Run closes them.
	GRPCListener net.Listener
	HTTPListener net.Listener

	// ScanInterval is STATS_SCAN_INTERVAL, SweepInterval MERGE_WAL_INTERVAL,
	// MinGenerations MERGE_WAL_MIN_GENERATIONS and MaxEnqueues
	// MERGE_WAL_MAX_ENQUEUES (the scanner package's defaults when zero).
	ScanInterval   time.Duration
	SweepInterval  time.Duration
	MinGenerations int
	MaxEnqueues    int

	// TaskConcurrency bounds the running tasks of each kind other than merge_wal
	// (TASK_CONCURRENCY), MergeConcurrency the running merge_wal tasks
	// (MERGE_WAL_CONCURRENCY): merges of different targets may run at once, one
	// target never has two.
	TaskConcurrency  int
	MergeConcurrency int
	// WorkerTimeout bounds one worker's merge in a fan-out
	// (MERGE_WAL_WORKER_TIMEOUT); TaskTimeout bounds one task run (TASK_TIMEOUT),
	// so it must allow for a fan-out over every worker.
	WorkerTimeout time.Duration
	TaskTimeout   time.Duration
	// PollInterval is how often an idle scheduler looks for work (1 s).
	PollInterval time.Duration

	// LeaseTTL is the TTL of the master's session lease (MASTER_LEASE_TTL, whole
	// seconds, at least 2 s): claims, target locks and coordination locks die
	// this long after the master does.
	LeaseTTL time.Duration
	// ShutdownTimeout is how long shutdown lets running tasks finish before
	// releasing them to the queue, and lets the servers finish their requests.
	ShutdownTimeout time.Duration

	// PruneInterval, PruneKeep and PruneMaxAge drive the deletion of finished
	// tasks (hourly, keep the 10000 most recent, none older than 7 days).
	PruneInterval time.Duration
	PruneKeep     int
	PruneMaxAge   time.Duration
	// ProbeInterval is how often the master checks etcd (master_etcd_up, gRPC
	// health) and reads the queue depth (15 s).
	ProbeInterval time.Duration

	// Holder names this replica in claim tokens and coordination keys (default
	// "<hostname>:<pid>").
	Holder string
	// Metrics is the registry /metrics serves (NewRegistry() when nil).
	Metrics *prometheus.Registry
	Logger  *slog.Logger

	// Auth guards the AdminService (and reflection) and the task, stats and
	// workers HTTP routes; gRPC health, HTTP health and metrics stay open. nil:
	// no authentication (--auth-disabled).
	Auth *auth.Guard
	// TLS, if set, serves the AdminService and the HTTP API over TLS with it.
	TLS *tls.Config
}

// Master is one master replica: an etcd session, the scheduler and its runners,
// the stats scanner, the merge sweep, the prune loop, the AdminService and the
// HTTP API. Several replicas may run on one prefix; etcd coordinates them.
type Master struct {
	cfg     Config
	log     *slog.Logger
	session *sessionKeeper
	tasks   *tasks.Store
	scanner *scanner.Scanner
	sweeper *scanner.MergeSweeper
	sched   *Scheduler
	metrics *Metrics
	admin   *AdminService
	health  *health.Server
	grpc    *grpc.Server
	http    http.Handler
}

// New checks cfg and builds a master; Run runs it.
func New(cfg Config) (*Master, error) {
	if cfg.Client == nil {
		return nil, errors.New("master: Client (etcd) is required")
	}
	if cfg.Bucket == nil {
		return nil, errors.New("master: Bucket (DATA_URL) is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registry == nil {
		cfg.Registry = registry.New(cfg.Bucket)
	}
	if cfg.Prefix = strings.TrimRight(cfg.Prefix, "/"); cfg.Prefix == "" {
		cfg.Prefix = tasks.DefaultPrefix
	}
	if cfg.Discovery == nil {
		cfg.Discovery = &EtcdDiscovery{Client: cfg.Client, Prefix: cfg.Prefix}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewRegistry()
	}
	setDefault(&cfg.TaskConcurrency, DefaultTaskConcurrency)
	setDefault(&cfg.MergeConcurrency, DefaultMergeConcurrency)
	setDefault(&cfg.WorkerTimeout, DefaultWorkerTimeout)
	setDefault(&cfg.TaskTimeout, DefaultTaskTimeout)
	setDefault(&cfg.LeaseTTL, DefaultLeaseTTL)
	setDefault(&cfg.ShutdownTimeout, DefaultShutdownTimeout)
	setDefault(&cfg.PruneInterval, DefaultPruneInterval)
	setDefault(&cfg.PruneKeep, DefaultPruneKeep)
	setDefault(&cfg.PruneMaxAge, DefaultPruneMaxAge)
	setDefault(&cfg.ProbeInterval, DefaultProbeInterval)
	ttl := int((cfg.LeaseTTL + time.Second - 1) / time.Second) // etcd's unit, rounded up
	if ttl < 2 {
		return nil, fmt.Errorf("master: lease TTL %s is shorter than 2s", cfg.LeaseTTL)
	}
	log := cfg.Logger

	m := &Master{cfg: cfg, log: log, metrics: NewMetrics(cfg.Metrics)}
	m.session = &sessionKeeper{client: cfg.Client, ttl: ttl, log: log.With("component", "session")}
	m.tasks = tasks.New(cfg.Client, cfg.Prefix, tasks.WithLogger(log), tasks.WithHolder(cfg.Holder))
	scanOpts := []scanner.Option{
		scanner.WithLogger(log),
		scanner.WithRegisterer(cfg.Metrics),
		scanner.WithScanInterval(cfg.ScanInterval),
		scanner.WithSweepInterval(cfg.SweepInterval),
		scanner.WithMinGenerations(cfg.MinGenerations),
		scanner.WithMaxEnqueues(cfg.MaxEnqueues),
	}
	m.scanner = scanner.New(cfg.Client, m.tasks, cfg.Bucket, m.session.scannerLease, scanOpts...)
	m.sweeper = scanner.NewMergeSweeper(cfg.Client, m.tasks, m.session.scannerLease, scanOpts...)

	runners := map[tasks.Kind]Runner{}
	if cfg.Caller != nil {
		runners[tasks.KindMergeWAL] = &FanOut{
			Discovery:     cfg.Discovery,
			Caller:        cfg.Caller,
			WorkerTimeout: cfg.WorkerTimeout,
			OnWorkerDone:  m.metrics.ObserveWorker,
			Logger:        log.With("component", "fanout"),
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
	slots := map[tasks.Kind]int{}
	for k := range runners {
		slots[k] = cfg.TaskConcurrency
	}
	slots[tasks.KindMergeWAL] = cfg.MergeConcurrency
	m.sched = NewScheduler(SchedulerConfig{
		Tasks:        m.tasks,
		Lease:        m.session.lease,
		Runners:      runners,
		Concurrency:  slots,
		PollInterval: cfg.PollInterval,
		TaskTimeout:  cfg.TaskTimeout,
		OnFinish:     m.metrics.ObserveTask,
		Logger:       log.With("component", "scheduler"),
	})
	m.session.lost = m.sched.AbandonLease

	admin, err := NewAdminService(AdminConfig{
		Tasks: m.tasks, Scanner: m.scanner, Registry: cfg.Registry, Discovery: cfg.Discovery,
		Wake: m.sched.Wake, Logger: log.With("component", "admin"),
	})
	if err != nil {
		return nil, err
	}
	m.admin = admin
	m.health = health.NewServer()
	m.grpc = NewGRPCServer(admin, m.health, log.With("component", "grpc"),
		append(auth.ServerCredentials(cfg.TLS), cfg.Auth.ServerOptions()...)...)
	m.http, err = NewHTTPHandler(HTTPConfig{
		Tasks: m.tasks, Scanner: m.scanner, Discovery: cfg.Discovery,
		EtcdCheck: m.checkEtcd, Metrics: cfg.Metrics, Logger: log.With("component", "http"),
		Auth: cfg.Auth,
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Tasks is the master's task store.
func (m *Master) Tasks() *tasks.Store { return m.tasks }

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

	rctx, cancel := context.WithTimeout(ctx, DefaultCallTimeout)
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
	m.health.SetServingStatus(AdminServiceName, healthpb.HealthCheckResponse_SERVING)
	wg.Go(func() { m.sched.Run(runCtx, m.cfg.ShutdownTimeout) })
	wg.Go(func() { m.scanner.Run(runCtx) })
	wg.Go(func() { m.sweeper.Run(runCtx) })
	wg.Go(func() { m.pruneLoop(runCtx) })
	wg.Go(func() { m.probeLoop(runCtx) })
	if ln := m.cfg.GRPCListener; ln != nil {
		wg.Go(func() { failed(grpcserver.Serve(runCtx, m.grpc, ln, m.cfg.ShutdownTimeout, m.health, m.log)) })
	}
	if ln := m.cfg.HTTPListener; ln != nil {
		if m.cfg.TLS != nil {
			ln = tls.NewListener(ln, m.cfg.TLS)
		}
		wg.Go(func() { failed(serveHTTP(runCtx, m.http, ln, m.cfg.ShutdownTimeout, m.log)) })
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
			claimed = append(claimed, fmt.Sprintf("%s (concurrency %d)", k, m.sched.cfg.Concurrency[k]))
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
	key := m.cfg.Prefix + "/health"
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
		pctx, cancel := context.WithTimeout(ctx, HealthTimeout)
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
			m.health.SetServingStatus(AdminServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
			if up {
				m.log.Warn("etcd unreachable: scheduling pauses until it answers", "err", err)
			}
			up = false
		default:
			m.metrics.EtcdUp.Set(1)
			m.metrics.QueueDepth.Set(float64(depth))
			m.health.SetServingStatus(AdminServiceName, healthpb.HealthCheckResponse_SERVING)
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
	t := time.NewTicker(m.cfg.PruneInterval)
	defer t.Stop()
	for {
		if _, err := m.tasks.Prune(ctx, m.cfg.PruneKeep, m.cfg.PruneMaxAge); err != nil && ctx.Err() == nil {
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

// sessionKeeper keeps the master's etcd session. The session's lease carries the
// replica's claims, target locks and coordination locks.
//
// A session ends when its keepalive stream gets no answer for a TTL (etcd
// unreachable) or learns the lease is gone (expired, revoked). The keeper then
// starts a new session: on the same lease if etcd still has it (an etcd restart
// resets lease TTLs, so a short outage keeps every claim), on a new lease
// otherwise. Everything that needs the lease asks for it at each use (the
// scheduler at each claim, the scanner and sweep at each round), so the new lease
// is picked up without restarting anything; claims made under a lost lease fail
// their Finish with tasks.ErrClaimLost and their tasks are recovered as orphans.
type sessionKeeper struct {
	client *clientv3.Client
	ttl    int // seconds
	log    *slog.Logger
	// lost, if set, is told a lease that is gone once a session started on a new
	// one (the scheduler's AbandonLease stops the runs of its claims).
	lost func(clientv3.LeaseID)

	mu     sync.Mutex
	cur    *concurrency.Session
	ctx    context.Context // every session's keepalive context; ended by close
	cancel context.CancelFunc
}

// start opens the first session.
func (k *sessionKeeper) start(ctx context.Context) error {
	k.mu.Lock()
	if k.ctx == nil {
		k.ctx, k.cancel = context.WithCancel(context.Background())
	}
	k.mu.Unlock()
	s, _, err := k.open(ctx, clientv3.NoLease)
	if err != nil {
		return err
	}
	k.set(s)
	k.log.Info("etcd session started", "lease", leaseHex(s.Lease()), "ttl_seconds", k.ttl)
	return nil
}

// open starts a session on lease reuse if etcd still has it, else on a new lease.
func (k *sessionKeeper) open(ctx context.Context, reuse clientv3.LeaseID) (*concurrency.Session, bool, error) {
	octx, cancel := context.WithTimeout(ctx, sessionOpTimeout)
	defer cancel()
	id := clientv3.NoLease
	if reuse != clientv3.NoLease {
		resp, err := k.client.TimeToLive(octx, reuse)
		if err != nil {
			return nil, false, fmt.Errorf("check lease %s: %w", leaseHex(reuse), err)
		}
		if resp.TTL > 0 {
			id = reuse
		}
	}
	reused := id != clientv3.NoLease
	if !reused {
		resp, err := k.client.Grant(octx, int64(k.ttl))
		if err != nil {
			return nil, false, fmt.Errorf("grant a lease of %ds: %w", k.ttl, err)
		}
		id = resp.ID
	}
	// The keepalive runs on the keeper's context, not ctx: it must outlive the
	// call, and end only when the keeper closes.
	s, err := concurrency.NewSession(k.client, concurrency.WithLease(id), concurrency.WithTTL(k.ttl),
		concurrency.WithContext(k.ctx))
	if err != nil {
		return nil, false, fmt.Errorf("keep lease %s alive: %w", leaseHex(id), err)
	}
	return s, reused, nil
}

func (k *sessionKeeper) set(s *concurrency.Session) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cur = s
}

func (k *sessionKeeper) current() *concurrency.Session {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur
}

// lease is the current session's lease (the scheduler's Lease). After the
// session ended and before a new one is up it is the old lease: a claim under it
// fails if etcd no longer has it, and the scheduler backs off.
func (k *sessionKeeper) lease() clientv3.LeaseID {
	if s := k.current(); s != nil {
		return s.Lease()
	}
	return clientv3.NoLease
}

// scannerLease is the scanner's and sweep's scanner.Lease: the current lease
// while its session lives, errNoSession otherwise (the round fails and the next
// one asks again).
func (k *sessionKeeper) scannerLease(context.Context) (clientv3.LeaseID, error) {
	s := k.current()
	if s == nil {
		return clientv3.NoLease, errNoSession
	}
	select {
	case <-s.Done():
		return clientv3.NoLease, errNoSession
	default:
		return s.Lease(), nil
	}
}

// run replaces the session whenever it ends, until ctx is done.
func (k *sessionKeeper) run(ctx context.Context) {
	for {
		old := k.current()
		select {
		case <-ctx.Done():
			return
		case <-old.Done():
		}
		if ctx.Err() != nil {
			return
		}
		k.log.Warn("etcd session ended: no keepalive answer within the lease TTL (etcd unreachable?) or the lease is gone; starting a new one",
			"lease", leaseHex(old.Lease()))
		backoff := 250 * time.Millisecond
		for {
			s, reused, err := k.open(ctx, old.Lease())
			if err == nil {
				k.set(s)
				if reused {
					k.log.Info("etcd session resumed on the same lease: claims and locks kept", "lease", leaseHex(s.Lease()))
				} else {
					k.log.Warn("etcd session started on a new lease: claims and locks of the old one are lost",
						"lease", leaseHex(s.Lease()), "old_lease", leaseHex(old.Lease()))
					if k.lost != nil {
						k.lost(old.Lease())
					}
				}
				break
			}
			if ctx.Err() != nil {
				return
			}
			k.log.Warn("etcd session not started; retrying", "err", err, "retry_in", backoff.String())
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

// close ends the keepalive and revokes the lease, which deletes every key under
// it (claims, target locks, coordination locks) at once. Call it after run
// returned.
func (k *sessionKeeper) close() error {
	s := k.current()
	defer func() {
		if k.cancel != nil {
			k.cancel()
		}
	}()
	if s == nil {
		return nil
	}
	s.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
	defer cancel()
	_, err := k.client.Revoke(ctx, s.Lease())
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("revoke lease %s: %w", leaseHex(s.Lease()), err)
	}
	k.log.Info("etcd session closed: lease revoked", "lease", leaseHex(s.Lease()))
	return nil
}
