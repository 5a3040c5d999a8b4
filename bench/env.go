package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// Env is what the scenarios share: scratch space, an embedded etcd, a progress log
// and the seed every random choice derives from.
type Env struct {
	// Dir is scratch space (file:// buckets, the memory scenario's backlog).
	Dir string
	// Etcd is the master's etcd (embedded).
	Etcd *clientv3.Client
	// Log receives progress lines; nil discards them.
	Log *slog.Logger
	// Seed seeds every generator of rows, jitter and client choices.
	Seed uint64
	// Exe is the tidemark-bench binary the memory scenario runs its worker
	// processes from (os.Executable of the command).
	Exe string
}

func (e *Env) log() *slog.Logger {
	if e.Log == nil {
		return quiet
	}
	return e.Log
}

// quiet discards the production packages' logs: scenario 3 alone would print a
// fan-out warning per read.
var quiet = slog.New(slog.DiscardHandler)

// scratch returns a new directory under Env.Dir.
func (e *Env) scratch(name string) (string, error) {
	if err := os.MkdirAll(e.Dir, 0o755); err != nil {
		return "", err
	}
	return os.MkdirTemp(e.Dir, name+"-")
}

// openMem opens a fresh in-memory bucket and the same bucket behind a Faults
// wrapper seeded from seed. Everything a scenario measures goes through the wrapper,
// so its counters are the requests the scenario spent.
func openMem(ctx context.Context, seed uint64) (raw, faulty *objstore.Bucket, f *objstore.Faults, err error) {
	raw, err = objstore.Open(ctx, "mem://")
	if err != nil {
		return nil, nil, nil, err
	}
	faulty, f = withFaults(raw, seed)
	return raw, faulty, f, nil
}

// openFileFaults is openMem on a file:// bucket in a new scratch directory, for
// the scenarios that run a cluster for minutes: memblob lists by sorting every key
// of the bucket, so on mem:// every listing costs O(all objects of every store),
// which no real object store charges the client, and by the end of a skewed
// ingest those sorts took half of this process's CPU from the workers it
// measures. A directory walk costs what the listed prefix holds.
func (e *Env) openFileFaults(ctx context.Context, name string, seed uint64) (raw, faulty *objstore.Bucket, f *objstore.Faults, err error) {
	raw, _, err = e.openFile(ctx, name)
	if err != nil {
		return nil, nil, nil, err
	}
	faulty, f = withFaults(raw, seed)
	return raw, faulty, f, nil
}

// withFaults is raw behind a Faults wrapper seeded from seed.
func withFaults(raw *objstore.Bucket, seed uint64) (*objstore.Bucket, *objstore.Faults) {
	f := objstore.NewFaults(rand.NewPCG(seed, 1))
	return objstore.WithFaults(raw, f), f
}

// openFile opens a file:// bucket in a new scratch directory.
func (e *Env) openFile(ctx context.Context, name string) (*objstore.Bucket, string, error) {
	dir, err := e.scratch(name)
	if err != nil {
		return nil, "", err
	}
	b, err := objstore.Open(ctx, "file://"+filepath.ToSlash(dir))
	return b, dir, err
}

// benchWorker is one worker process's state: its store handles (its instance id is
// its shard in every store) and its merger, built exactly as cmd/worker builds them.
type benchWorker struct {
	id     string
	stores *store.Stores
	merger *merge.Merger
}

// newWorker returns a worker on bucket. cfg's Bucket, Shard and loggers are filled
// in.
func newWorker(b *objstore.Bucket, id string, cfg store.Config, mc merge.Config) *benchWorker {
	cfg.Bucket, cfg.Shard, cfg.Logger = b, id, quiet
	cfg.TableOptions = append([]table.Option{table.WithLogger(quiet)}, cfg.TableOptions...)
	cfg.WALOptions = append([]wal.Option{wal.WithLogger(quiet)}, cfg.WALOptions...)
	mc.Logger = quiet
	return &benchWorker{id: id, stores: store.NewStores(cfg, 0), merger: merge.New(mc)}
}

func (w *benchWorker) close() { _ = w.stores.Close(context.Background()) }

