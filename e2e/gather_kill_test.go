package e2e

import (
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/internal/dev/chaos"
	"github.com/tidemark-io/tidemark/internal/testutil/testwait"
)

// TestWorkerKilledDuringAStoreMergeLosesNothing: in the gather fan-out (the
// default) one worker merges every shard of the store in one commit and the
// others then drain theirs. Each trial seals generations in every shard (new ids,
// and ids all three overwrite), slows every worker's requests, requeues the merge
// and SIGKILLs a random worker at a random moment of it: the one merging the store
// (before, during or after its commit) or one whose shard is being read, merged or
// drained. The victim comes back and merges run until nothing is pending.
// Invariants, checked through every worker:
//   - no acknowledged row lost, none twice, every overwritten id at the value that
//     won before the merge (the newest by _seq, then shard);
//   - verify finds the table whole (a killed merge's staged files harm no version).
func TestWorkerKilledDuringAStoreMergeLosesNothing(t *testing.T) {
	t.Parallel()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 32))
	c := newCluster(t, map[string]string{"FLUSH_INTERVAL": "1h", "SNAPSHOT_TTL": "1ms"},
		// Only the merges the test requeues run: no sweep, no merge on demand.
		map[string]string{"MERGE_WAL_INTERVAL": "1h", "MERGE_WAL_WORKER_TIMEOUT": "1m",
			"MERGE_WAL_MIN_GENERATIONS": "1000000", "MERGE_MAX_DELAY": "1h", "MERGE_FANOUT": "gather"})
	m := c.startMaster("m1", nil)
	ids := []string{"w1", "w2", "w3"}
	faults := map[string]string{}
	for _, id := range ids {
		faults[id] = filepath.Join(c.dir, id+"-faults.json")
		if err := os.WriteFile(faults[id], nil, 0o644); err != nil {
			t.Fatal(err)
		}
		c.startWorkerWith(id, chaosWorker(t), map[string]string{chaos.FaultsFileEnv: faults[id]})
	}
	const name = "gather_kill"
	if code, body, err := postWith(http.DefaultClient, c.workers["w1"].url()+"/api/v1/rollouts", "", `{"name":"`+name+`"}`); err != nil || code/100 != 2 {
		t.Fatalf("create store: %d %s %v", code, body, err)
	}
	records := "/api/v1/rollouts/" + name + "/records"

	value := 0
	for trial := range 3 {
		want := sealEverywhereAndAgree(c, rng, ids, records, trial, &value)

		for _, id := range ids {
			writeFaults(t, faults[id], `{"latency": "100ms"}`) // a merge of the store takes a second or more
		}
		victim := ids[rng.IntN(len(ids))]
		delay := time.Duration(rng.IntN(2500)) * time.Millisecond
		taskID := c.requeueMerge(m, name)
		time.Sleep(delay)
		c.workers[victim].kill()
		t.Logf("trial %d: %s killed %s after the merge %s was requeued", trial, victim, delay, taskID)
		testwait.ForEvery(c.t, 2*time.Minute, poll, "task "+taskID+" finishes", func() (bool, string) {
			tk := c.taskRecord(taskID)
			return tk.State == "done" || tk.State == "failed", tk.State
		})
		t.Logf("trial %d: the task: %+v", trial, c.taskRecord(taskID))
		for _, id := range ids {
			writeFaults(t, faults[id], "")
		}
		c.startWorkerWith(victim, chaosWorker(t), map[string]string{chaos.FaultsFileEnv: faults[victim]})

		mergeUntilNothingPending(c, m, name)
		wantRowsEverywhere(c, m, ids, name, records, want, trial)
	}
}
