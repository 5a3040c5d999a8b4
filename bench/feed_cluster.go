package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/coord/horizon"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/tools/devcluster"
)

// workerSnapshotTTL is the workers' SNAPSHOT_TTL (the worker's default): how old
// a read's view of other workers' merges may be.
const workerSnapshotTTL = time.Second

// feedCluster is the feed scenario's cluster of processes (devcluster.Run, as
// `master dev` runs it) and the bench's own view of the horizons in its etcd.
type feedCluster struct {
	ep      devcluster.Endpoints
	addrs   []string // the workers' base URLs, in instance order
	http    *http.Client
	workers []*client.Client // the workers' clients, in instance order
	etcd    *clientv3.Client
	view    *horizon.View
	// stop ends the view and the cluster (master, then workers, then etcd) and
	// returns how the cluster ended.
	stop func() error
}

// startFeedCluster builds the binaries (unless cfg.BinDir has them) and starts
// an embedded etcd, a master and cfg.Workers workers in a scratch directory, the
// workers with FLUSH_INTERVAL=cfg.SealEvery and no authentication (loopback
// only). The other settings are devcluster's defaults (short scan and sweep
// intervals, merges at 2 pending generations) over the environment's.
func startFeedCluster(ctx context.Context, env *Env, cfg FeedConfig) (*feedCluster, error) {
	dir, err := env.scratch("feed")
	if err != nil {
		return nil, err
	}
	bin := cfg.BinDir
	if bin == "" {
		bin = filepath.Join(dir, "bin")
		if err := buildBinaries(ctx, bin); err != nil {
			return nil, err
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	ready := make(chan devcluster.Endpoints, 1)
	done := make(chan error, 1)
	go func() {
		done <- devcluster.Run(runCtx, devcluster.Config{
			Dir: dir, Workers: cfg.Workers, NoAuth: true,
			MasterBinary: filepath.Join(bin, "master"), WorkerBinary: filepath.Join(bin, "worker"),
			EtcdAddr: "127.0.0.1:0", EtcdUnsafeNoFsync: true,
			MasterGRPCAddr: "127.0.0.1:0", MasterHTTPAddr: "127.0.0.1:0",
			Environ:      append(os.Environ(), "FLUSH_INTERVAL="+cfg.SealEvery.String(), "LOG_LEVEL=warn"),
			StartTimeout: cfg.StartTimeout, ShutdownTimeout: 30 * time.Second,
			Console: devcluster.NewConsole(io.Discard),
			OnReady: func(ep devcluster.Endpoints) { ready <- ep },
		})
	}()
	stopCluster := func() error {
		cancel()
		return <-done
	}
	var ep devcluster.Endpoints
	select {
	case ep = <-ready:
	case err := <-done:
		cancel()
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("feed: cluster in %s did not start: %w", dir, err)
	}
	cl := &feedCluster{ep: ep, http: &http.Client{Timeout: 2 * time.Minute}}
	for _, w := range ep.Workers {
		cl.addrs = append(cl.addrs, "http://"+w.HTTPAddr)
		wc, err := client.New(w.HTTPAddr, client.WithHTTPClient(cl.http), client.WithTimeout(2*time.Minute))
		if err != nil {
			return nil, errors.Join(err, stopCluster())
		}
		cl.workers = append(cl.workers, wc)
	}
	cl.etcd, err = clientv3.New(clientv3.Config{Endpoints: []string{ep.Etcd}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("feed: etcd client: %w", err), stopCluster())
	}
	cl.view = horizon.NewView(cl.etcd, ep.Prefix, clock.RealClock{}, quiet)
	viewCtx, stopView := context.WithCancel(ctx)
	viewDone := make(chan struct{})
	go func() { defer close(viewDone); cl.view.Run(viewCtx) }()
	cl.stop = func() error {
		stopView()
		<-viewDone
		_ = cl.etcd.Close()
		return stopCluster()
	}
	return cl, nil
}

// buildBinaries builds cmd/master and cmd/worker of this module into dir (go
// build's cache makes it a link when nothing changed).
func buildBinaries(ctx context.Context, dir string) error {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("feed: go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if root == "." || root == "" {
		return errors.New("feed: not inside the module: run from the repository to build the master and worker")
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator), "./cmd/master", "./cmd/worker")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("feed: go build ./cmd/master ./cmd/worker: %w\n%s", err, out)
	}
	return nil
}

// settle has every worker seal and merge its shard of the generic store (its
// flush and merge-wal routes), waits until a fresh snapshot sees want rows in the
// base table and no generation pending, then until the store's horizon passed
// the time the seals ended, then for the workers' snapshots to be refreshed:
// from then on a reader of the store reads the base table alone and the feed
// answers every row.
// It returns the base table's fragments.
func (cl *feedCluster) settle(ctx context.Context, store string, want int64, timeout time.Duration) (fragments int, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, wc := range cl.workers {
		if err := wc.Flush(ctx, store); err != nil {
			return 0, fmt.Errorf("feed: settle %s: %w", store, err)
		}
		if _, err := wc.MergeWAL(ctx, store); err != nil {
			return 0, fmt.Errorf("feed: settle %s: %w", store, err)
		}
	}
	sealed := time.Now()
	target := registry.NewTarget(registry.KindGeneric, store)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := cl.workers[0].GetStore(ctx, client.Generic, store)
		if err != nil {
			return 0, fmt.Errorf("feed: settle %s: %w", store, err)
		}
		h, ok, err := cl.view.Horizon(ctx, target)
		if err != nil {
			return 0, fmt.Errorf("feed: settle %s: horizon: %w", store, err)
		}
		if info.RowCount == want && info.PendingGenerations == 0 && ok && !wal.SeqTime(h).Before(sealed) {
			// The store's info reads a fresh snapshot; a list reads one up to
			// SNAPSHOT_TTL old, which may predate the other workers' merges.
			return info.FragmentCount, sleepCtx(ctx, 2*workerSnapshotTTL)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("feed: settle %s: %d of %d rows merged, %d generations pending, horizon %d (known %v) not past the seals within %s",
				store, info.RowCount, want, info.PendingGenerations, h, ok, timeout)
		case <-tick.C:
		}
	}
}
