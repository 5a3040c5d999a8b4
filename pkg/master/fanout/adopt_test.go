package fanout

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/registry"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// adoptingWorker is a countingWorker that also adopts, recording the order of its
// calls.
type adoptingWorker struct {
	countingWorker
	mu    *sync.Mutex
	order *[]string
}

func (w *adoptingWorker) MergeWal(ctx context.Context, r *tidemarkv1.MergeWalRequest) (*tidemarkv1.MergeWalResponse, error) {
	w.mu.Lock()
	*w.order = append(*w.order, "merge "+w.name)
	w.mu.Unlock()
	return w.countingWorker.MergeWal(ctx, r)
}

func (w *adoptingWorker) AdoptShard(_ context.Context, r *tidemarkv1.AdoptShardRequest) (*tidemarkv1.AdoptShardResponse, error) {
	w.mu.Lock()
	*w.order = append(*w.order, "adopt "+r.GetShard()+" on "+w.name)
	w.mu.Unlock()
	return &tidemarkv1.AdoptShardResponse{Retired: true, InstanceId: w.name}, nil
}

// A merge_wal whose target has an orphaned shard has it adopted before the live
// workers merge (a merge that stops at a worker's error must not strand it), and
// when the worker the shard's hash picks is gone since discovery listed it (a
// rollout), the next live worker adopts it and the gone one is not called again.
// Production failure: adoption came last, after a 5 s unreachable timeout per
// worker killed since the claim, and asked a worker this very task had found
// unreachable; under churn shards were retired a minute after their worker died.
func TestFanOutAdoptsFirstAndPassesOverAnUnreachableAdopter(t *testing.T) {
	var mu sync.Mutex
	var order []string
	var inFlight, maxSeen atomic.Int32
	live := &adoptingWorker{countingWorker: countingWorker{name: "live", inFlight: &inFlight, maxSeen: &maxSeen}, mu: &mu, order: &order}
	dead := Worker{InstanceID: "dead", GRPCAddr: deadAddr(t)}
	liveW := Worker{InstanceID: "live", GRPCAddr: startWorkerService(t, live)}
	workers := StaticDiscovery{dead, liveW}
	if ringFrom("gone", workers)[0].InstanceID != "dead" {
		workers = StaticDiscovery{liveW, dead}
	}
	if ringFrom("gone", workers)[0].InstanceID != "dead" {
		t.Fatal("the test needs the unreachable worker to be the shard's first adopter")
	}
	clk := clocktesting.NewFakePassiveClock(time.Now())
	o := NewOrphans(workers, time.Minute, clk, prometheus.NewRegistry())
	row := stats.Row{Target: tgt("generic:gs"), ActiveShards: []string{"gone", "live"}}
	if got := o.Of(row, workers); len(got) != 0 {
		t.Fatalf("orphaned before the grace: %v", got)
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	caller := NewGRPCCaller(GRPCCallerConfig{DialTimeout: 500 * time.Millisecond})
	defer caller.Close()
	f := New(Config{Discovery: workers, Caller: caller, Orphans: o,
		Row: func(context.Context, registry.Target) (stats.Row, error) { return row, nil }})
	report, err := f.Run(context.Background(), claimFor("generic:gs", 7))
	if err == nil || !strings.Contains(err.Error(), "unavailable: dead") {
		t.Fatalf("err %v: want the task failed naming the unreachable worker", err)
	}
	if !strings.Contains(report.Detail, "adopted 1 orphaned shard") {
		t.Fatalf("detail %q: want the shard adopted", report.Detail)
	}
	if report.Stats.ShardsAdopted != 1 {
		t.Fatalf("stats %+v: want 1 shard adopted", report.Stats)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"adopt gone on live", "merge live"}
	if strings.Join(order, "; ") != strings.Join(want, "; ") {
		t.Fatalf("calls %q, want %q (adoption first, by the reachable worker; the dead one not called again)", order, want)
	}
}
