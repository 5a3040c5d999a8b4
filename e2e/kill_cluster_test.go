package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

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
		map[string]string{"MERGE_WAL_INTERVAL": "1h", "MERGE_WAL_WORKER_TIMEOUT": "1m",
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