// baseIDs returns every live id of the table at dir in bucket (its newest version),
// counting duplicates: the check that a scenario lost and doubled nothing.
func baseIDs(ctx context.Context, b *objstore.Bucket, dir string) (ids map[string]int, m *table.Manifest, err error) {
	t, err := table.Open(ctx, b, dir, table.WithLogger(quiet))
	if err != nil {
		return nil, nil, err
	}
	m = t.Latest()
	ids = map[string]int{}
	err = t.Scan(ctx, m, table.ScanOptions{Columns: []string{rowkey.IDColumn}}, func(rec arrow.RecordBatch, _ string) error {
		col := rec.Column(0).(*array.String)
		for i := 0; i < col.Len(); i++ {
			ids[col.Value(i)]++
		}
		return nil
	})
	return ids, m, err
}

// verifyBase checks that the base table at dir holds every id in want, each once,
// and no id besides those of want and maybe, and that no shard has generations above
// its merged watermark. maybe holds the ids of adds that failed: a failed add may
// still be durable (durable-but-unacknowledged is allowed, acknowledged-but-lost is
// not).
func verifyBase(ctx context.Context, b *objstore.Bucket, dir string, want, maybe map[string]bool) (int64, error) {
	got, m, err := baseIDs(ctx, b, dir)
	if err != nil {
		return 0, fmt.Errorf("verify %s: %w", dir, err)
	}
	var errs []error
	for id, n := range got {
		if n > 1 {
			errs = append(errs, fmt.Errorf("id %s is live %d times", id, n))
		} else if !want[id] && !maybe[id] {
			errs = append(errs, fmt.Errorf("id %s was never written", id))
		}
		if len(errs) > 5 {
			break
		}
	}
	missing := 0
	for id := range want {
		if got[id] == 0 {
			missing++
		}
	}
	if missing > 0 {
		errs = append(errs, fmt.Errorf("%d of %d acknowledged rows are missing", missing, len(want)))
	}
	ws, err := wal.LoadSnapshot(ctx, b, dir)
	if err != nil {
		return 0, fmt.Errorf("verify %s: %w", dir, err)
	}
	if n := ws.PendingGenerations(m.MergedGenerations); n > 0 {
		errs = append(errs, fmt.Errorf("%d generations still pending", n))
	}
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("verify %s (version %d): %w", dir, m.Version, err)
	}
	return int64(len(got)), nil
}

// pendingGenerations counts the generations of the store at dir above their shard's
// merged watermark. The WAL snapshot is read before the base manifest, so a merge
// in between can only make the count too high, never too low.
func pendingGenerations(ctx context.Context, b *objstore.Bucket, dir string) (int, error) {
	n, _, err := pendingAndWatermarks(ctx, b, dir)
	return n, err
}

// pendingAndWatermarks is pendingGenerations with the base table's merged
// watermark of every shard, as one read saw them.
func pendingAndWatermarks(ctx context.Context, b *objstore.Bucket, dir string) (int, map[string]uint64, error) {
	n, _, m, err := pendingAndLatest(ctx, b, dir)
	if err != nil {
		return 0, nil, err
	}
	return n, m.MergedGenerations, nil
}

// pendingAndLatest is pendingGenerations with the base table it read and that
// table's newest version, whose watermarks the count is against.
func pendingAndLatest(ctx context.Context, b *objstore.Bucket, dir string) (int, *table.Table, *table.Manifest, error) {
	ws, err := wal.LoadSnapshot(ctx, b, dir)
	if err != nil {
		return 0, nil, nil, err
	}
	t, err := table.Open(ctx, b, dir, table.WithLogger(quiet))
	if err != nil {
		return 0, nil, nil, err
	}
	m := t.Latest()
	return ws.PendingGenerations(m.MergedGenerations), t, m, nil
}

// durations summarizes latencies.
type durations []time.Duration

// Quantiles is a latency summary.
type Quantiles struct {
	N             int
	P50, P99, Max time.Duration
}

func (d durations) quantiles() Quantiles {
	if len(d) == 0 {
		return Quantiles{}
	}
	s := append(durations(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return Quantiles{N: len(s), P50: at(0.50), P99: at(0.99), Max: s[len(s)-1]}
}

func (d durations) median() time.Duration { return d.quantiles().P50 }

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
