package scanner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

const testSpec = `{"columns":[["id",{"type":"string"}],["v",{"type":"int64","nullable":true}]]}`

// env is one test's world: an embedded etcd, a task queue under the test's own
// prefix, a bucket, a worker's stores on it (shard "w1") writing through the plain
// bucket, and a fault wrapper on the same bucket that the scanners read through
// (its counters see only the scanner's requests).
type env struct {
	t      *testing.T
	ctx    context.Context
	client *clientv3.Client
	ts     *tasks.Queue
	bucket *objstore.Bucket // what the workers write through
	faults *objstore.Faults
	seen   *objstore.Bucket // what the scanners read through
	stores *store.Stores
	log    *slog.Logger
}

func newEnv(t *testing.T) *env {
	t.Helper()
	client, _ := etcdtest.Start(t)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	quiet := slog.New(slog.DiscardHandler)
	b := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	ss := store.NewStores(store.Config{Bucket: b, Shard: "w1", Logger: quiet, SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(quiet)}}, 0)
	t.Cleanup(func() { _ = ss.Close(context.Background()) })
	return &env{
		t:      t,
		ctx:    context.Background(),
		client: client,
		ts:     tasks.New(client, "/test/"+t.Name(), tasks.WithHolder("replica-a"), tasks.WithLogger(log)),
		bucket: b,
		faults: f,
		seen:   objstore.WithFaults(b, f),
		stores: ss,
		log:    log,
	}
}

// grant returns a fresh lease: one master replica's session.
func (e *env) grant() clientv3.LeaseID {
	e.t.Helper()
	resp, err := e.client.Grant(e.ctx, 60)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.ID
}

// replica returns a task queue of another master replica on the same prefix.
func (e *env) replica(holder string) *tasks.Queue {
	return tasks.New(e.client, e.ts.Prefix(), tasks.WithHolder(holder), tasks.WithLogger(e.log))
}

func (e *env) scanner(lease clientv3.LeaseID, cfg Config) *Scanner {
	return e.scannerOn(e.ts, lease, cfg)
}

// scannerOn is a Scanner of cfg, logging to the test's log unless cfg says.
func (e *env) scannerOn(ts *tasks.Queue, lease clientv3.LeaseID, cfg Config) *Scanner {
	if cfg.Logger == nil {
		cfg.Logger = e.log
	}
	return New(e.client, ts, e.seen, StaticLease(lease), cfg)
}

// sweeper is a MergeSweeper of cfg, logging to the test's log unless cfg says.
func (e *env) sweeper(lease clientv3.LeaseID, cfg MergeSweepConfig) *MergeSweeper {
	if cfg.Logger == nil {
		cfg.Logger = e.log
	}
	return NewMergeSweeper(e.client, e.ts, StaticLease(lease), cfg)
}

// scan runs one round that must succeed and not be skipped.
func (e *env) scan(s *Scanner) Summary {
	e.t.Helper()
	sum, err := s.Scan(e.ctx)
	if err != nil {
		e.t.Fatalf("scan: %v", err)
	}
	if sum.Skipped {
		e.t.Fatalf("scan skipped: %s", sum.SkipReason)
	}
	return sum
}

func (e *env) sweep(sw *MergeSweeper) SweepSummary {
	e.t.Helper()
	sum, err := sw.Sweep(e.ctx)
	if err != nil {
		e.t.Fatalf("sweep: %v", err)
	}
	if sum.Skipped {
		e.t.Fatalf("sweep skipped: %s", sum.SkipReason)
	}
	return sum
}

// createGeneric creates generic store name and makes `seals` sealed adds to it,
// one row each.
func (e *env) createGeneric(name string, seals int) *store.Store {
	e.t.Helper()
	spec, err := schema.ParseSpec([]byte(testSpec))
	if err != nil {
		e.t.Fatal(err)
	}
	canon, _ := spec.MarshalJSON()
	if _, err := e.stores.Create(e.ctx, registry.Entry{Kind: registry.KindGeneric, Name: name, Schema: canon}); err != nil {
		e.t.Fatal(err)
	}
	return e.open(registry.KindGeneric, name, seals)
}

