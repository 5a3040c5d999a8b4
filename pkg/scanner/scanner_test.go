package scanner

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

func TestScanObservesGenericStoreWithThreeSealedAdds(t *testing.T) {
	e := newEnv(t)
	e.createGeneric("g", 3)
	e.createRollout("r", 0)
	s := e.scanner(e.grant(), Config{})

	sum := e.scan(s)
	if sum.Stores != 2 || sum.Observed != 2 || sum.Changed != 2 || sum.Errors != 0 {
		t.Fatalf("first round = %+v, want 2 stores observed in full and 2 rows written", sum)
	}
	g, _ := e.row("generic:g")
	if g.Target.String() != "generic:g" || g.Kind != registry.KindGeneric || g.Name != "g" {
		t.Fatalf("row = %+v, want target generic:g, kind generic, name g", g)
	}
	if g.PendingWALGenerations != 3 || g.PendingWALRows != 3 || !maps.Equal(g.PendingByShard, map[string]int{"w1": 3}) {
		t.Fatalf("pending = %d gens, %d rows, by shard %v; want 3, 3, {w1:3}", g.PendingWALGenerations, g.PendingWALRows, g.PendingByShard)
	}
	if g.Version != 1 || g.RowCount != 0 || g.FragmentCount != 0 || g.Shards != 1 || g.LastUpdated.IsZero() || g.ScannedAt.IsZero() {
		t.Fatalf("row = %+v, want the fresh base table (version 1, no rows) and one shard", g)
	}
	// The rollout store's target is its bare name.
	if r, _ := e.row("r"); r.Target.String() != "r" || r.Kind != registry.KindRollout || r.PendingWALGenerations != 0 {
		t.Fatalf("rollout row = %+v", r)
	}
	got, err := s.Row(e.ctx, registry.MustParseTarget("generic:g"))
	if err != nil || !got.SameObservation(g) {
		t.Fatalf("Row(generic:g) = %+v, %v; want %+v", got, err, g)
	}
}

// The scanner must visit thousands of stores every round: an unchanged store may
// cost only probes, never a manifest read nor an etcd write.
func TestUnchangedStoreIsNotRewrittenNorReread(t *testing.T) {
	e := newEnv(t)
	e.createGeneric("g", 3)
	s := e.scanner(e.grant(), Config{})
	e.scan(s)
	before, rev := e.row("generic:g")

	e.faults.ResetCounters()
	// Any read of a base manifest (_versions/) or a shard manifest (_manifests/)
	// fails the observation and fires the rule.
	baseReads := e.faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet}, KeyContains: "/_versions/"})
	shardReads := e.faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet}, KeyContains: "/_manifests/"})
	sum := e.scan(s)
	if sum.Probed != 1 || sum.Observed != 0 || sum.Changed != 0 || sum.Errors != 0 {
		t.Fatalf("unchanged round = %+v, want 1 probed, nothing observed in full or written", sum)
	}
	if n := baseReads.Fired() + shardReads.Fired(); n != 0 {
		t.Fatalf("unchanged round read %d manifests", n)
	}
	t.Logf("requests of an unchanged round: %v", e.faults.RequestCounts())
	// The only gets are the two latest-version hints (base table, shard w1).
	if gets := e.faults.Requests(objstore.OpGet); gets > 2 {
		t.Fatalf("unchanged round made %d gets, want at most 2 (hints): %v", gets, e.faults.RequestCounts())
	}
	after, rev2 := e.row("generic:g")
	if rev2 != rev {
		t.Fatalf("unchanged round rewrote the row: mod revision %d -> %d", rev, rev2)
	}
	if !after.ScannedAt.Equal(before.ScannedAt) {
		t.Fatalf("scanned_at changed without a write")
	}
}

