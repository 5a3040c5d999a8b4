package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// TestMaintenanceBoundsATableAndKeepsEveryRow: two workers take sealed writes (new
// ids and overwrites of a few hot ids, so deletion vectors pile up) while the
// master's sweeps merge them and its compaction sweep (MIN_FRAGMENTS 6, every
// second) has workers compact and clean up. Production failure (issue 15): nothing
// ever rewrote fragments or deleted a manifest, so a store merged every minute
// degraded without bound. Invariants:
//   - while compactions and cleanups run, reads of a hot id through a worker never
//     go back (a compaction commit must not hide a newer row or show an older one);
//   - at the end every acknowledged id reads its last value through both workers;
//   - the table is bounded: fewer than 2x MIN_FRAGMENTS fragments, and the version
//     log keeps only what retention says (3 newest + younger than 1 s, within the
//     2 s safety window), not one manifest per commit;
//   - verify finds a deleted fragment and fails, naming it; verify --drop-missing
//     commits without it, and every other row still reads.
func TestMaintenanceBoundsATableAndKeepsEveryRow(t *testing.T) {
	t.Parallel()
	c := newCluster(t, map[string]string{
		"TARGET_ROWS_PER_FRAGMENT": "1000",
		"VERSION_RETENTION_COUNT":  "3",
		"VERSION_RETENTION_AGE":    "1s",
		"GC_SAFETY_WINDOW":         "2s",
	}, map[string]string{
		"COMPACTION_INTERVAL": "1s",
		"MIN_FRAGMENTS":       "6",
		// A merge about every ten rounds of writes, as the bounds below assume:
		// merges on demand would otherwise merge every second generation (the
		// harness's threshold), and the last ten versions' files, which no
		// cleanup follows once writes stop, would exceed them.
		"MERGE_WAL_MIN_GENERATIONS": "10",
	})
	m := c.startMaster("m1", nil)
	w1, w2 := c.startWorker("w1"), c.startWorker("w2")
	const name = "maintained"
	if code, body, err := postWith(http.DefaultClient, w1.url()+"/api/v1/rollouts", "", `{"name":"`+name+`"}`); err != nil || code/100 != 2 {
		t.Fatalf("create store: %d %s %v", code, body, err)
	}
	records := "/api/v1/rollouts/" + name + "/records"
	const hot = 4

	// A reader of the hot ids through w2: a value once shown is never undercut.
	var (
		mu         sync.Mutex
		violations []string
		reads      int
	)
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		seen := map[string]int{}
		for {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("hot-%d", reads%hot)
			v, ok, err := getValue(w2.url()+records, id, "")
			mu.Lock()
			reads++
			if err == nil && ok && v < seen[id] {
				violations = append(violations, fmt.Sprintf("%s: read %d after %d", id, v, seen[id]))
			}
			if err == nil && ok && v > seen[id] {
				seen[id] = v
			}
			mu.Unlock()
		}
	}()

	// Writes go on until the table has committed minVersions versions: the bounds
	// checked below (12 fragments, 12 manifests) only show that retention and
	// compaction work when several times as many versions were committed. How many
	// merges a round of writes makes depends on the machine, so the loop counts
	// versions rather than rounds (the cap only stops a cluster that never merges).
	const minVersions, maxRounds = 40, 1500
	dir := tableDir(t, c, name)
	want := map[string]int{}
	value := 0
	for round := 0; round < 300 || newestVersion(t, dir) < minVersions; round++ {
		if round == maxRounds {
			t.Fatalf("%d rounds of writes committed only %d versions", round, newestVersion(t, dir))
		}
		value++
		w := w1
		if round%2 == 1 {
			w = w2
		}
		var recs []string
		for i := 0; i < 5; i++ {
			id := fmt.Sprintf("r%d-%d", round, i)
			recs = append(recs, record(id, value))
			want[id] = value
		}
		id := fmt.Sprintf("hot-%d", round%hot)
		recs = append(recs, record(id, value))
		want[id] = value
		code, out, err := postWith(http.DefaultClient, w.url()+records+"?flush=true", "", `{"records":[`+strings.Join(recs, ",")+`]}`)
		if err != nil || code/100 != 2 {
			t.Fatalf("add through %s: %d %s %v", w.id, code, out, err)
		}
		time.Sleep(100 * time.Millisecond) // a merge (MERGE_WAL_INTERVAL 1s) every ten rounds or so
	}

	testwait.ForEvery(c.t, 90*time.Second, poll, "merged, compacted and cleaned up: every row at its last value, few fragments, few manifests", func() (bool, string) {
		for _, w := range []*workerProc{w1, w2} {
			listed, err := listValues(w.url() + records)
			if err != nil {
				return false, err.Error()
			}
			for id, v := range want {
				if listed[id] != v {
					return false, fmt.Sprintf("%s: %s reads %d, want %d", w.id, id, listed[id], v)
				}
			}
		}
		newest := newestManifest(t, dir)
		files, manifests := countFiles(t, dir, "data", ".parquet"), countFiles(t, dir, "_versions", ".json")
		compacted := false
		for _, tk := range c.tasksNow() {
			compacted = compacted || (tk.Kind == "compact" && tk.Target == name && tk.State == "done" && strings.Contains(tk.Detail, "compacted"))
		}
		switch {
		case !compacted:
			return false, "no compact task of the store compacted anything yet"
		case len(newest.Fragments) >= 12 || manifests > 12 || files > 3*12:
			return false, fmt.Sprintf("version %d: %d fragments; %d manifests and %d fragment files stored", newest.Version, len(newest.Fragments), manifests, files)
		}
		t.Logf("version %d: %d fragments; %d manifests and %d fragment files stored", newest.Version, len(newest.Fragments), manifests, files)
		return true, ""
	})
	close(stop)
	readers.Wait()
	mu.Lock()
	if len(violations) > 0 {
		t.Fatalf("reads of hot ids went back during maintenance (%d reads):\n%s", reads, strings.Join(violations, "\n"))
	}
	t.Logf("%d reads of hot ids, none went back", reads)
	mu.Unlock()
	// Verify: clean, then a deleted fragment fails it by name, then a repair drops it.
	c.admin(m, "verify", name, "--timeout", "60s")
	victim := filepath.Join(dir, filepath.FromSlash(newestManifest(t, dir).Fragments[0].Path))
	if err := os.Remove(victim); err != nil {
		t.Fatal(err)
	}
	out, err := c.adminCmd(m, "verify", name, "--timeout", "60s").CombinedOutput()
	if err == nil || !strings.Contains(string(out), filepath.Base(victim)) {
		t.Fatalf("verify after deleting %s: %v\n%s; want a failure naming it", filepath.Base(victim), err, out)
	}
	c.admin(m, "verify", name, "--drop-missing", "--timeout", "60s")
	c.admin(m, "verify", name, "--timeout", "60s")
	listed, err := listValues(w1.url() + records)
	if err != nil || len(listed) == 0 {
		t.Fatalf("after the repair: %d records, %v", len(listed), err)
	}
}

