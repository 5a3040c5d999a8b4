package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/chaos"
)

// TestCompactionKilledMidwayConverges is issue 15's crash test of compaction: a
// worker SIGKILLed in the middle of a compact task leaves the store readable, and the
// next compaction of the store converges. Two chaos-built workers take sealed writes
// (new ids and overwrites of old ones, so fragments carry deletion vectors) and merge
// them one generation per fragment; then, three times, a compaction is started and
// the worker running it is killed at a point chosen at random:
//
//   - "staging": while it writes its output fragments, at the first output whose
//     uuid ends in one of 4 random hex digits (so after 0, 1, 2, ... outputs were
//     staged), or at its commit if none does;
//   - "commit": every output staged, the manifest put-if-absent not yet done;
//   - "cleanup": the new version committed, its cleanup about to delete the first
//     manifest or file.
//
// Midway is made certain with the chaos build's object-store hook (tools/chaos,
// the mechanism of the other chaos tests): a rule makes the chosen request of the
// compaction hang until the process dies, the hook's counters say when it hangs,
// and only then is the worker killed. Nothing but the compaction makes those
// requests while the rules are in force (no merge is pending, and the master
// merges nothing on its own in this test; a merge would run beside the compaction,
// which holds the store's maintenance lock, not its merge lock). While it hangs
// both workers take more sealed writes, overwrites of its source rows included.
//
// After each kill the worker restarts under the same INSTANCE_ID and the test checks
// (each assertion names the invariant it guards):
//   - every read, one list and a get of every id through every worker, returns
//     exactly the model (the last acknowledged value of every id): nothing
//     acknowledged lost, nothing listed twice, no overwritten value back;
//   - the killed task is failed, never done; verify passes with the killed
//     compaction's leftovers in the table;
//   - once the writes are merged, a new compaction is done and compacted, leaving at
//     most one fragment under half TARGET_ROWS_PER_FRAGMENT live rows and as many live
//     rows as the model has ids; the one after it finds nothing to compact;
//   - the files the killed compaction staged and never committed are deleted by the
//     cleanup once GC_SAFETY_WINDOW has passed.
func TestCompactionKilledMidwayConverges(t *testing.T) {
	t.Parallel()
	start := time.Now()
	rng := seededRand(t, 15)
	c := newCluster(t, map[string]string{
		"TARGET_ROWS_PER_FRAGMENT": fmt.Sprint(killRowsPerFragment),
		"MERGE_MAX_GENERATIONS":    "1", // one fragment per sealed batch: many small fragments
		"VERSION_RETENTION_COUNT":  "3",
		"VERSION_RETENTION_AGE":    "1s",
		"GC_SAFETY_WINDOW":         killGCWindow.String(),
		"SNAPSHOT_TTL":             killSnapshotTTL.String(),
	}, map[string]string{
		// Only the test compacts (the sweep at start finds no store, and no merge
		// leaves MIN_FRAGMENTS for a compaction on demand) and merges (through the
		// workers' internal route): merges run beside a compaction of their store,
		// and one of the master's would hang on the rules meant for the compaction.
		"COMPACTION_INTERVAL":       "1h",
		"MIN_FRAGMENTS":             "100000",
		"MERGE_WAL_MIN_GENERATIONS": "100000",
		"MERGE_MAX_DELAY":           "1h",
	})
	k := &killTest{t: t, c: c, rng: rng, name: "compaction_kill", faults: map[string]string{}, model: map[string]int{}}
	k.m = c.startMaster("m1", nil)
	bin := chaosWorker(t)
	for _, id := range []string{"w1", "w2"} {
		k.faults[id] = filepath.Join(c.dir, id+"-faults.json")
		k.setFaults(id, chaos.Spec{})
		c.startWorkerWith(id, bin, map[string]string{chaos.FaultsFileEnv: k.faults[id]})
	}
	if code, body, err := postWith(http.DefaultClient, c.workers["w1"].url()+"/api/v1/rollouts", "", `{"name":"`+k.name+`"}`); err != nil || code/100 != 2 {
		t.Fatalf("create store: %d %s %v", code, body, err)
	}
	k.records = "/api/v1/rollouts/" + k.name + "/records"
	k.dir = tableDir(t, c, k.name)
	rel, err := filepath.Rel(strings.TrimPrefix(c.dataURL, "file://"), k.dir)
	if err != nil {
		t.Fatal(err)
	}
	k.key = filepath.ToSlash(rel)
	t.Logf("cluster up and store created in %v", time.Since(start).Round(time.Millisecond))

	points := []string{"staging", "commit", "cleanup"}
	rng.Shuffle(len(points), func(i, j int) { points[i], points[j] = points[j], points[i] })
	for i, point := range points {
		k.round(i, point)
	}
	k.c.admin(k.m, "verify", k.name, "--timeout", "60s")
	t.Logf("%d kills, %d ids, %d acknowledged batches, in %v", len(points), len(k.model), k.value, time.Since(start).Round(time.Millisecond))
}

