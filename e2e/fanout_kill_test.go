package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// TestWorkerKilledBetweenPrepareAndCommitLosesNothing is issue 16's crash test of the
// two-phase fan-out: a worker SIGKILLed after its prepare and before its commit loses
// no acknowledged row, and the next merge_wal task converges. Three workers hold
// sealed generations of one store (ids of their own and ids all three overwrite);
// w1's object store is made slow, so that its commit, the first of the task's
// (discovery's order), takes seconds, and the other two wait prepared meanwhile. As
// soon as the victim (w2 or w3, at random) logs its prepare, it is killed. Then the
// victim restarts under its INSTANCE_ID, another task runs, and the test checks
// (each assertion names the invariant it guards):
//   - the killed worker had not committed when it was killed (else the trial tests
//     nothing, and fails as such);
//   - after the next task, nothing of any shard is pending, and a list through every
//     worker returns exactly the values the workers showed before the merges: no
//     acknowledged row lost, none twice, every overwritten id at the value that won
//     before (the newest by _seq, then shard);
//   - verify finds the table whole (what the killed prepare staged is referenced by
//     no version and harms no reader).
func TestWorkerKilledBetweenPrepareAndCommitLosesNothing(t *testing.T) {
	t.Parallel()
	rng := seededRand(t, 16)
	const name = "fanout_kill"
	c, m, workerFaults, records := mergeKillCluster(t, "two-phase", name)
	faults := workerFaults["w1"]
	ids := []string{"w1", "w2", "w3"}

	value := 0
	for trial := range 2 {
		want := sealEverywhereAndAgree(c, rng, ids, records, trial, &value)

		victim := ids[1+rng.IntN(2)]
		writeFaults(t, faults, `{"latency": "300ms"}`) // w1's commit, the task's first, takes seconds
		taskID := c.requeueMerge(m, name)
		v := c.workers[victim]
		// The victim's log after this point: its prepare and (must not be) commit.
		logFrom := len(readLog(t, v.logPath))
		prepared := fmt.Sprintf("task %s: %s prepared", taskID, victim)
		testwait.ForEvery(c.t, time.Minute, poll, prepared, func() (bool, string) {
			if tk := c.taskRecord(taskID); tk.State == "done" || tk.State == "failed" {
				t.Fatalf("trial %d: task %s finished (%s %s %s) before %s prepared", trial, taskID, tk.State, tk.Detail, tk.Error, victim)
			}
			return strings.Contains(readLog(t, v.logPath)[logFrom:], `"msg":"merge prepared"`), ""
		})
		v.kill()
		// Invariant of the trial itself: the victim was killed between its prepare
		// and its commit.
		if strings.Contains(readLog(t, v.logPath)[logFrom:], `"msg":"merge done"`) {
			t.Fatalf("trial %d: %s committed before it was killed; the trial tests nothing", trial, victim)
		}
		t.Logf("trial %d: %s killed after its prepare, before its commit", trial, victim)
		t.Logf("trial %d: the task: %+v", trial, c.awaitTaskEnd(taskID, 2*time.Minute))
		writeFaults(t, faults, "")
		c.startWorker(victim)

		// The next task merges the victim's shard too. No acknowledged row lost or
		// doubled, every id at the value that won; whatever the killed prepare
		// staged harms no version.
		mergeUntilNothingPending(c, m, name)
		wantRowsEverywhere(c, m, ids, name, records, want, trial)
	}
}

// readLog is the whole log of a process so far.
func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pendingOf counts the generations of store name's shards that no merge took yet,
// as w1's stats route reports them.
func pendingOf(c *cluster, name string) (int, error) {
	code, body, err := c.get(c.workers["w1"].url() + "/api/v1/rollouts/" + name)
	if err != nil || code != http.StatusOK {
		return 0, fmt.Errorf("stats of %s: %d %s %v", name, code, body, err)
	}
	var page struct {
		Pending int `json:"pending_generations"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return 0, fmt.Errorf("stats of %s: %v: %s", name, err, body)
	}
	return page.Pending, nil
}

// sealEverywhereAndAgree seals 2 to 5 generations in the shard of every worker of
// ids (new ids of the trial, and shared ids all of them overwrite, with values
// counted up from *value) and returns the rows every worker then shows alike: the
// model a trial's merges must keep, each id at the value that won.
func sealEverywhereAndAgree(c *cluster, rng *rand.Rand, ids []string, records string, trial int, value *int) map[string]int {
	c.t.Helper()
	for _, id := range ids {
		for g := 0; g < 2+rng.IntN(4); g++ {
			var recs []string
			for i := 0; i < 2+rng.IntN(3); i++ {
				*value++
				recs = append(recs, record(fmt.Sprintf("t%d-%s-%d", trial, id, *value), *value))
			}
			*value++
			recs = append(recs, record(fmt.Sprintf("shared-%d", rng.IntN(4)), *value))
			body := `{"records":[` + strings.Join(recs, ",") + `]}`
			if code, out, err := postWith(http.DefaultClient, c.workers[id].url()+records+"?flush=true", "", body); err != nil || code/100 != 2 {
				c.t.Fatalf("add through %s: %d %s %v", id, code, out, err)
			}
		}
	}
	var want map[string]int
	testwait.ForEvery(c.t, 30*time.Second, poll, "every worker shows the same rows", func() (bool, string) {
		var lists []map[string]int
		for _, id := range ids {
			l, err := listValues(c.workers[id].url() + records)
			if err != nil {
				return false, err.Error()
			}
			lists = append(lists, l)
		}
		for _, l := range lists[1:] {
			if fmt.Sprint(l) != fmt.Sprint(lists[0]) {
				return false, "lists differ"
			}
		}
		want = lists[0]
		return true, ""
	})
	return want
}

// mergeUntilNothingPending requeues merge_wal tasks of store name until one is
// done and leaves no generation of any shard pending.
func mergeUntilNothingPending(c *cluster, m *masterProc, name string) {
	c.t.Helper()
	testwait.ForEvery(c.t, 2*time.Minute, poll, "a merge_wal task leaves nothing pending", func() (bool, string) {
		again := c.requeueMerge(m, name)
		tk := c.awaitTaskEnd(again, time.Minute)
		pending, err := pendingOf(c, name)
		if err != nil {
			return false, err.Error()
		}
		return tk.State == "done" && pending == 0, fmt.Sprintf("task %s %s %s; %d pending", tk.State, tk.Detail, tk.Error, pending)
	})
}

// wantRowsEverywhere fails unless a list through every worker of ids shows want
// (no acknowledged row lost or doubled, every id at the value that won), and then
// has verify check the table whole (the admin command fails on any problem).
func wantRowsEverywhere(c *cluster, m *masterProc, ids []string, name, records string, want map[string]int, trial int) {
	c.t.Helper()
	for _, id := range ids {
		got, err := listValues(c.workers[id].url() + records)
		if err != nil {
			c.t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			c.t.Fatalf("trial %d: list through %s after the merges:\n%v\nwant the values shown before them:\n%v", trial, id, got, want)
		}
	}
	c.admin(m, "verify", name, "--timeout", "60s")
}
