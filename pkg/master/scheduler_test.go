package master

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

func session(t *testing.T, c *clientv3.Client, ttl int) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(c, concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func waitState(t *testing.T, ts *tasks.Queue, id string, want tasks.State) tasks.Task {
	t.Helper()
	var task tasks.Task
	testwait.For(t, 30*time.Second, fmt.Sprintf("task %s to be %s", id, want), func() (bool, string) {
		var err error
		if task, err = ts.Get(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		return task.State == want, fmt.Sprintf("task %s is %s", id, task.State)
	})
	return task
}

func TestSchedulerRunsEachTaskOnceAcrossTwoMasters(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ts := tasks.New(client, "/sched")
	var runs sync.Map
	var dup atomic.Int32
	runner := RunnerFunc(func(ctx context.Context, c *tasks.Claim) (tasks.Report, error) {
		if _, loaded := runs.LoadOrStore(c.Task.ID, true); loaded {
			dup.Add(1)
		}
		time.Sleep(5 * time.Millisecond)
		return tasks.Report{Detail: "ok " + c.Task.Target.String()}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		sess := session(t, client, 10)
		s := NewScheduler(SchedulerConfig{Tasks: ts, Lease: sess.Lease,
			Runners:          map[tasks.Kind]Runner{tasks.KindMergeWAL: runner},
			MergeConcurrency: 2,
			PollInterval:     10 * time.Millisecond})
		wg.Add(1)
		go func() { defer wg.Done(); s.Run(ctx, time.Second) }()
	}
	var ids []string
	for i := 0; i < 10; i++ {
		task, _, err := ts.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget(fmt.Sprint("store", i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.ID)
	}
	for _, id := range ids {
		task := waitState(t, ts, id, tasks.StateDone)
		if task.Detail != "ok "+task.Target.String() {
			t.Fatalf("detail %q", task.Detail)
		}
	}
	cancel()
	wg.Wait()
	if dup.Load() != 0 {
		t.Fatalf("%d tasks ran twice", dup.Load())
	}
}

func TestSchedulerRecordsFailures(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ts := tasks.New(client, "/sched")
	sess := session(t, client, 10)
	s := NewScheduler(SchedulerConfig{Tasks: ts, Lease: sess.Lease, PollInterval: 10 * time.Millisecond,
		Runners: map[tasks.Kind]Runner{tasks.KindMergeWAL: RunnerFunc(func(context.Context, *tasks.Claim) (tasks.Report, error) {
			return tasks.Report{}, errors.New("worker w2 (127.0.0.1:1): boom")
		})}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx, time.Second); close(done) }()
	task, _, err := ts.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("s"))
	if err != nil {
		t.Fatal(err)
	}
	got := waitState(t, ts, task.ID, tasks.StateFailed)
	if got.Error != "worker w2 (127.0.0.1:1): boom" {
		t.Fatalf("error %q", got.Error)
	}
	cancel()
	<-done
}

// At shutdown a task still running after the drain time goes back to the queue at
// once (not after its lease expires), and a second master finishes it.
func TestShutdownReleasesRunningTasksToAnotherMaster(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ts := tasks.New(client, "/sched")
	block := make(chan struct{})
	slow := RunnerFunc(func(ctx context.Context, c *tasks.Claim) (tasks.Report, error) {
		select {
		case <-ctx.Done():
			return tasks.Report{}, ctx.Err()
		case <-block:
			return tasks.Report{Detail: "late"}, nil
		}
	})
	ctx1, stop1 := context.WithCancel(context.Background())
	s1 := NewScheduler(SchedulerConfig{Tasks: ts, Lease: session(t, client, 60).Lease, PollInterval: 10 * time.Millisecond,
		Runners: map[tasks.Kind]Runner{tasks.KindMergeWAL: slow}})
	done1 := make(chan struct{})
	go func() { s1.Run(ctx1, 50*time.Millisecond); close(done1) }()
	task, _, err := ts.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("s"))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, ts, task.ID, tasks.StateRunning)
	stop1()
	<-done1
	if got, _ := ts.Get(context.Background(), task.ID); got.State != tasks.StateQueued {
		t.Fatalf("after shutdown the task is %s, want queued", got.State)
	}
	close(block)
	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	s2 := NewScheduler(SchedulerConfig{Tasks: ts, Lease: session(t, client, 60).Lease, PollInterval: 10 * time.Millisecond,
		Runners: map[tasks.Kind]Runner{tasks.KindMergeWAL: RunnerFunc(func(context.Context, *tasks.Claim) (tasks.Report, error) { return tasks.Report{Detail: "second"}, nil })}})
	go s2.Run(ctx2, time.Second)
	if got := waitState(t, ts, task.ID, tasks.StateDone); got.Detail != "second" {
		t.Fatalf("detail %q", got.Detail)
	}
}

// A task whose run ends while etcd is away is finished once etcd answers again,
// however long that takes: the claim lives on under the master's lease (resumed
// after an outage), so a result given up on would leave the task running and its
// target locked for as long as the master lives. Found by the etcd outage chaos
// campaign, where merge fan-outs (which need no etcd) ended early in a 30 s outage
// and their one 30 s attempt to record the result ran out.
func TestSchedulerRecordsAResultOnceEtcdIsBackAfterAnOutageLongerThanAnAttempt(t *testing.T) {
	srv := etcdtest.StartServer(t)
	client := srv.Client(t)
	ts := tasks.New(client, "/sched")
	sess := session(t, client, 60) // the lease outlives the outage, as a resumed session's does
	started, release := make(chan struct{}), make(chan struct{})
	var log testwait.Log
	s := NewScheduler(SchedulerConfig{Tasks: ts, Lease: sess.Lease, PollInterval: 10 * time.Millisecond,
		FinishTimeout: 100 * time.Millisecond,
		Logger:        log.Logger(),
		Runners: map[tasks.Kind]Runner{tasks.KindMergeWAL: RunnerFunc(func(context.Context, *tasks.Claim) (tasks.Report, error) {
			close(started)
			<-release
			return tasks.Report{Detail: "merged during the outage"}, nil
		})}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx, time.Second); close(done) }()
	defer func() { cancel(); <-done }()
	task, _, err := ts.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("s"))
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the run, not for the task's running state: etcd stopped between the
	// claim's commit and its answer would leave the claim to the stray release
	// (TestSchedulerReleasesATaskWhoseClaimAnswerWasLost), and nothing would try
	// to record a result during the outage.
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the task's run did not start in 30 s")
	}

	srv.Stop()
	close(release)
	testwait.Until(t, 30*time.Second, "several attempts of 100 ms to record the result to fail", func() bool {
		return log.Count("recording the task result failed (etcd unavailable?); retrying") >= 3
	})
	srv.Restart(t)

	if got := waitState(t, ts, task.ID, tasks.StateDone); got.Detail != "merged during the outage" {
		t.Fatalf("detail %q", got.Detail)
	}
	resp, err := client.Get(context.Background(), "/sched/target-locks/s")
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("target lock after the finish: %v, %v; want none", resp.Kvs, err)
	}
}