const (
	killRowsPerFragment = 24
	killGCWindow        = 2 * time.Second
	// killSnapshotTTL is the workers' SNAPSHOT_TTL: a read through one worker may
	// not see another's seal or commit for that long (shorter than the default 1 s,
	// so that the checks wait less).
	killSnapshotTTL = 200 * time.Millisecond
)

type killTest struct {
	t       *testing.T
	c       *cluster
	m       *masterProc
	rng     *rand.Rand
	name    string
	records string            // the store's records route
	dir     string            // the table directory on disk
	key     string            // the table directory as a bucket key (its registry URI)
	faults  map[string]string // worker id -> its faults file

	model map[string]int // id -> last acknowledged value
	ids   []string       // the model's ids, in the order first written
	value int            // the last value written (one per batch, increasing)
	// lastChange is when the last write, merge or compaction through the test was
	// acknowledged: a worker's reads may lag it by SNAPSHOT_TTL.
	lastChange time.Time
}

// round is one kill: writes, merges, a compaction killed at point, the restart
// and the checks after it.
func (k *killTest) round(i int, point string) {
	t, c := k.t, k.c
	started := time.Now()
	// Many small fragments, some with deletion vectors: 16 sealed batches of 6 new
	// ids and 3 overwrites, alternately through each worker, one fragment each.
	for b := 0; b < 16; b++ {
		k.add(c.workers[[]string{"w1", "w2"}[b%2]], fmt.Sprintf("k%d-%d", i, b), 6, 3)
	}
	k.mergeAll()
	k.checkReads("before compaction "+fmt.Sprint(i), false)
	before := k.compactStats()

	rules := k.rules(point)
	if point == "cleanup" {
		// The cleanup must have something to delete: versions older than the window.
		time.Sleep(killGCWindow + 500*time.Millisecond)
	}
	baseline := map[string]int64{}
	for id := range k.faults {
		baseline[id] = k.setFaultsAndWait(id, chaos.Spec{Rules: rules}).Injected
	}
	filesBefore := k.tableFiles()
	var enq struct{ Task task }
	if err := json.Unmarshal(c.admin(k.m, "compact", k.name, "--no-wait"), &enq); err != nil || enq.Task.ID == "" {
		t.Fatalf("compact --no-wait: %+v %v", enq, err)
	}
	// Midway: the compaction's chosen request hangs on one worker (the one the
	// master called); its hook counts it.
	var victim *workerProc
	testwait.ForEvery(c.t, 30*time.Second, poll, "the compaction hangs at its "+point+" point", func() (bool, string) {
		for id := range k.faults {
			if k.stats(id).Injected > baseline[id] {
				victim = c.workers[id]
				return true, ""
			}
		}
		tk := k.task(enq.Task.ID)
		if tk.State == "done" || tk.State == "failed" {
			t.Fatalf("compaction %d (%s) finished before reaching its kill point: %s %s %s", i, point, tk.State, tk.Detail, tk.Error)
		}
		return false, "task " + tk.State
	})
	survivor := c.workers["w1"]
	if victim.id == "w1" {
		survivor = c.workers["w2"]
	}
	// Writes while the compaction hangs, overwrites of its source rows among them;
	// merges of the store wait for its target lock.
	for b := 0; b < 6; b++ {
		k.add([]*workerProc{victim, survivor}[b%2], fmt.Sprintf("h%d-%d", i, b), 4, 3)
	}
	k.setFaultsAndWait(survivor.id, chaos.Spec{}) // the merges after the kill must not hang
	// What the compaction staged, and the version it left, read while it hangs
	// (merges after the kill commit and stage files of their own).
	staged := k.unreferenced(filesBefore)
	version := newestManifest(t, k.dir).Version
	victim.kill()
	killedAt := time.Now()
	k.setFaults(victim.id, chaos.Spec{}) // the restarted worker reads it at start
	t.Logf("round %d: killed %s hanging at %s after %v; %d files staged and never committed: %v",
		i, victim.id, point, time.Since(started).Round(time.Millisecond), len(staged), staged)
	// The kill landed where it was meant to: before the first commit (the outputs
	// staged so far on disk, no new version) or after the task's compactions (new
	// versions: a task compacts until the levels are in shape).
	missed := version != before.Version
	if point == "cleanup" {
		missed = version <= before.Version
	}
	if missed || (point == "commit" && len(staged) == 0) {
		t.Fatalf("round %d: killed at %s with version %d (%d before) and %d staged files: the kill point missed", i, point, version, before.Version, len(staged))
	}

	// A killed compaction is never reported done.
	testwait.ForEvery(c.t, 30*time.Second, poll, "the killed compact task fails", func() (bool, string) {
		tk := k.task(enq.Task.ID)
		if tk.State == "done" {
			t.Fatalf("round %d: the compact task whose worker was killed is done: %s", i, tk.Detail)
		}
		return tk.State == "failed", tk.State
	})
	c.startWorkerWith(victim.id, chaosWorker(t), map[string]string{chaos.FaultsFileEnv: k.faults[victim.id]})
	// Nothing acknowledged is lost, duplicated or back at an older value after the
	// kill: neither through the restarted worker nor through the other one.
	k.checkReads(fmt.Sprintf("round %d, after %s's restart", i, victim.id), true)
	// The killed compaction's leftovers are not part of the table: verify passes.
	c.admin(k.m, "verify", k.name, "--timeout", "60s")
	k.mergeAll()
	k.checkReads(fmt.Sprintf("round %d, writes made during the hang merged", i), false)

	// The next compaction converges. The master cools a target down for 30 s after
	// a failed compact task (tasks.DefaultCooldownBase, not a setting): clear the
	// record, as an operator would with etcdctl del, so it runs now. The backoff is
	// not what this test is about.
	cooldown := c.prefix + "/cooldown/compact/" + k.name
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	resp, err := c.client.Delete(ctx, cooldown)
	cancel()
	if err != nil {
		t.Fatalf("delete %s: %v", cooldown, err)
	}
	if resp.Deleted != 1 {
		t.Fatalf("round %d: no %s: the killed compaction was not counted as a failure", i, cooldown)
	}
	done := k.compact()
	if !strings.Contains(done.Detail, "compacted") {
		t.Fatalf("round %d: the compaction after the kill compacted nothing: %s", i, done.Detail)
	}
	after := k.compactStats()
	live := after.Rows
	// Compaction neither loses nor duplicates rows: the table holds one live row
	// per id.
	if live != int64(len(k.model)) {
		t.Fatalf("round %d: %d live rows in the table (%d deleted ones besides), want one per id: %d", i, live, after.DeletedRows, len(k.model))
	}
	// The fragment count drops: every fragment but at most one holds at least half
	// TARGET_ROWS_PER_FRAGMENT live rows (the rest were rewritten into full ones).
	if limit := int(live)/(killRowsPerFragment/2) + 1; after.Fragments > limit || after.Fragments >= before.Fragments {
		t.Fatalf("round %d: %d fragments after the compaction, %d before the killed one: want fewer, and at most %d for %d live rows",
			i, after.Fragments, before.Fragments, limit, live)
	}
	k.checkReads(fmt.Sprintf("round %d, after the compaction that followed the kill", i), true)

	// Convergence: the next compaction has nothing left to rewrite, and its cleanup
	// (a GC window after the kill) deletes what the killed compaction staged.
	time.Sleep(time.Until(killedAt.Add(killGCWindow + 500*time.Millisecond)))
	c.awaitNoLiveTask()
	if fixed := k.compact(); !strings.HasPrefix(fixed.Detail, "nothing to compact") {
		t.Fatalf("round %d: a second compaction still compacted: %s", i, fixed.Detail)
	}
	var left []string
	for _, f := range staged {
		if _, err := os.Stat(filepath.Join(k.dir, filepath.FromSlash(f))); err == nil {
			left = append(left, f)
		}
	}
	if len(left) > 0 {
		t.Fatalf("round %d: files the killed compaction staged are still stored %v after it: %v", i, time.Since(killedAt).Round(time.Millisecond), left)
	}
	k.checkReads(fmt.Sprintf("round %d, at the end", i), true)
	t.Logf("round %d (%s on %s) in %v: %d -> %d fragments, %d live rows; compaction after the kill: %s",
		i, point, victim.id, time.Since(started).Round(time.Millisecond), before.Fragments, after.Fragments, live, done.Detail)
}