func TestChangedStoreIsRewritten(t *testing.T) {
	e := newEnv(t)
	g := e.createGeneric("g", 3)
	s := e.scanner(e.grant(), Config{})
	e.scan(s)
	_, rev := e.row("generic:g")

	// A new generation: the base version is the same, the pending count is not.
	e.sealedAdd(g)
	sum := e.scan(s)
	if sum.Probed != 1 || sum.Changed != 1 {
		t.Fatalf("round after a seal = %+v, want 1 probed and 1 row written", sum)
	}
	row, rev2 := e.row("generic:g")
	if row.PendingWALGenerations != 4 || rev2 == rev {
		t.Fatalf("after a seal: pending %d (want 4), mod revision %d -> %d", row.PendingWALGenerations, rev, rev2)
	}

	// A merge: a new base version with the rows and the watermark.
	if r := e.merge(g); r.Generations != 4 {
		t.Fatalf("merged %d generations, want 4", r.Generations)
	}
	sum = e.scan(s)
	if sum.Observed != 1 || sum.Changed != 1 {
		t.Fatalf("round after a merge = %+v, want 1 observed in full and 1 row written", sum)
	}
	row, _ = e.row("generic:g")
	if row.Version != 2 || row.RowCount != 4 || row.FragmentCount != 1 || row.Bytes == 0 ||
		row.PendingWALGenerations != 0 || row.PendingByShard != nil {
		t.Fatalf("after a merge: row %+v, want version 2, 4 rows in 1 fragment, nothing pending", row)
	}
}

func TestDeletedStoreRowIsDropped(t *testing.T) {
	e := newEnv(t)
	e.createGeneric("g", 1)
	e.createGeneric("keep", 1)
	s := e.scanner(e.grant(), Config{})
	e.scan(s)

	if err := e.stores.Delete(e.ctx, registry.KindGeneric, "g"); err != nil {
		t.Fatal(err)
	}
	sum := e.scan(s)
	if sum.Stores != 1 || sum.Deleted != 1 || sum.Changed != 0 {
		t.Fatalf("round after a delete = %+v, want 1 store and 1 row deleted", sum)
	}
	if _, rev := e.row("generic:g"); rev != 0 {
		t.Fatal("the deleted store's row is still there")
	}
	if _, err := s.Row(e.ctx, registry.MustParseTarget("generic:g")); !errors.Is(err, stats.ErrRowNotFound) {
		t.Fatalf("stats.Row of a deleted store = %v, want stats.ErrRowNotFound", err)
	}
	if _, rev := e.row("generic:keep"); rev == 0 {
		t.Fatal("the other store's row went too")
	}
	if n := s.cache.len(); n != 1 {
		t.Fatalf("%d cached stores, want 1", n)
	}
}

// A throttled or broken store must not stop the others from being scanned.
func TestStoreErrorIsCountedAndDoesNotAbortTheRound(t *testing.T) {
	e := newEnv(t)
	a := e.createGeneric("a", 1)
	b := e.createGeneric("b", 1)
	reg := prometheus.NewRegistry()
	s := e.scanner(e.grant(), Config{Registerer: reg})
	e.scan(s)
	_, revB := e.row("generic:b")

	e.sealedAdd(a)
	e.sealedAdd(b)
	e.faults.AddRule(objstore.Rule{KeyPrefix: "generic/b@"})
	sum := e.scan(s)
	if sum.Errors != 1 || sum.Changed != 1 || sum.Deleted != 0 {
		t.Fatalf("round with a failing store = %+v, want 1 error and 1 row written", sum)
	}
	if row, _ := e.row("generic:a"); row.PendingWALGenerations != 2 {
		t.Fatalf("healthy store: pending %d, want 2", row.PendingWALGenerations)
	}
	if _, rev := e.row("generic:b"); rev != revB {
		t.Fatal("the failing store's row was touched")
	}
	if n := testutil.ToFloat64(s.metrics.errors); n != 1 {
		t.Fatalf("scan errors metric = %v, want 1", n)
	}
	if n := testutil.ToFloat64(s.metrics.written.WithLabelValues("put")); n != 3 {
		t.Fatalf("rows written metric = %v, want 3", n)
	}
	if n, err := testutil.GatherAndCount(reg, "master_scan_duration_seconds"); err != nil || n != 1 {
		t.Fatalf("duration histogram: %d series, %v", n, err)
	}
	// The failing store counts with the row it had: 2 pending in a, 1 in b.
	if total, most := testutil.ToFloat64(s.metrics.pendingTotal), testutil.ToFloat64(s.metrics.pendingMax); total != 3 || most != 2 {
		t.Fatalf("master_wal_pending_generations_total %v, _max %v; want 3 and 2", total, most)
	}

	e.faults.Clear()
	sum = e.scan(s)
	if sum.Errors != 0 || sum.Observed != 1 || sum.Changed != 1 {
		t.Fatalf("round after recovery = %+v, want the failed store observed from scratch and written", sum)
	}
}

