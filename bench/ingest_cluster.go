package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-io/tidemark/pkg/master"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// ingestCluster is what the ingest scenarios (RunIngest, RunSkew, RunOverload)
// share: a file:// bucket (Env.openFileFaults) and the same bucket behind a Faults wrapper, workers
// (goroutines of this process, each with its own store handles and merger) that
// publish their pending records and serve their real gRPC WorkerService on
// loopback, and a master built by master.New as cmd/master builds it (static
// discovery of those workers, its scanner, merges on demand, merge sweep,
// scheduler and fan-out) on the bench's etcd under a prefix of its own.
//
// Its life: newIngestCluster, addStore for every store (without faults), start
// (the faults from then on, the master and the pending records running; or
// fault, then run), stopMaster once the ingest ended, drain, close.
type ingestCluster struct {
	raw, faulty *objstore.Bucket
	faults      *objstore.Faults
	prefix      string
	workers     []*recordingWorker
	// metrics is the master's registry (merges on demand count there).
	metrics *prometheus.Registry
	master  *master.Master
	// closers run in reverse order in close.
	closers []func()

	masterDone    chan error
	stopMasterCtx context.CancelFunc
	masterStopped bool
}

// ingestClusterConfig sizes an ingestCluster.
type ingestClusterConfig struct {
	// Name starts the etcd prefix and the worker ids' log lines.
	Name    string
	Workers int
	Mode    fanout.Shape
	// Scan and Sweep are STATS_SCAN_INTERVAL and MERGE_WAL_INTERVAL (zero: the
	// master's defaults).
	Scan, Sweep time.Duration
	// MergeMaxGenerations is the workers' MERGE_MAX_GENERATIONS (zero: the
	// default).
	MergeMaxGenerations int
}

// clusterStore is one store of the cluster: its table directory and every
// worker's handle of it, in worker order.
type clusterStore struct {
	name    string
	dir     string
	handles []*store.Store
}

// newIngestCluster builds the workers, serves their WorkerService and builds the
// master; nothing runs yet. The caller closes it, also when it fails later.
func newIngestCluster(ctx context.Context, env *Env, cfg ingestClusterConfig) (*ingestCluster, error) {
	raw, faulty, faults, err := env.openFileFaults(ctx, cfg.Name, env.Seed)
	if err != nil {
		return nil, err
	}
	c := &ingestCluster{raw: raw, faulty: faulty, faults: faults,
		prefix: fmt.Sprintf("/bench/%s-%d", cfg.Name, time.Now().UnixNano())}
	ok := false
	defer func() {
		if !ok {
			c.close()
		}
	}()
	for i := range cfg.Workers {
		mc := defaultMergeConfig()
		if cfg.MergeMaxGenerations > 0 {
			mc.MaxGenerations = cfg.MergeMaxGenerations
		}
		wk, err := newRecordingWorker(ctx, env.Etcd, faulty, fmt.Sprintf("worker-%02d", i), c.prefix, mc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Name, err)
		}
		c.workers = append(c.workers, wk)
		c.closers = append(c.closers, wk.close)
	}
	benchWorkers := make([]*benchWorker, len(c.workers))
	for i, wk := range c.workers {
		benchWorkers[i] = wk.benchWorker
	}
	discovery, stopWorkers, err := serveWorkers(benchWorkers)
	if err != nil {
		return nil, err
	}
	c.closers = append(c.closers, stopWorkers)
	caller := fanout.NewGRPCCaller(fanout.GRPCCallerConfig{})
	c.closers = append(c.closers, func() { caller.Close() })
	c.metrics = prometheus.NewRegistry()
	c.master, err = master.New(master.Config{
		Client: env.Etcd, Prefix: c.prefix, Bucket: faulty,
		Discovery: discovery, Caller: caller, FanOut: fanout.Config{Shape: cfg.Mode}, Scan: scanner.Config{Interval: cfg.Scan},
		MergeSweep: scanner.MergeSweepConfig{Interval: cfg.Sweep}, ID: "bench-master", Logger: quiet, Metrics: c.metrics,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: master: %w", cfg.Name, err)
	}
	ok = true
	return c, nil
}