// rules are the hook's rules that hang the compaction at point (see the test's doc).
func (k *killTest) rules(point string) []chaos.RuleSpec {
	commit := chaos.RuleSpec{Ops: []objstore.Op{objstore.OpPutIfAbsent}, KeyPrefix: k.key + "/_versions/", Hang: true}
	switch point {
	case "staging":
		var rules []chaos.RuleSpec
		for _, j := range k.rng.Perm(16)[:4] {
			rules = append(rules, chaos.RuleSpec{Ops: []objstore.Op{objstore.OpPut}, KeyPrefix: k.key + "/data/",
				KeyContains: fmt.Sprintf("%x.parquet", j), Hang: true})
		}
		return append(rules, commit)
	case "commit":
		return []chaos.RuleSpec{commit}
	case "cleanup":
		var rules []chaos.RuleSpec
		for _, dir := range []string{"_versions", "data", "_deletions"} {
			rules = append(rules, chaos.RuleSpec{Ops: []objstore.Op{objstore.OpDelete}, KeyPrefix: k.key + "/" + dir + "/", Hang: true})
		}
		return rules
	}
	k.t.Fatalf("kill point %q", point)
	return nil
}

// add writes one sealed batch through w: fresh new ids (prefix-n) and overwrites of
// distinct ids written before, all at a new value; the model takes it once acked.
func (k *killTest) add(w *workerProc, prefix string, fresh, overwrites int) {
	k.t.Helper()
	k.value++
	batch := map[string]bool{}
	var recs []string
	for n := 0; n < fresh; n++ {
		id := fmt.Sprintf("%s-%d", prefix, n)
		batch[id] = true
		recs = append(recs, record(id, k.value))
	}
	for n := 0; n < overwrites && len(batch) < fresh+len(k.ids); {
		id := k.ids[k.rng.IntN(len(k.ids))]
		if !batch[id] {
			batch[id] = true
			recs = append(recs, record(id, k.value))
			n++
		}
	}
	code, out, err := postWith(http.DefaultClient, w.url()+k.records+"?flush=true", "", `{"records":[`+strings.Join(recs, ",")+`]}`)
	if err != nil || code/100 != 2 {
		k.t.Fatalf("add through %s: %d %s %v", w.id, code, out, err)
	}
	k.lastChange = time.Now()
	for id := range batch {
		if _, ok := k.model[id]; !ok {
			k.ids = append(k.ids, id)
		}
		k.model[id] = k.value
	}
}

