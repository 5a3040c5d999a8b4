package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/chaos"
)

// mergeKillCluster starts a master and three workers w1, w2 and w3 built with the
// fault hook, each following a faults file of its own (empty for now), on a
// cluster where only the merges a test requeues run (no sweep, no merge on
// demand) in the MERGE_FANOUT shape fanout, and creates rollout store name. It
// returns the cluster, its master, each worker's faults file and the store's
// records path: the stage of the tests that kill a worker inside a merge.
func mergeKillCluster(t *testing.T, fanout, name string) (*cluster, *masterProc, map[string]string, string) {
	t.Helper()
	c := newCluster(t, map[string]string{"FLUSH_INTERVAL": "1h", "SNAPSHOT_TTL": "1ms"},
		map[string]string{"MERGE_WAL_INTERVAL": "1h", "TASK_TIMEOUT": "6m", // a worker's merge: 1m
			"MERGE_WAL_MIN_GENERATIONS": "1000000", "MERGE_MAX_DELAY": "1h", "MERGE_FANOUT": fanout})
	m := c.startMaster("m1", nil)
	faults := map[string]string{}
	for _, id := range []string{"w1", "w2", "w3"} {
		faults[id] = filepath.Join(c.dir, id+"-faults.json")
		if err := os.WriteFile(faults[id], nil, 0o644); err != nil {
			t.Fatal(err)
		}
		c.startWorkerWith(id, chaosWorker(t), map[string]string{chaos.FaultsFileEnv: faults[id]})
	}
	if code, body, err := postWith(http.DefaultClient, c.workers["w1"].url()+"/api/v1/rollouts", "", `{"name":"`+name+`"}`); err != nil || code/100 != 2 {
		t.Fatalf("create store: %d %s %v", code, body, err)
	}
	return c, m, faults, "/api/v1/rollouts/" + name + "/records"
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
