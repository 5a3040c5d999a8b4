package e2e

import (
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/tools/chaos"
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
	rng := seededRand(t, 32)
	const name = "gather_kill"
	c, m, faults, records := mergeKillCluster(t, "gather", name)
	ids := []string{"w1", "w2", "w3"}

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
		t.Logf("trial %d: the task: %+v", trial, c.awaitTaskEnd(taskID, 2*time.Minute))
		for _, id := range ids {
			writeFaults(t, faults[id], "")
		}
		c.startWorkerWith(victim, chaosWorker(t), map[string]string{chaos.FaultsFileEnv: faults[victim]})

		mergeUntilNothingPending(c, m, name)
		wantRowsEverywhere(c, m, ids, name, records, want, trial)
	}
}
