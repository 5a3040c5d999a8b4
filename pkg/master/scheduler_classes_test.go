package master

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

// A worker's answer now carries its class (errclass.ToGRPC) where it used to reach
// the master as Busy. An overloaded store (too many pending generations) or failing
// object storage is a failure the next sweep retries: the merge fails naming the
// worker's message, its target does not cool down (only a corrupt object's does),
// and the next merge of the target is claimed and runs as soon as it is enqueued.
func TestAnOverloadedOrUnavailableWorkerFailsTheMergeForTheNextSweep(t *testing.T) {
	client, _ := etcdtest.Start(t)
	for _, class := range []errclass.Class{errclass.Overloaded, errclass.Unavailable} {
		t.Run(class.String(), func(t *testing.T) {
			ts := tasks.New(client, "/"+class.String())
			answer := fmt.Sprintf("merge generic:s shard w0: the worker's %s sentinel", class)
			caller := &fakeCaller{known: map[string]int64{"w0": 2},
				fail: map[string]error{"w0": errclass.ToGRPC(errclass.New(class, answer))}}
			metrics := NewMetrics(nil)
			runScheduler(t, client, ts, one, caller, metrics)
			task, _, err := ts.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("generic:s"))
			if err != nil {
				t.Fatal(err)
			}
			got := waitFinished(t, ts, task.ID)
			if got.State != tasks.StateFailed || !strings.Contains(got.Error, answer) {
				t.Fatalf("task %s, error %q; want failed with the worker's answer", got.State, got.Error)
			}
			if cd, ok, err := ts.Cooldown(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("generic:s")); err != nil || ok {
				t.Fatalf("cooldown of merge_wal generic:s: %+v ok=%v err=%v; want none", cd, ok, err)
			}
			if n := testutil.ToFloat64(metrics.Tasks.WithLabelValues("merge_wal", "failed")); n != 1 {
				t.Errorf("master_tasks_total{kind=merge_wal,result=failed} = %v, want 1", n)
			}
			caller.mu.Lock()
			delete(caller.fail, "w0") // merges caught up, the store answers again
			caller.mu.Unlock()
			again, _, err := ts.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget("generic:s"))
			if err != nil {
				t.Fatal(err)
			}
			if got := waitState(t, ts, again.ID, tasks.StateDone); got.Stats.GenerationsMerged != 2 {
				t.Fatalf("the next merge recorded %+v, want 2 generations merged", got.Stats)
			}
		})
	}
}