// addStore creates a rollout store and opens it on every worker.
func (c *ingestCluster) addStore(ctx context.Context, name string) (*clusterStore, error) {
	e, err := c.workers[0].stores.Create(ctx, registry.Entry{Kind: registry.KindRollout, Name: name})
	if err != nil {
		return nil, fmt.Errorf("create store %s: %w", name, err)
	}
	cs := &clusterStore{name: name, dir: e.URI}
	for _, wk := range c.workers {
		s, rel, err := wk.stores.Open(ctx, registry.KindRollout, name)
		if err != nil {
			return nil, fmt.Errorf("open store %s on %s: %w", name, wk.id, err)
		}
		c.closers = append(c.closers, rel)
		cs.handles = append(cs.handles, s)
	}
	return cs, nil
}

// faultsConfig is the latency and concurrency every object-store request meets
// from start on.
type faultsConfig struct {
	Latency, Jitter time.Duration
	MaxConcurrent   int
	Throttle        objstore.ThrottleMode
}

// start turns the faults on and runs the cluster.
func (c *ingestCluster) start(ctx context.Context, f faultsConfig) {
	c.fault(f)
	c.run(ctx)
}

// fault turns the faults on and resets their counters.
func (c *ingestCluster) fault(f faultsConfig) {
	c.faults.SetLatency(f.Latency, f.Jitter)
	c.faults.SetMaxConcurrent(f.MaxConcurrent, f.Throttle)
	c.faults.ResetCounters()
}

// run runs the master and the workers' pending records until stopMaster and
// close.
func (c *ingestCluster) run(ctx context.Context) {
	// The master outlives the ingest: stopping it lets a running task finish (its
	// shutdown timeout) so that a drain afterwards does not race a fan-out.
	masterCtx, stop := context.WithCancel(ctx)
	c.stopMasterCtx, c.masterDone = stop, make(chan error, 1)
	go func() { c.masterDone <- c.master.Run(masterCtx) }()
	c.closers = append(c.closers, func() { _ = c.stopMaster() })

	// The workers publish their pending records while the master runs.
	recordsCtx, stopRecords := context.WithCancel(ctx)
	var records sync.WaitGroup
	for _, wk := range c.workers {
		records.Go(func() { wk.run(recordsCtx) })
	}
	c.closers = append(c.closers, func() { stopRecords(); records.Wait() })
}

// stopMaster stops the master (once) and returns how its Run ended.
func (c *ingestCluster) stopMaster() error {
	if c.masterStopped || c.stopMasterCtx == nil {
		return nil
	}
	c.masterStopped = true
	c.stopMasterCtx()
	return <-c.masterDone
}

// drain seals and merges, on every worker and without faults, whatever the run
// left of the stores (rows of a seal that failed, generations the master did not
// reach), so every run is held to the same check afterwards: nothing
// acknowledged lost, nothing doubled, nothing pending. The master must be
// stopped.
func (c *ingestCluster) drain(ctx context.Context, stores ...*clusterStore) error {
	c.faults.Clear()
	for _, cs := range stores {
		for i, wk := range c.workers {
			if _, err := cs.handles[i].Seal(ctx); err != nil {
				return fmt.Errorf("final seal of %s on %s: %w", cs.name, wk.id, err)
			}
			if _, err := wk.merger.Merge(ctx, cs.handles[i], true); err != nil {
				return fmt.Errorf("finishing the drain of %s on %s: %w", cs.name, wk.id, err)
			}
		}
	}
	return nil
}

// close stops whatever runs and releases everything, newest first.
func (c *ingestCluster) close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
	c.closers = nil
}