// mergeAll merges every worker's pending generations and waits for the master's
// tasks to settle: nothing is pending afterwards.
func (k *killTest) mergeAll() {
	k.t.Helper()
	for _, id := range sortedIDs(k.c.workers) {
		code, out, err := postWith(http.DefaultClient, k.c.workers[id].url()+"/api/v1/internal/merge-wal/"+url.PathEscape(k.name), e2eToken, "")
		if err != nil || code != http.StatusOK {
			k.t.Fatalf("merge through %s: %d %s %v", id, code, out, err)
		}
	}
	k.c.awaitNoLiveTask()
	k.lastChange = time.Now()
}

// compact runs a compact task of the store to its end and returns it (done).
func (k *killTest) compact() task {
	k.t.Helper()
	var got struct{ Task task }
	if err := json.Unmarshal(k.c.admin(k.m, "compact", k.name, "--timeout", "60s"), &got); err != nil {
		k.t.Fatal(err)
	}
	k.lastChange = time.Now()
	return got.Task
}

// checkReads requires every worker to answer exactly the model: one list (one
// snapshot) holding each id once at its last acknowledged value and no other id,
// and, with gets, a get of every id returning that value. Reads start once
// SNAPSHOT_TTL has passed since the last change, so that every worker's view
// includes it.
func (k *killTest) checkReads(when string, gets bool) {
	k.t.Helper()
	time.Sleep(time.Until(k.lastChange.Add(killSnapshotTTL + 100*time.Millisecond)))
	var (
		mu       sync.Mutex
		problems []string
	)
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	httpc := &http.Client{Timeout: 10 * time.Second}
	var g errgroup.Group
	g.SetLimit(8)
	for _, wid := range sortedIDs(k.c.workers) {
		w := k.c.workers[wid]
		listed, err := listRecords(httpc, w.url()+k.records, url.Values{})
		if err != nil {
			k.t.Fatalf("%s: list through %s: %v", when, wid, err)
		}
		seen := map[string]bool{}
		for _, r := range listed {
			want, ok := k.model[r.ID]
			switch {
			case seen[r.ID]:
				report("%s lists %s twice", wid, r.ID)
			case !ok:
				report("%s lists %s, never written", wid, r.ID)
			case r.Content != fmt.Sprint(want):
				report("%s lists %s = %s, want %d", wid, r.ID, r.Content, want)
			}
			seen[r.ID] = true
		}
		missing := 0
		for id := range k.model {
			if !seen[id] {
				if missing++; missing <= 3 {
					report("%s does not list %s (acknowledged at %d)", wid, id, k.model[id])
				}
			}
		}
		if missing > 3 {
			report("%s: %d acknowledged ids missing from its list in all", wid, missing)
		}
		if !gets {
			continue
		}
		for _, id := range k.ids {
			g.Go(func() error {
				v, ok, err := getValue(w.url()+k.records, id, "")
				switch {
				case err != nil:
					report("%s: get %s: %v", wid, id, err)
				case !ok:
					report("%s: get %s: missing, acknowledged at %d", wid, id, k.model[id])
				case v != k.model[id]:
					report("%s: get %s = %d, want %d", wid, id, v, k.model[id])
				}
				return nil
			})
		}
	}
	_ = g.Wait()
	if len(problems) > 0 {
		k.t.Fatalf("%s: reads differ from the %d acknowledged ids:\n%s", when, len(k.model), strings.Join(problems, "\n"))
	}
}