// createRollout creates rollout store name and makes `seals` sealed adds to it.
func (e *env) createRollout(name string, seals int) *store.Store {
	e.t.Helper()
	if _, err := e.stores.Create(e.ctx, registry.Entry{Kind: registry.KindRollout, Name: name}); err != nil {
		e.t.Fatal(err)
	}
	return e.open(registry.KindRollout, name, seals)
}

func (e *env) open(k registry.Kind, name string, seals int) *store.Store {
	e.t.Helper()
	s, rel, err := e.stores.Open(e.ctx, k, name)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(rel)
	for range seals {
		e.sealedAdd(s)
	}
	return s
}

// nextID numbers rows; tests run one at a time (no t.Parallel), so a global is enough.
var nextID int

// sealedAdd appends one new row to s and seals it into a generation.
func (e *env) sealedAdd(s *store.Store) {
	e.t.Helper()
	nextID++
	id := fmt.Sprintf("row-%d", nextID)
	var rec arrow.RecordBatch
	var err error
	if s.Entry().Kind == registry.KindRollout {
		rec, err = schema.DecodeRollouts([]json.RawMessage{json.RawMessage(fmt.Sprintf(`{"id":%q,"rollout_id":"r"}`, id))}, time.Now())
	} else {
		var spec *schema.Spec
		if spec, err = schema.ParseSpec(s.Entry().Schema); err == nil {
			rec, err = spec.Codec().Decode([]json.RawMessage{json.RawMessage(fmt.Sprintf(`{"id":%q,"v":%d}`, id, nextID))})
		}
	}
	if err != nil {
		e.t.Fatal(err)
	}
	defer rec.Release()
	if err := s.Append(e.ctx, rec); err != nil {
		e.t.Fatal(err)
	}
	if g, err := s.Seal(e.ctx); err != nil || g == nil {
		e.t.Fatalf("seal %s: %v, %v", s.Target(), g, err)
	}
}

// merge merges s's shard into its base table, as a worker would on request.
func (e *env) merge(s *store.Store) merge.Result {
	e.t.Helper()
	r, err := merge.New(merge.Config{Logger: slog.New(slog.DiscardHandler)}).Merge(e.ctx, s, true)
	if err != nil {
		e.t.Fatalf("merge %s: %v", s.Target(), err)
	}
	return r
}

// row reads the stored row of target and its mod revision (0 when absent).
func (e *env) row(target string) (stats.Row, int64) {
	e.t.Helper()
	resp, err := e.client.Get(e.ctx, e.ts.Prefix()+"/stats/"+target)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return stats.Row{}, 0
	}
	var r stats.Row
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		e.t.Fatal(err)
	}
	return r, resp.Kvs[0].ModRevision
}

// rowCount counts the keys under P/stats/.
func (e *env) rowCount() int64 {
	e.t.Helper()
	resp, err := e.client.Get(e.ctx, e.ts.Prefix()+"/stats/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Count
}

// putRow writes a stats row directly, standing for an earlier scan.
func (e *env) putRow(target string, pending int) {
	e.t.Helper()
	parsed, err := registry.ParseTarget(target)
	if err != nil {
		e.t.Fatal(err)
	}
	r := stats.Row{Target: parsed, Kind: parsed.Kind, Name: parsed.Name, Version: 1, PendingWALGenerations: pending}
	if _, err := e.client.Put(e.ctx, e.ts.Prefix()+"/stats/"+target, stats.Encode(r)); err != nil {
		e.t.Fatal(err)
	}
}

// queuedTargets lists the targets of queued merge_wal tasks in enqueue order.
func (e *env) queuedTargets() []string {
	e.t.Helper()
	list, _, err := e.ts.List(e.ctx, tasks.ListFilter{State: tasks.StateQueued, Kind: tasks.KindMergeWAL})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, task := range list {
		out = append(out, task.Target.String())
	}
	return out
}