func TestOnlyOneReplicaScansARound(t *testing.T) {
	e := newEnv(t)
	e.createGeneric("g", 1)
	reg := prometheus.NewRegistry() // shared: the second replica reuses the series
	replicas := []*Scanner{
		e.scannerOn(e.replica("replica-a"), e.grant(), Config{Registerer: reg}),
		e.scannerOn(e.replica("replica-b"), e.grant(), Config{Registerer: reg}),
	}
	for round := range 3 {
		var wg sync.WaitGroup
		sums := make([]Summary, 2)
		errs := make([]error, 2)
		for i, s := range replicas {
			wg.Go(func() { sums[i], errs[i] = s.Scan(e.ctx) })
		}
		wg.Wait()
		ran := 0
		for i := range replicas {
			if errs[i] != nil {
				t.Fatalf("round %d, replica %d: %v", round, i, errs[i])
			}
			if !sums[i].Skipped {
				ran++
			}
		}
		if ran != 1 {
			t.Fatalf("round %d: %d replicas scanned, want 1 (%+v)", round, ran, sums)
		}
	}
	if n := testutil.ToFloat64(replicas[0].metrics.rounds.WithLabelValues("done")); n != 3 {
		t.Fatalf("rounds done = %v, want 3 across both replicas", n)
	}
	if n := testutil.ToFloat64(replicas[1].metrics.rounds.WithLabelValues("skipped")); n != 3 {
		t.Fatalf("rounds skipped = %v, want 3 across both replicas", n)
	}
}

// A master whose lease expired mid-round (a long GC pause, a partition) must not
// write the stats it computed: another replica may hold the lock by then.
func TestReplicaWhoseLeaseWasRevokedMidRoundCannotWrite(t *testing.T) {
	e := newEnv(t)
	e.createGeneric("g", 3)
	leaseA := e.grant()
	revoke := func(ctx context.Context) {
		if _, err := e.client.Revoke(ctx, leaseA); err != nil {
			t.Errorf("revoke: %v", err)
		}
	}
	a := e.scannerOn(e.replica("replica-a"), leaseA, Config{beforeWrite: revoke})
	_, err := a.Scan(e.ctx)
	if !errors.Is(err, tasks.ErrCoordinationLost) {
		t.Fatalf("scan after losing the lease = %v, want ErrCoordinationLost", err)
	}
	if n := e.rowCount(); n != 0 {
		t.Fatalf("%d stats rows written by a replica that lost its lock", n)
	}

	// Another replica takes the lock and writes.
	b := e.scannerOn(e.replica("replica-b"), e.grant(), Config{})
	if sum := e.scan(b); sum.Changed != 1 {
		t.Fatalf("other replica's round = %+v, want 1 row written", sum)
	}
	// The first replica knows it lost the lock and skips from now on.
	if sum, err := a.Scan(e.ctx); err != nil || !sum.Skipped {
		t.Fatalf("first replica's next round = %+v, %v; want skipped", sum, err)
	}
}