// tableStats is the answer of GET .../compact/stats: rows are the live rows,
// deleted_rows those the deletion vectors hide besides.
type tableStats struct {
	Version     uint64 `json:"version"`
	Fragments   int    `json:"fragments"`
	Rows        int64  `json:"rows"`
	DeletedRows int64  `json:"deleted_rows"`
}

// compactStats is GET .../compact/stats through w1, once SNAPSHOT_TTL has passed
// since the last change (the answer may be that stale).
func (k *killTest) compactStats() (s tableStats) {
	k.t.Helper()
	time.Sleep(time.Until(k.lastChange.Add(killSnapshotTTL + 100*time.Millisecond)))
	code, body, err := httpGet(k.c.workers["w1"].url() + "/api/v1/rollouts/" + k.name + "/compact/stats")
	if err != nil || code != http.StatusOK {
		k.t.Fatalf("compact stats: %d %s %v", code, body, err)
	}
	if err := json.Unmarshal(body, &s); err != nil {
		k.t.Fatal(err)
	}
	return s
}

// task reads a task record from etcd (the zero task while it cannot).
func (k *killTest) task(id string) task {
	for _, tk := range k.c.tasksNow() {
		if tk.ID == id {
			return tk
		}
	}
	return task{}
}

// setFaults replaces a worker's faults file atomically (its hook polls it).
func (k *killTest) setFaults(id string, spec chaos.Spec) {
	k.t.Helper()
	data, err := json.Marshal(spec)
	if err != nil {
		k.t.Fatal(err)
	}
	tmp := k.faults[id] + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		k.t.Fatal(err)
	}
	if err := os.Rename(tmp, k.faults[id]); err != nil {
		k.t.Fatal(err)
	}
}

