package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/loadgen"
)

// orphanGrace is the masters' ORPHAN_GRACE in these tests: a little less than a
// worker lease TTL (4 s), so adoption follows a kill within seconds.
const orphanGrace = "3s"

// TestAShardWhoseWorkerNeverReturnsIsAdoptedAndItsRowsAppearOnce: w3 acknowledges
// rows with ?flush=true and without, is SIGKILLed and never restarted. Production
// failure (DESIGN.md problem 5, issue 14): its unflushed rows were readable through
// no worker and its sealed generations were never merged, for as long as no
// process with its INSTANCE_ID came back. Invariants: within ORPHAN_GRACE and a few
// sweeps every acknowledged row of w3 is listed exactly once through each
// survivor, nothing is pending, and w3's shard is retired (not active); when w3
// does come back later, it writes on under a new epoch and every row is still
// listed exactly once.
func TestAShardWhoseWorkerNeverReturnsIsAdoptedAndItsRowsAppearOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil, map[string]string{"ORPHAN_GRACE": orphanGrace})
	m := c.startMaster("m1", nil)
	w1, w2, w3 := c.startWorker("w1"), c.startWorker("w2"), c.startWorker("w3")
	const store = "orphans"
	client := &http.Client{Timeout: 30 * time.Second}
	mustSend(t, client, http.MethodPost, w1.url()+"/api/v1/generic", fmt.Sprintf(`{"name":%q,"schema":%s}`, store, churnSpec), http.StatusCreated)
	acked := map[string]bool{}
	add := func(w *workerProc, id string, flush bool) {
		t.Helper()
		path := w.url() + "/api/v1/generic/" + store + "/rows"
		if flush {
			path += "?flush=true"
		}
		mustSend(t, client, http.MethodPost, path, fmt.Sprintf(`{"rows":[{"id":%q,"n":1}]}`, id), http.StatusCreated)
		acked[id] = true
	}
	for i := range 20 {
		add(w3, fmt.Sprintf("sealed-%02d", i), true)
		add(w1, fmt.Sprintf("w1-%02d", i), true)
	}
	// FLUSH_INTERVAL is 1 s: these stay unsealed only if w3 dies at once.
	for i := range 20 {
		add(w3, fmt.Sprintf("unsealed-%02d", i), false)
	}
	w3.kill()
	killed := time.Now()

	tgt := target(loadgen.KindGeneric, store)
	testwait.ForEvery(c.t, 90*time.Second, poll, "w3's shard is adopted: every row once through w1 and w2, nothing pending, w3 retired", func() (bool, string) {
		for _, w := range []*workerProc{w1, w2} {
			ids, err := listIDs(w.url(), loadgen.KindGeneric, store)
			if err != nil {
				return false, err.Error()
			}
			if p := exactlyOnce(ids, acked, nil); p != "" {
				return false, w.id + ": " + p
			}
		}
		row, ok := shardStats(c, m, tgt)
		if !ok {
			return false, "no stats row"
		}
		if row.PendingWALGenerations != 0 || slices.Contains(row.ActiveShards, "w3") {
			return false, fmt.Sprintf("stats: %+v", row)
		}
		return true, ""
	})
	t.Logf("w3's acknowledged rows were all visible through the survivors and merged %s after the kill", time.Since(killed).Round(100*time.Millisecond))
	if !strings.Contains(c.adminTaskDetails(tgt), "adopted 1 orphaned shard") {
		t.Errorf("no merge_wal task of %s says it adopted a shard", tgt)
	}

	// w3 comes back: it writes on (a new epoch of its retired shard) and nothing of
	// before is lost or repeated.
	w3 = c.startWorker("w3")
	for i := range 5 {
		add(w3, fmt.Sprintf("back-%02d", i), true)
	}
	testwait.ForEvery(c.t, 60*time.Second, poll, "every row once after w3 returned", func() (bool, string) {
		for _, w := range []*workerProc{w1, w2, w3} {
			ids, err := listIDs(w.url(), loadgen.KindGeneric, store)
			if err != nil {
				return false, err.Error()
			}
			if p := exactlyOnce(ids, acked, nil); p != "" {
				return false, w.id + ": " + p
			}
		}
		return true, ""
	})
}

// shardRow is the part of a stats row the orphan tests read.
type shardRow struct {
	PendingWALGenerations int            `json:"pending_wal_generations"`
	PendingByShard        map[string]int `json:"pending_by_shard"`
	ActiveShards          []string       `json:"active_shards"`
}

func shardStats(c *cluster, m *masterProc, tgt string) (shardRow, bool) {
	code, body, err := c.get(c.base(m.httpAddr) + "/api/v1/stats?limit=1000")
	if err != nil || code != http.StatusOK {
		return shardRow{}, false
	}
	var page struct {
		Stats []struct {
			Target string `json:"target"`
			shardRow
		} `json:"stats"`
	}
	if json.Unmarshal(body, &page) != nil {
		return shardRow{}, false
	}
	for _, r := range page.Stats {
		if r.Target == tgt {
			return r.shardRow, true
		}
	}
	return shardRow{}, false
}

// adminTaskDetails joins the details of the merge_wal tasks of tgt.
func (c *cluster) adminTaskDetails(tgt string) string {
	var details []string
	for _, tk := range c.tasksNow() {
		if tk.Kind == "merge_wal" && tk.Target == tgt {
			details = append(details, tk.Detail)
		}
	}
	return strings.Join(details, "\n")
}

// mustSend sends a request and fails the test unless it is answered with want.
func mustSend(t *testing.T, client *http.Client, method, u, body string, want int) {
	t.Helper()
	a, err := send(client, method, u, body)
	if err != nil || a.status != want {
		t.Fatalf("%s %s: %d %s %v; want %d", method, u, a.status, a.body, err, want)
	}
}