// tableDir is the directory of rollout store name under the cluster's file://
// data URL, read from its registry object.
func tableDir(t *testing.T, c *cluster, name string) string {
	t.Helper()
	root := strings.TrimPrefix(c.dataURL, "file://")
	data, err := os.ReadFile(filepath.Join(root, "_registry", "rollout", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var entry struct {
		URI string `json:"uri"`
	}
	if err := json.Unmarshal(data, &entry); err != nil || entry.URI == "" {
		t.Fatalf("registry object of %s: %s %v", name, data, err)
	}
	return filepath.Join(root, filepath.FromSlash(entry.URI))
}

// countFiles counts the files with suffix directly under dir/sub.
func countFiles(t *testing.T, dir, sub, suffix string) int {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, sub))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), suffix) {
			n++
		}
	}
	return n
}

// manifest is the part of a base table manifest these tests read.
type manifest struct {
	Version   uint64 `json:"version"`
	Fragments []struct {
		Path string `json:"path"`
	} `json:"fragments"`
}

// newestVersion is the newest version under dir/_versions, named by its manifest's
// file name (0 before the first commit). It reads no manifest, so a cleanup that
// prunes one meanwhile cannot fail it.
func newestVersion(t *testing.T, dir string) uint64 {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "_versions"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var newest uint64
	for _, e := range entries {
		if v, err := strconv.ParseUint(strings.TrimSuffix(e.Name(), ".json"), 10, 64); err == nil && strings.HasSuffix(e.Name(), ".json") && v > newest {
			newest = v
		}
	}
	return newest
}

// newestManifest reads the newest manifest under dir/_versions.
func newestManifest(t *testing.T, dir string) manifest {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "_versions"))
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") && e.Name() > last {
			last = e.Name()
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "_versions", last))
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("manifest %s: %v", last, err)
	}
	return m
}