// setFaultsAndWait sets a running worker's faults and waits until its hook reports
// them in force; it returns the hook's counters then.
func (k *killTest) setFaultsAndWait(id string, spec chaos.Spec) chaos.Stats {
	k.t.Helper()
	set := time.Now()
	k.setFaults(id, spec)
	var st chaos.Stats
	testwait.ForEvery(k.c.t, 10*time.Second, poll, id+"'s hook applies its faults", func() (bool, string) {
		st = k.stats(id)
		return st.UpdatedAt.After(set) && len(st.Spec.Rules) == len(spec.Rules), fmt.Sprintf("%d rules at %v", len(st.Spec.Rules), st.UpdatedAt)
	})
	return st
}

// stats reads a worker's hook counters (zero while the file is not there yet).
func (k *killTest) stats(id string) chaos.Stats {
	var st chaos.Stats
	if data, err := os.ReadFile(k.faults[id] + chaos.StatsSuffix); err == nil {
		_ = json.Unmarshal(data, &st)
	}
	return st
}

// tableFiles lists the table's fragment, bloom filter and deletion vector files,
// relative to its directory.
func (k *killTest) tableFiles() map[string]bool {
	k.t.Helper()
	files := map[string]bool{}
	for _, sub := range []string{"data", "_deletions"} {
		entries, err := os.ReadDir(filepath.Join(k.dir, sub))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			k.t.Fatal(err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				files[sub+"/"+e.Name()] = true
			}
		}
	}
	return files
}

// unreferenced returns the table's files not in before that no stored manifest
// references: what a killed transaction staged and never committed.
func (k *killTest) unreferenced(before map[string]bool) []string {
	k.t.Helper()
	refs := map[string]bool{}
	entries, err := os.ReadDir(filepath.Join(k.dir, "_versions"))
	if err != nil {
		k.t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(k.dir, "_versions", e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // pruned meanwhile
		}
		if err != nil {
			k.t.Fatal(err)
		}
		var m struct {
			Fragments []struct {
				Path  string `json:"path"`
				Bloom string `json:"bloom"`
				Index *struct {
					Path string `json:"path"`
				} `json:"index"`
				Deletions *struct {
					Path string `json:"path"`
				} `json:"deletions"`
			} `json:"fragments"`
		}
		if err := json.Unmarshal(data, &m); err != nil {
			k.t.Fatalf("manifest %s: %v", e.Name(), err)
		}
		for _, f := range m.Fragments {
			refs[f.Path], refs[f.Bloom] = true, true
			if f.Index != nil {
				refs[f.Index.Path] = true
			}
			if f.Deletions != nil {
				refs[f.Deletions.Path] = true
			}
		}
	}
	var out []string
	for f := range k.tableFiles() {
		if !before[f] && !refs[f] {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}