func TestRescanWritesOneTargetNow(t *testing.T) {
	e := newEnv(t)
	g := e.createGeneric("g", 2)
	holder := e.scannerOn(e.replica("replica-a"), e.grant(), Config{})
	e.scan(holder)
	// Rescan works on a replica that does not hold the scanner lock.
	other := e.scannerOn(e.replica("replica-b"), e.grant(), Config{})
	if sum, err := other.Scan(e.ctx); err != nil || !sum.Skipped {
		t.Fatalf("other replica's round = %+v, %v; want skipped", sum, err)
	}

	_, rev := e.row("generic:g")
	row, err := other.Rescan(e.ctx, registry.MustParseTarget("generic:g"))
	if err != nil || row.PendingWALGenerations != 2 {
		t.Fatalf("Rescan unchanged = %+v, %v", row, err)
	}
	if _, rev2 := e.row("generic:g"); rev2 != rev {
		t.Fatal("Rescan of an unchanged store rewrote the row")
	}

	e.sealedAdd(g)
	row, err = other.Rescan(e.ctx, registry.MustParseTarget("generic:g"))
	if err != nil || row.PendingWALGenerations != 3 {
		t.Fatalf("Rescan after a seal = %+v, %v; want 3 pending", row, err)
	}
	if stored, _ := e.row("generic:g"); stored.PendingWALGenerations != 3 {
		t.Fatalf("stored row pending = %d, want 3", stored.PendingWALGenerations)
	}
	// The holder's next round sees the row the Rescan wrote and writes nothing.
	if sum := e.scan(holder); sum.Changed != 0 || sum.Conflicts != 0 {
		t.Fatalf("holder's round after the Rescan = %+v, want nothing written", sum)
	}

	if _, err := other.Rescan(e.ctx, registry.MustParseTarget("generic:nope")); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("Rescan of an unregistered store = %v, want registry.ErrNotFound", err)
	}
	// Targets made without parsing ("generic:", "a/b", "generic:../x") are checked as their text is.
	for _, bad := range []registry.Target{
		registry.NewTarget(registry.KindGeneric, ""), registry.NewTarget(registry.KindRollout, "a/b"), registry.NewTarget(registry.KindGeneric, "../x"),
	} {
		if _, err := other.Rescan(e.ctx, bad); !errors.Is(err, tasks.ErrInvalidArgument) || !errors.Is(err, registry.ErrInvalidName) {
			t.Fatalf("Rescan(%q) = %v, want ErrInvalidArgument and ErrInvalidName", bad, err)
		}
	}
}

// A store created after a round listed the registries, then rescanned, must not
// lose its row to that round's deletions: the round's writes compare the revision
// it read.
func TestRoundDoesNotOverwriteARowWrittenDuringIt(t *testing.T) {
	e := newEnv(t)
	e.createGeneric("g", 1)
	var s *Scanner
	s = e.scanner(e.grant(), Config{
		beforeWrite: func(ctx context.Context) {
			// Between the round's reads and its writes: a store appears and is
			// rescanned, and g's row is rewritten by a Rescan.
			e.createGeneric("late", 1)
			if _, err := s.Rescan(ctx, registry.MustParseTarget("generic:late")); err != nil {
				t.Error(err)
			}
			if _, err := s.Rescan(ctx, registry.MustParseTarget("generic:g")); err != nil {
				t.Error(err)
			}
		},
	})
	sum := e.scan(s)
	// g: the round's put conflicts with the Rescan's; late: the round never
	// listed it, so it had nothing to delete or write.
	if sum.Conflicts != 1 || sum.Changed != 0 || sum.Deleted != 0 {
		t.Fatalf("round = %+v, want 1 conflict and nothing else written", sum)
	}
	if _, rev := e.row("generic:late"); rev == 0 {
		t.Fatal("the late store's row is missing")
	}
	if row, rev := e.row("generic:g"); rev == 0 || row.PendingWALGenerations != 1 {
		t.Fatalf("g's row = %+v", row)
	}
}

