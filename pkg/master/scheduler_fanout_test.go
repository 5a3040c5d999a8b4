package master

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// The scheduler running the merge_wal fan-out: what a run's outcome makes of its
// task (done, skipped, failed and cooling down), its metrics, and its gate. The
// workers are a fakeCaller; the fan-out's own calls over gRPC are tested in
// package fanout.

// runScheduler runs a scheduler of merge_wal tasks through a fan-out over
// discovery and caller, counting finished tasks in metrics (if set), until the
// test ends.
func runScheduler(t *testing.T, client *clientv3.Client, ts *tasks.Queue, discovery fanout.Discovery, caller fanout.Caller, metrics *Metrics) *Scheduler {
	t.Helper()
	cfg := SchedulerConfig{Tasks: ts, Lease: session(t, client, 10).Lease, PollInterval: 10 * time.Millisecond,
		Runners: map[tasks.Kind]Runner{tasks.KindMergeWAL: fanout.New(fanout.Config{Discovery: discovery, Caller: caller})}}
	if metrics != nil {
		cfg.OnFinish = metrics.ObserveTask
	}
	s := NewScheduler(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.Run(ctx, time.Second) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return s
}

// one is a static list of worker w0.
var one = fanout.StaticDiscovery{{InstanceID: "w0", GRPCAddr: "127.0.0.1:1"}}

// The whole path: an enqueued merge_wal is claimed by the scheduler and fanned out
// with the claim's fencing token; the task record says what happened.
func TestMergeWalTaskRunsThroughTheScheduler(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ts := tasks.New(client, "/fan")
	caller := &fakeCaller{known: map[string]int64{"w0": 2}}
	runScheduler(t, client, ts, one, caller, nil)
	task, _, err := ts.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("generic:gs"))
	if err != nil {
		t.Fatal(err)
	}
	got := waitState(t, ts, task.ID, tasks.StateDone)
	if got.Detail != "merged 2 generations across 1/1 worker" {
		t.Fatalf("detail %q", got.Detail)
	}
	if calls := caller.called(); got.FencingToken <= 0 || !slices.Equal(calls, []string{fmt.Sprintf("w0 generic:gs %d", got.FencingToken)}) {
		t.Fatalf("worker calls %v, task recorded token %d", calls, got.FencingToken)
	}
}

// switchableDiscovery lists whatever workers were set last.
type switchableDiscovery struct {
	workers atomic.Pointer[[]fanout.Worker]
}

func (d *switchableDiscovery) Workers(context.Context) ([]fanout.Worker, error) {
	if p := d.workers.Load(); p != nil {
		return *p, nil
	}
	return nil, nil
}

// A merge queued while no worker is registered (all of them restarting, or an
// operator's requeue during a rollout) must wait in the queue for them, not be
// claimed and failed with "no live workers" - which lost the requeued merge in a
// chaos run.
func TestMergeWalTaskWaitsQueuedWhileNoWorkerIsListed(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ts := tasks.New(client, "/gate")
	discovery := &switchableDiscovery{}
	s := runScheduler(t, client, ts, discovery, &fakeCaller{known: map[string]int64{"w0": 2}}, nil)
	task, _, err := ts.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("generic:gs"))
	if err != nil {
		t.Fatal(err)
	}

	// Many polling rounds with nobody to merge on: the task must stay queued and
	// unclaimed.
	time.Sleep(300 * time.Millisecond)
	got, err := ts.Get(context.Background(), task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != tasks.StateQueued || got.Attempts != 0 {
		t.Fatalf("with no worker listed the task is %s after %d attempts (%q), want queued and never claimed",
			got.State, got.Attempts, got.Error)
	}

	discovery.workers.Store(&[]fanout.Worker{one[0]})
	s.Wake()
	if done := waitState(t, ts, task.ID, tasks.StateDone); done.Attempts != 1 {
		t.Errorf("task done after %d attempts, want 1", done.Attempts)
	}
}

