package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/loadgen"
)

// runningTasks counts the keys under P/running/.
func (c *cluster) runningTasks() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := c.client.Get(ctx, c.prefix+"/running/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0
	}
	return resp.Count
}

// tasksIn counts the task records in state.
func (c *cluster) tasksIn(state string) int {
	n := 0
	for _, tk := range c.tasksNow() {
		if tk.State == state {
			n++
		}
	}
	return n
}

// taskRecord reads P/tasks/<id> with the client (zero when absent).
func (c *cluster) taskRecord(id string) claimedTask {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var tk claimedTask
	resp, err := c.client.Get(ctx, c.prefix+"/tasks/"+id)
	if err == nil && len(resp.Kvs) > 0 {
		_ = json.Unmarshal(resp.Kvs[0].Value, &tk)
	}
	return tk
}

// awaitTaskEnd waits up to timeout for task id to be done or failed and returns
// its record.
func (c *cluster) awaitTaskEnd(id string, timeout time.Duration) claimedTask {
	c.t.Helper()
	var tk claimedTask
	testwait.ForEvery(c.t, timeout, poll, "task "+id+" finishes", func() (bool, string) {
		tk = c.taskRecord(id)
		return tk.State == "done" || tk.State == "failed", tk.State
	})
	return tk
}

// claimedTask is a task record with the claim fields that task leaves out.
type claimedTask struct {
	task
	ClaimToken   string `json:"claim_token"`
	FencingToken int64  `json:"fencing_token"`
}

// TestWorkerKilledDuringMergesLosesNoAcknowledgedRow kills a worker with
// SIGKILL while the master merges under steady load of both kinds, restarts it
// with the same instance id, and checks every row: each acknowledged one is
// readable exactly once through every worker, nothing is duplicated, and
// nothing appears that was never sent. The guarded failure: an acknowledged add
// lost because it was only in memory, or a WAL replay after the crash that
// re-adds rows a merge had already committed.
func TestWorkerKilledDuringMergesLosesNoAcknowledgedRow(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]string{"FLUSH_INTERVAL": "500ms"}, map[string]string{"MERGE_WAL_MIN_GENERATIONS": "1"})
	m := c.startMaster("m1", nil)
	for _, id := range []string{"w1", "w2", "w3"} {
		c.startWorker(id)
	}
	const rollouts, events = "crash_rollouts", "crash_events"
	l := newLedger()
	stopLoad := backgroundLoad(t, loadgen.Config{
		Workers: c.workerURLs(), Rate: 300, Batch: 10, Concurrency: 3,
		RolloutStore: rollouts, GenericStore: events, RunID: "crash", OnBatch: l.record,
	})

	testwait.ForEvery(c.t, 30*time.Second, poll, "the master has finished merges under load", func() (bool, string) {
		return c.tasksIn("done") >= 2, ""
	})
	// Kill w2 while a merge task runs (the master calls w1, w2, w3 in turn).
	caught := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if c.runningTasks() > 0 {
			caught = true
			break
		}
	}
	c.workers["w2"].kill()
	t.Logf("w2 killed with SIGKILL (a merge task was running: %v)", caught)
	time.Sleep(time.Second) // writes to w2 fail meanwhile: outcome unknown
	c.startWorker("w2")
	time.Sleep(2 * time.Second) // w2 takes writes again
	st := stopLoad()
	acked, maybe := l.counts()
	t.Logf("load: %d rows acknowledged, %d in failed requests, %d requests", acked, maybe, st.Requests)
	if acked == 0 {
		t.Fatal("no row was acknowledged")
	}

	c.awaitMergedExactlyOnce(m, l, loadgen.KindRollout, rollouts, time.Minute)
	c.awaitMergedExactlyOnce(m, l, loadgen.KindGeneric, events, time.Minute)
}

// TestSecondMasterFinishesTheTaskOfAKilledMaster kills the master (SIGKILL)
// while its merge task is running (held up by a worker frozen with SIGSTOP), then
// starts a second master: once the first one's lease expires (LEASE_TTL
// 3s), the second recovers the orphaned task, runs it again and finishes it; the
// rows end up merged exactly once.
func TestSecondMasterFinishesTheTaskOfAKilledMaster(t *testing.T) {
	t.Parallel()
	etcdctl := etcdctlPath(t)
	// Only the requeued task runs: neither the sweep nor merges on demand find a store due.
	c := newCluster(t, nil, map[string]string{"MERGE_WAL_MIN_GENERATIONS": "1000000", "MERGE_MAX_DELAY": "1h"})
	m1 := c.startMaster("m1", map[string]string{
		// A frozen worker must hold the task up, not be skipped as unreachable.
		"ETCD_DIAL_TIMEOUT": "2m",  // connecting to a worker too
		"TASK_TIMEOUT":      "12m", // a worker's merge: 2m
	})
	for _, id := range []string{"w1", "w2", "w3"} {
		c.startWorker(id)
	}
	const store = "handover"
	l := newLedger()
	st, err := loadgen.Run(context.Background(), loadgen.Config{
		Workers: c.workerURLs(), MaxRows: 300, Batch: 20, RolloutStore: store, RunID: "handover", Flush: true, OnBatch: l.record,
	})
	if err != nil || st.Failed > 0 {
		t.Fatalf("load: %+v, %v", st, err)
	}

	w3 := c.workers["w3"]
	w3.signal(syscall.SIGSTOP)
	id := c.requeueMerge(m1, store)
	testwait.ForEvery(c.t, 10*time.Second, poll, "task "+id+" runs on m1", func() (bool, string) {
		tk := c.taskRecord(id)
		return tk.State == "running", tk.State
	})
	time.Sleep(500 * time.Millisecond) // m1 merged w1 and w2, and waits for w3
	m1.kill()
	w3.signal(syscall.SIGCONT)
	if tk := c.taskRecord(id); tk.State != "running" {
		t.Fatalf("task %s is %s when m1 is killed, want running", id, tk.State)
	}

	m2 := c.startMaster("m2", nil)
	testwait.ForEvery(c.t, 45*time.Second, poll, "m2 finishes task "+id, func() (bool, string) {
		tk := c.taskRecord(id)
		if tk.State == "failed" {
			t.Fatalf("task %s failed: %s", id, tk.Error)
		}
		return tk.State == "done", tk.State
	})
	var record task
	if err := json.Unmarshal([]byte(c.etcdctl(etcdctl, "get", c.prefix+"/tasks/"+id, "--print-value-only")), &record); err != nil {
		t.Fatal(err)
	}
	if record.State != "done" || record.Attempts < 2 || !strings.Contains(record.Detail, "across 3/3 workers") {
		t.Errorf("task record in etcd: %+v, want done across 3/3 workers on a second attempt", record)
	}
	if out := c.etcdctl(etcdctl, "get", "--prefix", c.prefix+"/target-locks/", "--keys-only"); strings.TrimSpace(out) != "" {
		t.Errorf("target locks left in etcd: %q", out)
	}
	c.awaitMergedExactlyOnce(m2, l, loadgen.KindRollout, store, 30*time.Second)
}