// A run whose claim's lease is gone stops: another master may already run the task
// under a newer fencing token, and the old run's further worker calls would merge
// the target under a stale one at the same time. Found by the master failover chaos
// campaign on a loaded machine, where a master that lost its lease claimed the task
// again under its new lease while the first run was still calling workers: two runs
// merged one worker's shard at once, and another worker refused the stale token.
func TestSchedulerCancelsTheRunsOfALostLeaseAndDoesNotFinishThem(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ts := tasks.New(client, "/sched")
	sess := session(t, client, 60)
	stopped := make(chan error, 1)
	s := NewScheduler(SchedulerConfig{Tasks: ts, Lease: sess.Lease, PollInterval: 10 * time.Millisecond,
		Runners: map[tasks.Kind]Runner{tasks.KindMergeWAL: RunnerFunc(func(ctx context.Context, _ *tasks.Claim) (tasks.Report, error) {
			<-ctx.Done()
			stopped <- ctx.Err()
			return tasks.Report{}, ctx.Err()
		})}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx, time.Second); close(done) }()
	defer func() { cancel(); <-done }()
	task, _, err := ts.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("s"))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, ts, task.ID, tasks.StateRunning)

	s.AbandonLease(sess.Lease() + 1) // another lease: nothing happens
	select {
	case err := <-stopped:
		t.Fatalf("run stopped (%v) when an unrelated lease was abandoned", err)
	case <-time.After(100 * time.Millisecond):
	}
	s.AbandonLease(sess.Lease())
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("run still going 30 s after its lease was abandoned")
	}
	testwait.For(t, 30*time.Second, "no run", func() (bool, string) {
		running := s.Running()
		return len(running) == 0, fmt.Sprintf("still running %v", running)
	})
	// Not finished by the abandoned run: the task waits for orphan recovery.
	if got, _ := ts.Get(context.Background(), task.ID); got.State != tasks.StateRunning {
		t.Fatalf("task is %s after its run was abandoned, want still running (until orphan recovery)", got.State)
	}
}

