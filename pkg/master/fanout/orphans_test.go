package fanout

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/pkg/coord/membership"
	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

// trackerEnv is an orphans tracker on a fake clock over workers registered in a
// real etcd under /o.
type trackerEnv struct {
	t     *testing.T
	ctx   context.Context
	etcd  *clientv3.Client
	clock *clocktesting.FakePassiveClock
	o     *Orphans
}

func newTrackerEnv(t *testing.T) *trackerEnv {
	client, _ := etcdtest.Start(t)
	clk := clocktesting.NewFakePassiveClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	return &trackerEnv{t: t, ctx: context.Background(), etcd: client, clock: clk,
		o: NewOrphans(&membership.Discovery{Client: client, Prefix: "/o"}, DefaultOrphanGrace, clk, prometheus.NewRegistry())}
}

// register puts a worker's registration record as a worker writes it.
func register(t *testing.T, client *clientv3.Client, prefix, id string) {
	t.Helper()
	rec, _ := json.Marshal(Worker{InstanceID: id, GRPCAddr: "10.0.0.1:" + id})
	if _, err := client.Put(context.Background(), prefix+"/workers/"+id, string(rec)); err != nil {
		t.Fatal(err)
	}
}

func unregister(t *testing.T, client *clientv3.Client, prefix, id string) {
	t.Helper()
	if _, err := client.Delete(context.Background(), prefix+"/workers/"+id); err != nil {
		t.Fatal(err)
	}
}

// sweep is what one merge sweep asks of the tracker: the orphaned shards of each
// row.
func (e *trackerEnv) sweep(rows ...stats.Row) [][]string {
	e.t.Helper()
	orphaned, err := e.o.Check(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([][]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, orphaned(r))
	}
	return out
}

// wantOrphaned fails unless one sweep of row names exactly want.
func (e *trackerEnv) wantOrphaned(what string, row stats.Row, want ...string) {
	e.t.Helper()
	if got := e.sweep(row)[0]; !slices.Equal(got, want) {
		e.t.Errorf("%s (at +%s): orphaned %v, want %v", what, e.elapsed(), got, want)
	}
}

var trackerStart = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func (e *trackerEnv) elapsed() time.Duration { return e.clock.Now().Sub(trackerStart) }

func (e *trackerEnv) advance(d time.Duration) { e.clock.SetTime(e.clock.Now().Add(d)) }

func row(target string, active ...string) stats.Row {
	return stats.Row{Target: tgt(target), Shards: len(active), ActiveShards: active}
}

// The failure guarded: an ordinary restart of a worker (its registration gone for
// a few lease TTLs) must not have its shard adopted from under it; only a shard
// missing for the whole grace is orphaned.
func TestAShardMissingForLessThanTheGraceIsNotOrphaned(t *testing.T) {
	e := newTrackerEnv(t)
	register(t, e.etcd, "/o", "w1")
	r := row("r1", "w1", "w2")

	e.wantOrphaned("first seen missing", r)
	e.advance(DefaultOrphanGrace - time.Second)
	e.wantOrphaned("missing a second short of the grace", r)
	if got := testutil.ToFloat64(e.o.gauge); got != 0 {
		t.Errorf("tidemark_orphaned_shards = %v within the grace, want 0", got)
	}
	e.advance(time.Second)
	e.wantOrphaned("missing for the grace", r, "w2")
	if got := testutil.ToFloat64(e.o.gauge); got != 1 {
		t.Errorf("tidemark_orphaned_shards = %v, want 1", got)
	}
	// The fan-out's view agrees with the sweep's.
	workers, err := e.o.disc.Workers(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.o.Of(r, workers); !slices.Equal(got, []string{"w2"}) {
		t.Errorf("fan-out: orphaned %v, want [w2]", got)
	}
}

func TestAWorkerThatRegistersAgainWithinTheGraceStartsItsGraceOver(t *testing.T) {
	e := newTrackerEnv(t)
	register(t, e.etcd, "/o", "w1")
	r := row("r1", "w1", "w2")

	e.wantOrphaned("first seen missing", r)
	e.advance(DefaultOrphanGrace / 2)
	register(t, e.etcd, "/o", "w2")
	e.wantOrphaned("registered again", r)
	unregister(t, e.etcd, "/o", "w2")
	e.wantOrphaned("gone again", r)
	e.advance(DefaultOrphanGrace / 2)
	// A grace after it was first seen missing, but only half of one since it was
	// gone again.
	e.wantOrphaned("half a grace after it left again", r)
	e.advance(DefaultOrphanGrace / 2)
	e.wantOrphaned("a grace after it left again", r, "w2")

	// An orphaned shard whose worker comes back is no longer orphaned.
	register(t, e.etcd, "/o", "w2")
	e.wantOrphaned("back after being orphaned", r)
	if n := len(e.o.missing); n != 0 {
		t.Errorf("tracker holds %d shards with every worker registered", n)
	}
}

func TestTheTrackerForgetsShardsNoLongerActive(t *testing.T) {
	e := newTrackerEnv(t)
	register(t, e.etcd, "/o", "w1")
	r1, r2 := row("r1", "w1", "w2"), row("generic:g1", "w1", "w3")

	e.sweep(r1, r2)
	e.advance(DefaultOrphanGrace - time.Second)
	// w2 retired (adopted by someone else, or drained): r1 no longer lists it. A
	// sweep of another target forgets nothing of r1.
	e.sweep(r2)
	if _, ok := e.o.missing[orphanKey(tgt("r1"), "w2")]; !ok {
		t.Fatal("a sweep of generic:g1 forgot r1's missing shard")
	}
	e.sweep(row("r1", "w1"), r2)
	if _, ok := e.o.missing[orphanKey(tgt("r1"), "w2")]; ok {
		t.Fatal("r1's row no longer lists w2, and the tracker still has it")
	}
	// Active again (a retired shard with files due for deletion): its clock starts
	// over rather than counting the time it was not active.
	e.advance(time.Second)
	e.wantOrphaned("active again", r1)
	e.advance(DefaultOrphanGrace)
	e.wantOrphaned("a grace after it was active again", r1, "w2")
	// w3 of generic:g1 kept its clock through all of this.
	if got := e.sweep(r2)[0]; !slices.Equal(got, []string{"w3"}) {
		t.Errorf("generic:g1: orphaned %v, want [w3]", got)
	}
}

func TestForcingAShardOrphansItNowAndKeepsSinceWhenItIsMissing(t *testing.T) {
	e := newTrackerEnv(t)
	register(t, e.etcd, "/o", "w1")
	r := row("r1", "w1", "w2")
	e.wantOrphaned("first seen missing", r)
	seen := e.clock.Now()
	e.advance(time.Second)
	m := e.o.Force(tgt("r1"), "w2")
	if !m.Orphaned || !m.Since.Equal(seen) || !m.OrphanedAt.Equal(e.clock.Now()) {
		t.Errorf("forced = %+v, want orphaned now, missing since %s", m, seen)
	}
	e.wantOrphaned("forced", r, "w2")
	// A worker that registers under it clears the mark, as it clears the grace.
	register(t, e.etcd, "/o", "w2")
	e.wantOrphaned("forced, then registered", r)
	unregister(t, e.etcd, "/o", "w2")
	e.wantOrphaned("forced, registered, gone again", r)
}
