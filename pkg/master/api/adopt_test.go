package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// addShard gives store kind/name a WAL shard named shard, as a worker of that
// instance id does when it first writes the store.
func addShard(t *testing.T, b *objstore.Bucket, kind registry.Kind, name, shard string) {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	ss := store.NewStores(store.Config{Bucket: b, Shard: shard, Logger: quiet, SnapshotTTL: -1,
		WALOptions: []wal.Option{wal.WithLogger(quiet)}}, 0)
	defer func() { _ = ss.Close(context.Background()) }()
	st, release, err := ss.Open(context.Background(), kind, name)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := st.Writer(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// orphanEnv is an adminEnv whose store r1 has shards w1 (registered) and w2 (no
// worker), and generic:g1 shard w1.
func orphanEnv(t *testing.T, opts ...grpc.ServerOption) *adminEnv {
	e := newAdminEnv(t, nil, opts...)
	register(t, e.etcd, "/admin", "w1")
	addShard(t, e.bucket, registry.KindRollout, "r1", "w1")
	addShard(t, e.bucket, registry.KindRollout, "r1", "w2")
	addShard(t, e.bucket, registry.KindGeneric, "g1", "w1")
	if _, err := e.scanner.Rescan(e.ctx, registry.MustParseTarget("r1")); err != nil {
		t.Fatal(err)
	}
	return e
}

// orphanedShards lists the shards the stats show orphaned ("<target> <shard>"):
// those the tracker marks (ForceAdopt), since the tests' grace never passes. It
// asks the service in process, past any credential check.
func orphanedShards(t *testing.T, e *adminEnv) []string {
	t.Helper()
	resp, err := e.svc.ListStats(e.ctx, &tidemarkv1.ListStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range resp.Stats {
		for _, m := range r.MissingShards {
			if m.Orphaned {
				out = append(out, r.Target+" "+m.Shard)
			}
		}
	}
	return out
}

// register puts a worker's registration record as a worker writes it.
func register(t *testing.T, client *clientv3.Client, prefix, id string) {
	t.Helper()
	rec, _ := json.Marshal(fanout.Worker{InstanceID: id, GRPCAddr: "10.0.0.1:" + id})
	if _, err := client.Put(context.Background(), prefix+"/workers/"+id, string(rec)); err != nil {
		t.Fatal(err)
	}
}

func statsOf(t *testing.T, e *adminEnv, target string) *tidemarkv1.StatsRow {
	t.Helper()
	resp, err := e.client.ListStats(e.ctx, &tidemarkv1.ListStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Stats {
		if r.Target == target {
			return r
		}
	}
	t.Fatalf("no stats row of %s in %v", target, resp.Stats)
	return nil
}

func TestStatsShowActiveShardsAndTheMissingOnes(t *testing.T) {
	e := orphanEnv(t)
	if _, err := e.scanner.Rescan(e.ctx, registry.MustParseTarget("generic:g1")); err != nil {
		t.Fatal(err)
	}
	t0 := e.clock.Now()

	r1 := statsOf(t, e, "r1")
	if !slices.Equal(r1.ActiveShards, []string{"w1", "w2"}) || r1.Shards != 2 {
		t.Fatalf("r1: active shards %v of %d, want [w1 w2] of 2", r1.ActiveShards, r1.Shards)
	}
	if len(r1.MissingShards) != 1 {
		t.Fatalf("r1: missing shards %v, want w2", r1.MissingShards)
	}
	m := r1.MissingShards[0]
	if m.Shard != "w2" || m.Orphaned || !m.MissingSince.AsTime().Equal(t0) || !m.OrphanedAt.AsTime().Equal(t0.Add(fanout.DefaultOrphanGrace)) {
		t.Errorf("r1's w2 within the grace = %v, want missing since %s, orphaned at %s", m, t0, t0.Add(fanout.DefaultOrphanGrace))
	}
	if g1 := statsOf(t, e, "generic:g1"); !slices.Equal(g1.ActiveShards, []string{"w1"}) || len(g1.MissingShards) != 0 {
		t.Errorf("generic:g1: active %v, missing %v; want [w1], none", g1.ActiveShards, g1.MissingShards)
	}

	e.clock.SetTime(t0.Add(fanout.DefaultOrphanGrace))
	m = statsOf(t, e, "r1").MissingShards[0]
	if !m.Orphaned || !m.MissingSince.AsTime().Equal(t0) {
		t.Errorf("r1's w2 after the grace = %v, want orphaned, missing since %s", m, t0)
	}
	// What stats showed is what the sweep goes by.
	row, err := e.scanner.Row(e.ctx, registry.MustParseTarget("r1"))
	if err != nil {
		t.Fatal(err)
	}
	orphaned, err := e.orphans.Check(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := orphaned(row); !slices.Equal(got, []string{"w2"}) {
		t.Errorf("the sweep finds %v orphaned, want [w2]", got)
	}

	// A rescan's row carries them too.
	resc, err := e.client.Rescan(e.ctx, &tidemarkv1.RescanRequest{Target: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if ms := resc.Stats.GetMissingShards(); len(ms) != 1 || ms[0].Shard != "w2" || !ms[0].Orphaned {
		t.Errorf("rescan's row: missing %v, want w2 orphaned", ms)
	}

	register(t, e.etcd, "/admin", "w2")
	if ms := statsOf(t, e, "r1").MissingShards; len(ms) != 0 {
		t.Errorf("r1 with w2 registered: missing %v, want none", ms)
	}
}

func TestForceAdoptRefusesNamingTheProblemAndMarksNothing(t *testing.T) {
	e := orphanEnv(t)
	c, ctx := e.client, e.ctx
	adopt := func(target, shard string) error {
		_, err := c.ForceAdopt(ctx, &tidemarkv1.ForceAdoptRequest{Target: target, Shard: shard})
		return err
	}
	wantCode(t, "malformed target", adopt("a/b", "w2"), codes.InvalidArgument, `"a/b"`)
	wantCode(t, "generic: with no name", adopt("generic:", "w2"), codes.InvalidArgument, `"generic:"`)
	wantCode(t, "no target", adopt("", "w2"), codes.InvalidArgument, "target is required")
	wantCode(t, "malformed shard", adopt("r1", "../x"), codes.InvalidArgument, `"../x"`)
	wantCode(t, "shard with a colon", adopt("r1", "10.0.0.1:9"), codes.InvalidArgument, `"10.0.0.1:9"`)
	wantCode(t, "no shard", adopt("r1", ""), codes.InvalidArgument, "shard is required")
	wantCode(t, "unregistered store", adopt("nope", "w2"), codes.NotFound, `"nope"`)
	wantCode(t, "unregistered generic store", adopt("generic:r1", "w2"), codes.NotFound, `"generic:r1"`)
	wantCode(t, "registered worker", adopt("r1", "w1"), codes.FailedPrecondition, "worker w1 at 10.0.0.1:w1", "registered")
	wantCode(t, "unknown shard", adopt("r1", "w9"), codes.NotFound, "w9", "w1, w2")

	if n := taskCount(t, e); n != 0 {
		t.Errorf("%d tasks after refused adoptions, want none", n)
	}
	if n := e.wakes.Load(); n != 0 {
		t.Errorf("refused adoptions woke the scheduler %d times", n)
	}
	if got := orphanedShards(t, e); len(got) != 0 {
		t.Errorf("refused adoptions orphaned %v", got)
	}
}

// The refusals are sentinels of the class that gives their code.
func TestForceAdoptRefusalsAreSentinelsOfTheirClass(t *testing.T) {
	e := orphanEnv(t)
	cctx, cancel := context.WithTimeout(e.ctx, DefaultCallTimeout)
	defer cancel()
	register(t, e.etcd, "/admin", "w2")
	err := e.svc.activeShard(cctx, registry.MustParseTarget("r1"), "w9")
	if !errors.Is(err, errShardNotActive) || errclass.Of(err) != errclass.Gone {
		t.Errorf("unknown shard: %v (class %s), want errShardNotActive, Gone", err, errclass.Of(err))
	}
	if errclass.Of(errWorkerRegistered) != errclass.Precondition {
		t.Errorf("errWorkerRegistered is %s, want Precondition", errclass.Of(errWorkerRegistered))
	}
}

func taskCount(t *testing.T, e *adminEnv) int {
	t.Helper()
	list, err := e.client.ListTasks(e.ctx, &tidemarkv1.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Tasks)
}

func TestForceAdoptOrphansTheShardNowAndEnqueuesOneMerge(t *testing.T) {
	e := orphanEnv(t)
	c, ctx := e.client, e.ctx
	t0 := e.clock.Now()
	if ms := statsOf(t, e, "r1").MissingShards; len(ms) != 1 || ms[0].Orphaned {
		t.Fatalf("r1 before the adopt: missing %v, want w2 within its grace", ms)
	}
	e.clock.SetTime(t0.Add(time.Second))

	first, err := c.ForceAdopt(ctx, &tidemarkv1.ForceAdoptRequest{Target: "r1", Shard: "w2"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Deduplicated || first.Task.Kind != "merge_wal" || first.Task.Target != "r1" || first.Task.State != "queued" {
		t.Fatalf("adopt = %v, want a queued merge_wal of r1", first)
	}
	m := first.Shard
	if m.Shard != "w2" || !m.Orphaned || !m.MissingSince.AsTime().Equal(t0) || !m.OrphanedAt.AsTime().Equal(t0.Add(time.Second)) {
		t.Errorf("adopted shard = %v, want w2 orphaned now, missing since %s", m, t0)
	}
	if e.wakes.Load() < 1 {
		t.Error("the scheduler was not woken")
	}

	// The grace is skipped: the fan-out of that task adopts w2, and the sweep
	// would enqueue for it too.
	row, err := e.scanner.Row(ctx, registry.MustParseTarget("r1"))
	if err != nil {
		t.Fatal(err)
	}
	workers, err := e.svc.cfg.Discovery.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.orphans.Of(row, workers); !slices.Equal(got, []string{"w2"}) {
		t.Errorf("the fan-out adopts %v, want [w2]", got)
	}
	if got := statsOf(t, e, "r1").MissingShards; len(got) != 1 || !got[0].Orphaned || !got[0].MissingSince.AsTime().Equal(t0) {
		t.Errorf("stats after the adopt: missing %v, want w2 orphaned since %s", got, t0)
	}

	second, err := c.ForceAdopt(ctx, &tidemarkv1.ForceAdoptRequest{Target: "r1", Shard: "w2"})
	if err != nil {
		t.Fatal(err)
	}
	if !second.Deduplicated || second.Task.Id != first.Task.Id {
		t.Errorf("second adopt = %v, want task %s deduplicated", second, first.Task.Id)
	}
	if n := taskCount(t, e); n != 1 {
		t.Errorf("%d tasks after two adopts, want 1", n)
	}
}

// A shard the stats row does not list yet (its worker wrote, and left, since the
// last scan) is found by observing the store again.
func TestForceAdoptObservesAStoreWhoseRowIsOlderThanTheShard(t *testing.T) {
	e := newAdminEnv(t, nil)
	register(t, e.etcd, "/admin", "w1")
	if _, err := e.scanner.Rescan(e.ctx, registry.MustParseTarget("generic:g1")); err != nil {
		t.Fatal(err)
	}
	addShard(t, e.bucket, registry.KindGeneric, "g1", "w3")
	resp, err := e.client.ForceAdopt(e.ctx, &tidemarkv1.ForceAdoptRequest{Target: "generic:g1", Shard: "w3"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Task.Target != "generic:g1" || !resp.Shard.Orphaned {
		t.Errorf("adopt = %v", resp)
	}
	row, err := e.scanner.Row(e.ctx, registry.MustParseTarget("generic:g1"))
	if err != nil || !slices.Contains(row.ActiveShards, "w3") {
		t.Errorf("generic:g1's row after the adopt: %v, %v; want w3 active", row.ActiveShards, err)
	}
}

// ForceAdopt is guarded as RequeueMerge is: without the token it is refused and
// marks and enqueues nothing.
func TestForceAdoptWithoutCredentialIsUnauthenticated(t *testing.T) {
	flags := auth.Flags{Token: testToken}
	srv, err := flags.Server(nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	e := orphanEnv(t, srv.Guard.ServerOptions()...)
	req := &tidemarkv1.ForceAdoptRequest{Target: "r1", Shard: "w2"}
	if _, err := e.client.ForceAdopt(e.ctx, req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("ForceAdopt without a token = %v, want Unauthenticated", err)
	}
	if got := orphanedShards(t, e); len(got) != 0 {
		t.Errorf("a refused adopt orphaned %v", got)
	}
	cc, err := grpc.NewClient(e.conn.Target(), auth.DialOptions(testToken, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := tidemarkv1.NewAdminServiceClient(cc).ForceAdopt(e.ctx, req)
	if err != nil || resp.Task.GetId() == "" {
		t.Fatalf("ForceAdopt with the token = %v, %v", resp, err)
	}
	list, err := tidemarkv1.NewAdminServiceClient(cc).ListTasks(e.ctx, &tidemarkv1.ListTasksRequest{})
	if err != nil || len(list.Tasks) != 1 {
		t.Fatalf("tasks = %v, %v; want the one adopt enqueued", list, err)
	}
}

// A master calling a static worker list tracks no orphans (only registered workers
// say which shards have an owner): adopt says so rather than enqueue a merge that
// would adopt nothing.
func TestForceAdoptWithoutATrackerIsRefused(t *testing.T) {
	e := newAdminEnv(t, nil)
	svc, err := NewAdminService(AdminConfig{Tasks: e.ts, Scanner: e.scanner, Registry: registry.New(e.bucket),
		Discovery: fanout.StaticDiscovery{}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.ForceAdopt(e.ctx, &tidemarkv1.ForceAdoptRequest{Target: "r1", Shard: "w2"})
	wantCode(t, "no tracker", err, codes.FailedPrecondition, "WORKER_ENDPOINTS")
}
