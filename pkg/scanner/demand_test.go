package scanner

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/pkg/coord/pending"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// demandWorld is a MergeDemand whose rounds a test runs one at a time, over the
// pending records the test puts, with one fake clock for it and the task queue.
type demandWorld struct {
	*env
	clk *clocktesting.FakeClock
	d   *MergeDemand
}

func newDemandWorld(t *testing.T) *demandWorld {
	e := newEnv(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC))
	e.ts = tasks.New(e.client, "/test/"+t.Name(), tasks.WithHolder("replica-a"), tasks.WithLogger(e.log), tasks.WithClock(clk))
	d := NewMergeDemand(e.client, e.ts, StaticLease(e.grant()), DemandConfig{
		MinGenerations: 8, MaxDelay: 30 * time.Second, RetryAfterFailure: 10 * time.Second, Clock: clk, Logger: e.log,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.view.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &demandWorld{env: e, clk: clk, d: d}
}

// publish replaces worker's entries by entries, each written anew as a worker
// writes a changed entry (the JSON of package pending's keys), and waits until the
// MergeDemand's view has them.
func (w *demandWorld) publish(worker string, entries ...pending.Entry) {
	w.t.Helper()
	keep := map[string]bool{}
	var rev int64
	for _, e := range entries {
		keep[w.ts.Keys().Pending(worker, e.Target.String())] = true
		value, err := json.Marshal(map[string]any{"generations": e.Generations, "bytes": e.Bytes,
			"oldest_sealed_at": e.OldestSealedAt, "published_at": w.clk.Now()})
		if err != nil {
			w.t.Fatal(err)
		}
		resp, err := w.client.Put(w.ctx, w.ts.Keys().Pending(worker, e.Target.String()), string(value))
		if err != nil {
			w.t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	old, err := w.client.Get(w.ctx, w.ts.Keys().PendingOf(worker), clientv3.WithPrefix())
	if err != nil {
		w.t.Fatal(err)
	}
	for _, kv := range old.Kvs {
		if !keep[string(kv.Key)] {
			resp, err := w.client.Delete(w.ctx, string(kv.Key))
			if err != nil {
				w.t.Fatal(err)
			}
			rev = resp.Header.Revision
		}
	}
	testwait.Until(w.t, 10*time.Second, "the view has the entries", func() bool {
		return w.d.view.Revision() >= rev
	})
}

func (w *demandWorld) round() DemandSummary {
	w.t.Helper()
	sum, err := w.d.Round(w.ctx)
	if err != nil || sum.Skipped {
		w.t.Fatalf("round = %+v, %v", sum, err)
	}
	return sum
}

// finish claims the oldest queued merge, steps the clock, and finishes it with err.
func (w *demandWorld) finish(target string, err error) {
	w.t.Helper()
	c, cerr := w.ts.Claim(w.ctx, w.grant(), tasks.ClaimFilter{Kinds: []tasks.Kind{tasks.KindMergeWAL}})
	if cerr != nil {
		w.t.Fatalf("claim: %v", cerr)
	}
	if c.Task.Target.String() != target {
		w.t.Fatalf("claimed a merge of %s, want %s", c.Task.Target, target)
	}
	w.clk.Step(time.Second)
	if _, ferr := w.ts.Finish(w.ctx, c, tasks.Result{Err: err}); ferr != nil {
		w.t.Fatalf("finish: %v", ferr)
	}
}

func gens(target string, n int, sealedAt time.Time) pending.Entry {
	return pending.Entry{Target: registry.MustParseTarget(target), Generations: n, Bytes: int64(n) << 10, OldestSealedAt: sealedAt}
}

// A store is merged as soon as the records say so: enough generations summed over
// its workers' shards, or an oldest generation older than MERGE_MAX_DELAY; a store
// below both waits, and a store with a live merge gets no second one.
func TestMergeDemandEnqueuesStoresDueByGenerationsOrAge(t *testing.T) {
	w := newDemandWorld(t)
	now := w.clk.Now()
	w.publish("w1", gens("busy", 5, now), gens("quiet", 1, now.Add(-40*time.Second)), gens("young", 2, now))
	w.publish("w2", gens("busy", 3, now))

	sum := w.round()
	if sum.Due != 2 || sum.Enqueued != 2 || sum.Pending != 11 {
		t.Fatalf("round = %+v, want busy (8 generations over two shards) and quiet (40 s old) enqueued", sum)
	}
	if got := w.queuedTargets(); !slices.Equal(got, []string{"busy", "quiet"}) {
		t.Fatalf("queued %v, want busy (most pending) then quiet", got)
	}
	// quiet is due when its oldest generation reached MERGE_MAX_DELAY, 10 s ago;
	// busy, due by count, at once: the scheduler takes quiet first.
	queued, _, err := w.ts.List(w.ctx, tasks.ListFilter{State: tasks.StateQueued})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queued {
		want := map[string]time.Time{"busy": now, "quiet": now.Add(-10 * time.Second)}[q.Target.String()]
		if !q.DueAt.Equal(want) {
			t.Fatalf("%s due %v, want %v", q.Target, q.DueAt, want)
		}
	}
	if sum := w.round(); sum.Live != 2 || sum.Enqueued+sum.Deduplicated != 0 {
		t.Fatalf("round with both merges live = %+v, want no enqueue", sum)
	}
	w.clk.Step(30 * time.Second)
	if sum := w.round(); sum.Due != 3 || sum.Live != 2 || sum.Enqueued != 1 {
		t.Fatalf("round 30 s after young's seal = %+v, want young enqueued by age", sum)
	}
	w.finish("quiet", nil)
}

// After a merge, a record that arrived before the merge started still counts the
// generations it took: judging it would merge nothing. The store waits for its
// workers' next records (or demandSettle); a failed merge is retried after
// RetryAfterFailure, not at every round.
func TestMergeDemandWaitsForRecordsNewerThanTheLastMerge(t *testing.T) {
	w := newDemandWorld(t)
	now := w.clk.Now()
	w.publish("w1", gens("a", 9, now), gens("b", 8, now))
	if sum := w.round(); sum.Enqueued != 2 {
		t.Fatalf("first round = %+v, want a and b enqueued", sum)
	}
	w.clk.Step(time.Second)
	w.finish("a", nil)
	w.finish("b", errors.New("worker w2: unavailable"))

	if sum := w.round(); sum.Enqueued != 0 || sum.Due != 1 || sum.FailedLately != 1 {
		t.Fatalf("round after the merges on the old record = %+v, want nothing due: a's record predates its merge, b failed", sum)
	}
	if got := w.queuedTargets(); len(got) != 0 {
		t.Fatalf("queued %v after the merges, want none", got)
	}

	// w1 republishes after a's merge: a counts again.
	w.clk.Step(time.Second)
	w.publish("w1", gens("a", 8, now.Add(2*time.Second)), gens("b", 8, now))
	sum := w.round()
	if got := w.queuedTargets(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("queued %v after w1's new record (round %+v), want a only: b's merge failed %s ago", got, sum, 2*time.Second)
	}
	w.clk.Step(10 * time.Second)
	w.round()
	if got := w.queuedTargets(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("queued %v after RetryAfterFailure, want b retried", got)
	}
}

// A record that does not change after a merge of its store was not changed by it:
// it counts again demandSettle after the merge was seen finished.
func TestMergeDemandTakesAnUnchangedRecordAgainAfterItSettles(t *testing.T) {
	w := newDemandWorld(t)
	w.publish("w1", gens("a", 8, w.clk.Now()))
	w.round()
	w.clk.Step(time.Second)
	w.finish("a", nil)
	if sum := w.round(); sum.Enqueued != 0 {
		t.Fatalf("round right after the merge = %+v, want a left alone", sum)
	}
	w.clk.Step(demandSettle)
	if sum := w.round(); sum.Enqueued != 1 {
		t.Fatalf("round %s after the merge = %+v, want a enqueued on its unchanged record", demandSettle, sum)
	}
}

// Only the replica holding the lock judges; the other skips.
func TestMergeDemandRunsOnOneReplica(t *testing.T) {
	w := newDemandWorld(t)
	other := NewMergeDemand(w.client, w.replica("replica-b"), StaticLease(w.grant()), DemandConfig{Clock: w.clk, Logger: w.log})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); other.view.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	w.publish("w1", gens("a", 8, w.clk.Now()))
	w.round()
	testwait.Until(t, 10*time.Second, "the other replica's view synced", other.view.Synced)
	sum, err := other.Round(w.ctx)
	if err != nil || !sum.Skipped {
		t.Fatalf("other replica's round = %+v, %v; want skipped", sum, err)
	}
}

// Rounds come a tick apart, so a store whose oldest generation reaches
// MERGE_MAX_DELAY before the next round is enqueued in this one: never up to a
// tick late. One a tick and more short of it waits.
func TestMergeDemandEnqueuesAStoreThatTurnsDueBeforeTheNextRound(t *testing.T) {
	w := newDemandWorld(t)
	now := w.clk.Now()
	w.publish("w1", gens("soon", 1, now.Add(-(DefaultMergeMaxDelay-demandTick/2))),
		gens("later", 1, now.Add(-(DefaultMergeMaxDelay-2*demandTick))))
	if sum := w.round(); sum.Enqueued != 1 {
		t.Fatalf("round = %+v, want soon enqueued", sum)
	}
	if got := w.queuedTargets(); !slices.Equal(got, []string{"soon"}) {
		t.Fatalf("queued %v, want soon only", got)
	}
}

// Stores are served in the order they fell behind: a busy store whose
// generations piled up while its last merge ran is due when its count reached
// MERGE_WAL_MIN_GENERATIONS (its 8th of 80 generations arrived 9 s ago, taking
// them as evenly spread over the 10 s since its oldest), before a quiet store that
// came due by age 2 s ago; one that piled up just now is due now, after it.
func TestMergeDemandServesStoresInTheOrderTheyFellBehind(t *testing.T) {
	w := newDemandWorld(t)
	now := w.clk.Now()
	w.publish("w1", gens("quiet", 1, now.Add(-32*time.Second)), gens("piled", 40, now.Add(-10*time.Second)), gens("burst", 80, now))
	w.publish("w2", gens("piled", 40, now.Add(-5*time.Second)))
	if sum := w.round(); sum.Enqueued != 3 {
		t.Fatalf("round = %+v, want three enqueued", sum)
	}
	queued, _, err := w.ts.List(w.ctx, tasks.ListFilter{State: tasks.StateQueued})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{"piled": now.Add(-9 * time.Second), "quiet": now.Add(-2 * time.Second), "burst": now}
	for _, q := range queued {
		if !q.DueAt.Equal(want[q.Target.String()]) {
			t.Errorf("%s due %v, want %v", q.Target, q.DueAt.Sub(now), want[q.Target.String()].Sub(now))
		}
	}
	var order []string
	for range 3 {
		c, err := w.ts.Claim(w.ctx, w.grant(), tasks.ClaimFilter{Kinds: []tasks.Kind{tasks.KindMergeWAL}})
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, c.Task.Target.String())
	}
	if !slices.Equal(order, []string{"piled", "quiet", "burst"}) {
		t.Fatalf("claimed %v, want piled, quiet, burst", order)
	}
}

// MERGE_MAX_DELAY is the age by which a store's rows are merged, so a store due
// by age is enqueued that much earlier than MERGE_MAX_DELAY as merges take from
// their enqueue (the wait for a slot included): once a merge by age has taken
// 8 s (3 in the queue, 5 running), a store whose oldest generation is 23 s old
// (of 30 s) is due, with due_at when it turns 22 s; one 20 s old is not yet. A
// merge by count, however slow, does not count: it is a busy store's.
func TestMergeDemandStartsAMergeByAgeAsEarlyAsMergesTake(t *testing.T) {
	w := newDemandWorld(t)
	now := w.clk.Now()
	w.publish("w1", gens("busy", 8, now))
	if sum := w.round(); sum.Enqueued != 1 {
		t.Fatalf("round = %+v, want busy enqueued", sum)
	}
	c, err := w.ts.Claim(w.ctx, w.grant(), tasks.ClaimFilter{Kinds: []tasks.Kind{tasks.KindMergeWAL}})
	if err != nil {
		t.Fatal(err)
	}
	w.clk.Step(12 * time.Second)
	if _, err := w.ts.Finish(w.ctx, c, tasks.Result{}); err != nil {
		t.Fatal(err)
	}
	w.publish("w1") // the merge took busy's generations
	w.round()       // sees the merge by count done: 12 s, not counted
	w.publish("w1", gens("old", 1, w.clk.Now().Add(-31*time.Second)))
	if sum := w.round(); sum.Enqueued != 1 {
		t.Fatalf("round = %+v, want old enqueued", sum)
	}
	w.clk.Step(3 * time.Second) // in the queue, waiting for a slot
	c, err = w.ts.Claim(w.ctx, w.grant(), tasks.ClaimFilter{Kinds: []tasks.Kind{tasks.KindMergeWAL}})
	if err != nil {
		t.Fatal(err)
	}
	w.clk.Step(5 * time.Second)
	if _, err := w.ts.Finish(w.ctx, c, tasks.Result{}); err != nil {
		t.Fatal(err)
	}
	w.publish("w1") // the merge took old's generation
	w.round()       // sees the merge by age done 8 s after it was enqueued

	now = w.clk.Now()
	w.publish("w1", gens("ripe", 1, now.Add(-23*time.Second)), gens("green", 1, now.Add(-20*time.Second)))
	if sum := w.round(); sum.Enqueued != 1 {
		t.Fatalf("round = %+v, want ripe enqueued (due by age 22 s: 30 s less the 8 s merges take)", sum)
	}
	queued, _, err := w.ts.List(w.ctx, tasks.ListFilter{State: tasks.StateQueued})
	if err != nil || len(queued) != 1 || queued[0].Target.String() != "ripe" {
		t.Fatalf("queued %v (%v), want ripe only", queued, err)
	}
	if want := now.Add(-time.Second); !queued[0].DueAt.Equal(want) {
		t.Fatalf("ripe due at %v, want %v (when its oldest generation turned 22 s)", queued[0].DueAt, want)
	}
}

// The lead is the slowest of the kept merge times (MERGE_MAX_DELAY is a bound,
// and the slowest is the last of a burst of stores due together), and never more
// than half of MERGE_MAX_DELAY: slow or clock-skewed merges cannot make quiet
// stores merge much more often than asked. A slow merge is forgotten once
// mergeTimesKept newer ones are in.
func TestMergeTimesLeadIsTheSlowestBoundedByHalfTheDelay(t *testing.T) {
	var m mergeTimes
	if got := m.startBy(30 * time.Second); got != 30*time.Second {
		t.Fatalf("no merges seen: start by %v, want 30 s", got)
	}
	for i := range mergeTimesKept {
		d := time.Second
		if i == mergeTimesKept/2 { // the last of a burst, after a wait for a slot
			d = 6 * time.Second
		}
		m.add(d)
	}
	if got := m.startBy(30 * time.Second); got != 24*time.Second {
		t.Fatalf("start by %v, want 24 s (the slowest took 6 s)", got)
	}
	m.add(time.Hour)
	if got := m.startBy(30 * time.Second); got != 15*time.Second {
		t.Fatalf("start by %v after an hour-long merge, want 15 s (half of 30 s)", got)
	}
	for range mergeTimesKept {
		m.add(2 * time.Second)
	}
	if got := m.startBy(30 * time.Second); got != 28*time.Second {
		t.Fatalf("start by %v once the slow merges are forgotten, want 28 s", got)
	}
}
