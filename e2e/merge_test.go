package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/loadgen"
)

// workerURLs are the base URLs of the cluster's workers, in id order.
func (c *cluster) workerURLs() []string {
	var out []string
	for _, id := range sortedIDs(c.workers) {
		out = append(out, c.workers[id].url())
	}
	return out
}

// TestMasterMergesRowsAddedThroughEveryWorker runs the whole write path as
// separate processes: rows of both kinds added through each of three workers
// are merged by the master's sweep into the base tables, are readable exactly
// once through every worker, and the records an operator reads with etcdctl
// (tasks, workers, stats) say what happened. Then a merge requeued with
// `master admin requeue-merge` runs to done and merges a generation the sweep
// would have left alone.
func TestMasterMergesRowsAddedThroughEveryWorker(t *testing.T) {
	t.Parallel()
	etcdctl := etcdctlPath(t)
	c := newCluster(t, nil, nil)
	m := c.startMaster("m1", nil)
	for _, id := range []string{"w1", "w2", "w3"} {
		c.startWorker(id)
	}

	const rollouts, events = "e2e_rollouts", "e2e_events"
	l := newLedger()
	// Every request seals a generation: 30 per store, 10 in each worker's shard.
	st, err := loadgen.Run(context.Background(), loadgen.Config{
		Workers: c.workerURLs(), MaxRows: 1200, Batch: 20, Concurrency: 3,
		RolloutStore: rollouts, GenericStore: events, RunID: "merge", Flush: true, OnBatch: l.record,
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Failed > 0 || st.Rows != 1200 || st.RolloutRows != 600 {
		t.Fatalf("load: %+v, want 1200 rows (600 of each kind) acknowledged and no failure", st)
	}
	c.awaitMergedExactlyOnce(m, l, loadgen.KindRollout, rollouts, time.Minute)
	c.awaitMergedExactlyOnce(m, l, loadgen.KindGeneric, events, time.Minute)

	c.awaitNoLiveTask()

	// What an operator sees in etcd, with the real etcdctl.
	tasks := c.tasksInEtcd(etcdctl)
	done := map[string]int{}
	for _, tk := range tasks {
		if tk.Kind != "merge_wal" || tk.State != "done" {
			t.Errorf("task %s: %s %s is %s (%s), want every merge done", tk.ID, tk.Kind, tk.Target, tk.State, tk.Error)
			continue
		}
		if !strings.Contains(tk.Detail, "across 3/3 workers") {
			t.Errorf("task %s detail %q: want a merge across 3/3 workers", tk.ID, tk.Detail)
		}
		if tk.Stats.Workers != 3 || tk.Stats.WorkersMerged != 3 {
			t.Errorf("task %s stats %+v: want 3 of 3 workers merged, as its detail %q says", tk.ID, tk.Stats, tk.Detail)
		}
		if tk.StartedAt.IsZero() || tk.FinishedAt.Before(tk.StartedAt) {
			t.Errorf("task %s: started %s, finished %s", tk.ID, tk.StartedAt, tk.FinishedAt)
		}
		done[tk.Target]++
	}
	if done[rollouts] == 0 || done["generic:"+events] == 0 {
		t.Errorf("done merge tasks per target: %v, want some for %s and generic:%s", done, rollouts, events)
	}
	for _, idx := range []string{"/queue/", "/running/", "/claims/", "/target-locks/"} {
		if out := c.etcdctl(etcdctl, "get", "--prefix", c.prefix+idx, "--keys-only"); strings.TrimSpace(out) != "" {
			t.Errorf("etcdctl get --prefix %s%s: %q, want nothing left once every task is done", c.prefix, idx, out)
		}
	}
	keys := strings.Fields(c.etcdctl(etcdctl, "get", "--prefix", c.prefix+"/workers/", "--keys-only"))
	if want := []string{c.prefix + "/workers/w1", c.prefix + "/workers/w2", c.prefix + "/workers/w3"}; !slices.Equal(keys, want) {
		t.Errorf("worker keys in etcd: %v, want %v", keys, want)
	}
	var stats statsRow
	if err := json.Unmarshal([]byte(c.etcdctl(etcdctl, "get", c.prefix+"/stats/"+rollouts, "--print-value-only")), &stats); err != nil {
		t.Fatalf("stats row of %s: %v", rollouts, err)
	}
	if stats.RowCount != 600 || stats.PendingWALGenerations != 0 {
		t.Errorf("stats row of %s in etcd: %+v, want 600 rows and nothing pending", rollouts, stats)
	}

	// One more generation, in w2's shard only: below the sweep's threshold of 2,
	// so only the requeued merge moves it into the base table.
	extra, err := loadgen.Run(context.Background(), loadgen.Config{
		Workers: []string{c.workers["w2"].url()}, MaxRows: 5, Batch: 5,
		RolloutStore: rollouts, RunID: "requeue", Flush: true, OnBatch: l.record,
	})
	if err != nil || extra.Rows != 5 {
		t.Fatalf("add 5 rows through w2: %+v, %v", extra, err)
	}
	id := c.requeueMerge(m, rollouts)
	var got struct {
		Task struct {
			State, Detail, Error string
		} `json:"task"`
	}
	testwait.ForEvery(c.t, 30*time.Second, poll, "requeued task "+id+" is done", func() (bool, string) {
		if err := json.Unmarshal(c.admin(m, "get", id), &got); err != nil {
			return false, err.Error()
		}
		if got.Task.State == "failed" {
			t.Fatalf("requeued merge %s failed: %s", id, got.Task.Error)
		}
		return got.Task.State == "done", got.Task.State
	})
	if !strings.Contains(got.Task.Detail, "across 3/3 workers") || strings.HasPrefix(got.Task.Detail, "merged 0 ") {
		t.Errorf("requeued merge detail %q: want the new generation merged across 3/3 workers", got.Task.Detail)
	}
	var record task
	if err := json.Unmarshal([]byte(c.etcdctl(etcdctl, "get", c.prefix+"/tasks/"+id, "--print-value-only")), &record); err != nil ||
		record.State != "done" || record.Stats.GenerationsMerged == 0 || record.Stats.WorkersMerged != 3 {
		t.Errorf("etcdctl get %s/tasks/%s: %+v (%v), want state done and stats of the new generation merged by 3 workers", c.prefix, id, record, err)
	}
	c.awaitMergedExactlyOnce(m, l, loadgen.KindRollout, rollouts, 30*time.Second)
}
