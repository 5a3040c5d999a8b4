package master

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

// lossyKV commits every transaction but, while armed, loses the answer of the
// first conditional one that succeeds (a claim: the snapshot reads have no
// compares), as a timeout or a cancel racing the commit does.
type lossyKV struct {
	clientv3.KV
	armed atomic.Bool
	lost  atomic.Int32
}

func (kv *lossyKV) Txn(ctx context.Context) clientv3.Txn {
	return &lossyTxn{Txn: kv.KV.Txn(ctx), kv: kv}
}

type lossyTxn struct {
	clientv3.Txn
	kv          *lossyKV
	conditional bool
}

func (t *lossyTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.Txn, t.conditional = t.Txn.If(cs...), len(cs) > 0
	return t
}

func (t *lossyTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *lossyTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *lossyTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && resp.Succeeded && t.conditional && t.kv.armed.CompareAndSwap(true, false) {
		t.kv.lost.Add(1)
		return nil, context.DeadlineExceeded
	}
	return resp, err
}

// lossyStore is a task queue whose client loses the answer of the first claim
// once kv is armed.
func lossyStore(t *testing.T) (*tasks.Queue, *lossyKV, *clientv3.Client) {
	srv := etcdtest.StartServer(t)
	client, lossy := srv.Client(t), srv.Client(t)
	kv := &lossyKV{KV: lossy.KV}
	lossy.KV = kv
	return tasks.New(lossy, "/sched"), kv, client
}

// A claim whose transaction landed but whose answer was lost leaves a task
// running under the master's own lease with nothing running it, and no orphan
// recovery frees it while the master lives. The scheduler finds it after the
// failed round, gives it back and runs it.
func TestSchedulerReleasesATaskWhoseClaimAnswerWasLost(t *testing.T) {
	ts, kv, client := lossyStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := NewScheduler(SchedulerConfig{Tasks: ts, Lease: session(t, client, 60).Lease, PollInterval: 10 * time.Millisecond,
		Runners: map[tasks.Kind]Runner{tasks.KindMergeWAL: RunnerFunc(func(context.Context, *tasks.Claim) (tasks.Report, error) {
			return tasks.Report{Detail: "ran"}, nil
		})}})
	task, _, err := ts.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("s"))
	if err != nil {
		t.Fatal(err)
	}
	kv.armed.Store(true)
	done := make(chan struct{})
	go func() { s.Run(ctx, time.Second); close(done) }()
	if got := waitState(t, ts, task.ID, tasks.StateDone); got.Detail != "ran" || got.Attempts != 2 {
		t.Fatalf("task %+v, want done by a second claim", got)
	}
	if kv.lost.Load() != 1 {
		t.Fatalf("%d claim answers lost, want 1", kv.lost.Load())
	}
	cancel()
	<-done
}

// The same at shutdown: a claim whose answer was lost in the last round (the
// round's context cancelled as the transaction committed) goes back to the queue
// when the scheduler stops, not after the lease expires.
func TestShutdownReleasesATaskWhoseClaimAnswerWasLost(t *testing.T) {
	ts, kv, client := lossyStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	blocked := make(chan struct{})
	var once atomic.Bool
	s := NewScheduler(SchedulerConfig{Tasks: ts, Lease: session(t, client, 60).Lease, PollInterval: 10 * time.Millisecond,
		Runners: map[tasks.Kind]Runner{tasks.KindMergeWAL: gateRunner{ready: func() error {
			// The round after the lost answer: stop the scheduler before it
			// claims again, as a shutdown racing the claim does.
			if kv.lost.Load() == 1 && once.CompareAndSwap(false, true) {
				cancel()
				close(blocked)
			}
			return nil
		}}}})
	task, _, err := ts.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("s"))
	if err != nil {
		t.Fatal(err)
	}
	kv.armed.Store(true)
	done := make(chan struct{})
	go func() { s.Run(ctx, time.Second); close(done) }()
	<-blocked
	<-done
	if got, _ := ts.Get(context.Background(), task.ID); got.State != tasks.StateQueued {
		t.Fatalf("after shutdown the task is %s, want queued", got.State)
	}
}

// gateRunner is a Runner and Gate whose Ready calls ready; its runs succeed.
type gateRunner struct{ ready func() error }

func (g gateRunner) Ready(context.Context) error { return g.ready() }
func (g gateRunner) Run(context.Context, *tasks.Claim) (tasks.Report, error) {
	return tasks.Report{Detail: "ran"}, nil
}