func TestStatsPages(t *testing.T) {
	e := newEnv(t)
	for _, target := range []string{"a", "b", "c", "generic:d", "generic:e"} {
		e.putRow(target, 1)
	}
	if _, err := e.client.Put(e.ctx, e.ts.Prefix()+"/stats/corrupt", "{"); err != nil {
		t.Fatal(err)
	}
	s := e.scanner(e.grant(), Config{})
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		rows, next, err := s.Stats(e.ctx, Page{Limit: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			got = append(got, r.Target.String())
		}
		if next == "" {
			break
		}
		token = next
	}
	want := []string{"a", "b", "c", "generic:d", "generic:e"}
	if len(got) != len(want) {
		t.Fatalf("paged targets = %v, want %v (the corrupt row left out)", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("paged targets = %v, want %v", got, want)
		}
	}
	if _, _, err := s.Stats(e.ctx, Page{Limit: -1}); !errors.Is(err, tasks.ErrInvalidArgument) {
		t.Fatalf("negative limit: %v", err)
	}
	if _, err := s.Row(e.ctx, registry.MustParseTarget("corrupt")); err == nil {
		t.Fatal("stats.Row of a corrupt value succeeded")
	}
	// A scan deletes rows of unregistered targets, corrupt ones included.
	if sum := e.scan(s); sum.Deleted != 6 {
		t.Fatalf("scan over unregistered rows = %+v, want 6 deleted", sum)
	}
}

// With a cache smaller than the number of stores, the stores left out are
// observed in full every round; the rows are the same.
func TestCacheBoundOnlyCostsFullObservations(t *testing.T) {
	e := newEnv(t)
	e.createGeneric("a", 1)
	e.createGeneric("b", 2)
	s := e.scanner(e.grant(), Config{MaxCachedStores: 1})
	e.scan(s)
	sum := e.scan(s)
	if sum.Probed != 1 || sum.Observed != 1 || sum.Changed != 0 {
		t.Fatalf("second round = %+v, want 1 probed, 1 observed in full, nothing written", sum)
	}
}

// A cached handle is trusted for FullObserveAfter, then dropped.
func TestCachedHandleIsReopenedAfterItsAge(t *testing.T) {
	e := newEnv(t)
	e.createGeneric("g", 1)
	clk := newFakeClock()
	s := e.scanner(e.grant(), Config{Clock: clk, FullObserveAfter: time.Hour})
	e.scan(s)
	clk.Step(30 * time.Minute)
	if sum := e.scan(s); sum.Probed != 1 {
		t.Fatalf("round at 30 min = %+v, want probed", sum)
	}
	clk.Step(30 * time.Minute)
	if sum := e.scan(s); sum.Observed != 1 || sum.Changed != 0 {
		t.Fatalf("round at 60 min = %+v, want observed in full, nothing written", sum)
	}
}

func TestRowEqualityIgnoresScannedAt(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	a := stats.Row{Target: registry.MustParseTarget("x"), Kind: registry.KindRollout, Name: "x", Version: 3, PendingWALGenerations: 2,
		PendingByShard: map[string]int{"w1": 2}, LastUpdated: now, ScannedAt: now}
	b := a
	b.ScannedAt = now.Add(time.Hour)
	b.LastUpdated = now.In(time.FixedZone("x", 3600))
	if !a.SameObservation(b) {
		t.Fatal("rows differing only in scanned_at (and the zone of last_updated) differ")
	}
	for _, change := range []func(*stats.Row){
		func(r *stats.Row) { r.Version++ },
		func(r *stats.Row) { r.PendingWALGenerations++ },
		func(r *stats.Row) { r.PendingByShard = map[string]int{"w2": 2} },
		func(r *stats.Row) { r.LastUpdated = r.LastUpdated.Add(time.Second) },
		func(r *stats.Row) { r.RowCount++ },
	} {
		c := a
		c.PendingByShard = maps.Clone(a.PendingByShard)
		change(&c)
		if a.SameObservation(c) {
			t.Fatalf("rows %+v and %+v compare equal", a, c)
		}
	}
	var empty, nilMap stats.Row
	empty.PendingByShard = map[string]int{}
	if !empty.SameObservation(nilMap) {
		t.Fatal("an empty pending_by_shard differs from none")
	}
}