// A merge queued for a store that was deleted before it ran has nothing left to do:
// it ends done and says "skipped", and it is no failure - master_tasks_total's
// failed series is what alerts watch.
func TestMergeOfADeletedStoreIsSkippedNotFailed(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ts := tasks.New(client, "/skip")
	caller := &fakeCaller{known: map[string]int64{"w1": 2},
		fail: map[string]error{"w0": status.Error(codes.NotFound, `rollout store "s": store not found`)}}
	metrics := NewMetrics(nil)
	runScheduler(t, client, ts, fanout.StaticDiscovery{one[0], {InstanceID: "w1", GRPCAddr: "127.0.0.1:2"}}, caller, metrics)
	task, _, err := ts.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("s"))
	if err != nil {
		t.Fatal(err)
	}
	got := waitFinished(t, ts, task.ID)
	if got.State != tasks.StateDone || got.Detail != "skipped: store deleted" || got.Error != "" {
		t.Fatalf("task %s, detail %q, error %q; want done, skipped: store deleted", got.State, got.Detail, got.Error)
	}
	if calls := caller.called(); len(calls) != 1 {
		t.Errorf("calls %v: the fan-out went on to another worker after the store was found deleted", calls)
	}
	for result, want := range map[string]float64{"skipped": 1, "failed": 0, "success": 0} {
		if n := testutil.ToFloat64(metrics.Tasks.WithLabelValues("merge_wal", result)); n != want {
			t.Errorf("master_tasks_total{kind=merge_wal,result=%s} = %v, want %v", result, n, want)
		}
	}
}

// A round that merges nothing still calls every worker; the merge sweep used to
// enqueue one after each merge, on the stats row scanned before it. They are
// counted (master_merge_wal_empty_rounds_total) from the stats the task records
// beside its detail (which says "1 generation", not "1 generations").
func TestAMergeRoundThatMergedNothingIsCounted(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ts := tasks.New(client, "/empty")
	caller := &fakeCaller{known: map[string]int64{}}
	metrics := NewMetrics(nil)
	runScheduler(t, client, ts, one, caller, metrics)
	for _, tc := range []struct {
		merged    int64
		detail    string
		wantEmpty float64
	}{
		{0, "merged 0 generations across 1/1 worker", 1},
		{1, "merged 1 generation across 1/1 worker", 1},
		{3, "merged 3 generations across 1/1 worker", 1},
	} {
		caller.merges("w0", tc.merged)
		task, _, err := ts.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("s"))
		if err != nil {
			t.Fatal(err)
		}
		got := waitState(t, ts, task.ID, tasks.StateDone)
		if got.Detail != tc.detail {
			t.Fatalf("detail %q, want %q", got.Detail, tc.detail)
		}
		if got.Stats.GenerationsMerged != tc.merged || got.Stats.Workers != 1 || got.Stats.WorkersMerged != 1 {
			t.Fatalf("recorded stats %+v, want %d generations merged by 1/1 worker", got.Stats, tc.merged)
		}
		if n := testutil.ToFloat64(metrics.MergeEmptyRounds); n != tc.wantEmpty {
			t.Fatalf("after %q: empty rounds %v, want %v", got.Detail, n, tc.wantEmpty)
		}
	}
}

// A merge that fails on a corrupt object fails the same way at every sweep until an
// operator repairs it: it fails naming the object, and its target cools down
// (P/cooldown/merge_wal/<target>) instead of being claimed again every sweep.
func TestACorruptObjectFailsTheMergeAndCoolsItsTargetDown(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ts := tasks.New(client, "/halt")
	const key = "rollout/s/_versions/00000000000000000003.json"
	caller := &fakeCaller{fail: map[string]error{
		"w0": status.Error(codes.DataLoss, "store s: refresh base: manifest "+key+": corrupt table object: unexpected end of JSON input")}}
	metrics := NewMetrics(nil)
	runScheduler(t, client, ts, one, caller, metrics)
	task, _, err := ts.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("s"))
	if err != nil {
		t.Fatal(err)
	}
	got := waitFinished(t, ts, task.ID)
	if got.State != tasks.StateFailed || !strings.Contains(got.Error, key) {
		t.Fatalf("task %s, error %q; want failed naming %s", got.State, got.Error, key)
	}
	cd, ok, err := ts.Cooldown(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("s"))
	if err != nil || !ok || cd.Failures != 1 || !strings.Contains(cd.LastError, key) || !cd.Until.After(got.FinishedAt) {
		t.Fatalf("cooldown of merge_wal s: %+v ok=%v err=%v; want one failure naming %s, in the future", cd, ok, err, key)
	}
	if n := testutil.ToFloat64(metrics.Tasks.WithLabelValues("merge_wal", "failed")); n != 1 {
		t.Errorf("master_tasks_total{kind=merge_wal,result=failed} = %v, want 1", n)
	}
}

// waitFinished waits until task id is done or failed.
func waitFinished(t *testing.T, ts *tasks.Queue, id string) tasks.Task {
	t.Helper()
	var task tasks.Task
	testwait.For(t, 30*time.Second, "task "+id+" finished", func() (bool, string) {
		var err error
		if task, err = ts.Get(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		return task.State.Finished(), "still " + string(task.State)
	})
	return task
}
