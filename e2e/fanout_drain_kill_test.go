package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/chaos"
)

// TestWorkerKilledBetweenItsCommitAndItsDrainLosesNothing is the crash test of the
// two-phase fan-out's deferred drains (CommitMergeRequest.defer_drain): a worker's
// commit lands in the base table and answers, and the worker is SIGKILLed while
// the drain of its shard manifest, which the master asked for beside the commits
// after it, is stuck on the store (a rule hangs the victim's manifest writes). The
// base then covers generations its shard manifest still lists. The test checks
// (each assertion names the invariant it guards):
//   - the victim's commit had answered and its drain had not landed when it was
//     killed (else the trial tests nothing, and fails as such);
//   - while the victim is down, a list through the other workers returns exactly
//     the values the workers showed before the merges: the merged generations its
//     manifest still lists are skipped by the base watermark, not read twice;
//   - after it restarts and the next task, nothing is pending, its shard manifest
//     lists no generation (nothing stranded under the watermark), a list through
//     every worker returns the same values, and verify finds the table whole.
func TestWorkerKilledBetweenItsCommitAndItsDrainLosesNothing(t *testing.T) {
	t.Parallel()
	rng := seededRand(t, 32)
	const name = "drain_kill"
	c, m, faults, records := mergeKillCluster(t, "two-phase", name)
	ids := []string{"w1", "w2", "w3"}

	value := 0
	for trial := range 2 {
		want := sealEverywhereAndAgree(c, rng, ids, records, trial, &value)
		victim := ids[rng.IntN(len(ids))]
		writeFaults(t, faults[victim], fmt.Sprintf(`{"rules":[{"ops":["putIfAbsent"],"key_contains":"/_wal/%s/_manifests/","hang":true}]}`, victim))
		taskID := c.requeueMerge(m, name)
		v := c.workers[victim]
		logFrom := len(readLog(t, v.logPath))
		committed := fmt.Sprintf("task %s: %s committed, its drain left to the master", taskID, victim)
		testwait.ForEvery(c.t, time.Minute, poll, committed, func() (bool, string) {
			if tk := c.taskRecord(taskID); tk.State == "done" || tk.State == "failed" {
				t.Fatalf("trial %d: task %s finished (%s %s %s) before %s committed", trial, taskID, tk.State, tk.Detail, tk.Error, victim)
			}
			return strings.Contains(readLog(t, v.logPath)[logFrom:], `"msg":"merged WAL generations; the drain is left to the caller"`), ""
		})
		// The master asks for the drain as the commit answers; it hangs on the rule.
		time.Sleep(200 * time.Millisecond)
		v.kill()
		// Invariant of the trial itself: killed after its commit, before its drain.
		undrained := listedGenerations(t, c, name, victim)
		if undrained == 0 {
			t.Fatalf("trial %d: %s's shard manifest lists no generation: it drained before it was killed; the trial tests nothing", trial, victim)
		}
		t.Logf("trial %d: %s killed after its commit, before its drain (%d generations listed)", trial, victim, undrained)
		t.Logf("trial %d: the task: %+v", trial, c.awaitTaskEnd(taskID, 2*time.Minute))

		// The victim's manifest still lists what the base holds: the others read
		// each row once.
		for _, id := range ids {
			if id == victim {
				continue
			}
			recs, err := listRecords(&http.Client{Timeout: 10 * time.Second}, c.workers[id].url()+records, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, twice, err := recordValues(recs)
			if err != nil {
				t.Fatal(err)
			}
			if twice != "" {
				t.Fatalf("trial %d: list through %s with %s down, undrained: %s twice", trial, id, victim, twice)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("trial %d: list through %s with %s down, undrained:\n%v\nwant:\n%v", trial, id, victim, got, want)
			}
		}

		writeFaults(t, faults[victim], "")
		c.startWorkerWith(victim, chaosWorker(t), map[string]string{chaos.FaultsFileEnv: faults[victim]})
		mergeUntilNothingPending(c, m, name)
		// Nothing stranded: the generations the killed drain left listed are drained
		// by the next task, not kept for ever under the watermark.
		if n := listedGenerations(t, c, name, victim); n != 0 {
			t.Fatalf("trial %d: %s's shard manifest still lists %d generations after the next task", trial, victim, n)
		}
		wantRowsEverywhere(c, m, ids, name, records, want, trial)
	}
}

// listedGenerations reads the newest manifest of shard of rollout store name from
// the cluster's file:// bucket and counts the generations it lists.
func listedGenerations(t *testing.T, c *cluster, name, shard string) int {
	t.Helper()
	root := strings.TrimPrefix(c.dataURL, "file://")
	paths, err := filepath.Glob(filepath.Join(root, "*", name+"@*", "_wal", shard, "_manifests", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("manifests of shard %s of %s under %s: %v (%d found)", shard, name, root, err, len(paths))
	}
	newest, last := "", -1
	for _, p := range paths {
		var n int
		if _, err := fmt.Sscanf(filepath.Base(p), "%d.json", &n); err == nil && n > last {
			newest, last = p, n
		}
	}
	data, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Generations []json.RawMessage `json:"generations"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", newest, err)
	}
	return len(m.Generations)
}