// An enqueue by anyone (here another queue handle, as another replica's would be)
// wakes an idle scheduler at once: with a poll of an hour, tasks still run. The
// invariant is that a merge enqueued on demand does not wait for a poll.
func TestAnEnqueueWakesAnIdleScheduler(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ts := tasks.New(client, "/sched")
	ran := make(chan string, 8)
	s := NewScheduler(SchedulerConfig{Tasks: ts, Lease: session(t, client, 10).Lease, PollInterval: time.Hour,
		Runners: map[tasks.Kind]Runner{tasks.KindMergeWAL: RunnerFunc(func(_ context.Context, c *tasks.Claim) (tasks.Report, error) {
			ran <- c.Task.Target.String()
			return tasks.Report{}, nil
		})}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx, time.Second); close(done) }()
	defer func() { cancel(); <-done }()
	other := tasks.New(client, "/sched")
	for _, target := range []string{"a", "b", "c"} {
		time.Sleep(50 * time.Millisecond) // the scheduler idles between them
		if _, _, err := other.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget(target)); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-ran:
			if got != target {
				t.Fatalf("ran %s, want %s", got, target)
			}
		case <-time.After(30 * time.Second): // liveness bound, far below the poll
			t.Fatalf("task of %s not run: the enqueue did not wake the scheduler", target)
		}
	}
}

// TestAnEndingTaskWakesTheScheduler: a task that ends frees its slot and its
// target's lock, and the queued tasks that waited for either must be claimed
// then, not at the next poll (an hour here) or the next enqueue (none comes). A
// second merge waits for the one merge slot; a verify of the store waits for the
// lock of the compaction that runs beside the store's merge (the two lanes of a
// target, tasks.Kind.Lane).
func TestAnEndingTaskWakesTheScheduler(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ts := tasks.New(client, "/sched")
	ran := make(chan string, 8)
	release := make(chan struct{})
	runner := RunnerFunc(func(ctx context.Context, c *tasks.Claim) (tasks.Report, error) {
		ran <- string(c.Task.Kind) + " " + c.Task.Target.String()
		if c.Task.Target.String() == "a" && c.Task.Kind != tasks.KindVerify {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return tasks.Report{}, nil
	})
	s := NewScheduler(SchedulerConfig{Tasks: ts, Lease: session(t, client, 10).Lease, PollInterval: time.Hour,
		MergeConcurrency: 1, Runners: map[tasks.Kind]Runner{tasks.KindMergeWAL: runner, tasks.KindCompact: runner, tasks.KindVerify: runner}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx, time.Second); close(done) }()
	defer func() { cancel(); <-done }()
	wantRun := func(want string) {
		t.Helper()
		select {
		case got := <-ran:
			if got != want {
				t.Fatalf("ran %q, want %q", got, want)
			}
		case <-time.After(30 * time.Second): // liveness bound, far below the poll
			t.Fatalf("%s not run: nothing woke the scheduler", want)
		}
	}
	for _, kind := range []tasks.Kind{tasks.KindMergeWAL, tasks.KindCompact} {
		if _, _, err := ts.Enqueue(ctx, kind, registry.MustParseTarget("a")); err != nil {
			t.Fatal(err)
		}
		wantRun(string(kind) + " a")
	}
	// Both enqueues wake the scheduler while neither task can be claimed.
	for _, e := range []struct {
		kind   tasks.Kind
		target string
	}{{tasks.KindMergeWAL, "b"}, {tasks.KindVerify, "a"}} {
		if _, _, err := ts.Enqueue(ctx, e.kind, registry.MustParseTarget(e.target)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // let the scheduler look and go idle
	select {
	case got := <-ran:
		t.Fatalf("%s ran while its slot or its store's lock was held", got)
	default:
	}
	close(release)
	got := map[string]bool{}
	for range 2 {
		select {
		case r := <-ran:
			got[r] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("after the first merge and compaction ended, only %v ran: their end did not wake the scheduler", got)
		}
	}
	if !got["merge_wal b"] || !got["verify a"] {
		t.Fatalf("ran %v, want merge_wal b and verify a", got)
	}
}
