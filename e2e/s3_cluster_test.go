package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/loadgen"
)

// TestClusterOnS3KeepsEveryAcknowledgedRowThroughAKillAdoptionAndMaintenance runs
// the whole system on S3 (MinIO, through gocloud's s3blob as production does): etcd,
// a master and three workers, steady adds of both kinds and overwrites of a few ids,
// the master's merges, a SIGKILL of w2 while a merge runs and the adoption of its
// shard by w1 and w3, then compaction and garbage collection. Every put-if-absent a
// commit, seal, claim or fence rests on is S3's conditional write here, every
// listing and range read S3's. Invariants: every acknowledged row is listed exactly
// once through each survivor, every overwritten id reads its latest value, nothing
// stays pending, w2's shard is retired, and the versions garbage collection deleted
// are gone from the bucket.
func TestClusterOnS3KeepsEveryAcknowledgedRowThroughAKillAdoptionAndMaintenance(t *testing.T) {
	t.Parallel()
	store := minioStore(t)
	c := newClusterOn(t, store, map[string]string{
		"FLUSH_INTERVAL":          "500ms",
		"VERSION_RETENTION_COUNT": "3",
		"VERSION_RETENTION_AGE":   "1s",
		"GC_SAFETY_WINDOW":        "2s",
	}, map[string]string{
		"MERGE_WAL_MIN_GENERATIONS": "1",
		"ORPHAN_GRACE":              orphanGrace,
		"COMPACTION_INTERVAL":       "1s",
		"MIN_FRAGMENTS":             "2", // a gather merge is one fragment for every worker
	})
	m := c.startMaster("m1", nil)
	w1, w2, w3 := c.startWorker("w1"), c.startWorker("w2"), c.startWorker("w3")
	const rollouts, events, hot = "s3_rollouts", "s3_events", "s3_hot"
	if code, body, err := postWith(http.DefaultClient, w1.url()+"/api/v1/rollouts", "", `{"name":"`+hot+`"}`); err != nil || code/100 != 2 {
		t.Fatalf("create store %s: %d %s %v", hot, code, body, err)
	}

	l := newLedger()
	stopLoad := backgroundLoad(t, loadgen.Config{
		Workers: c.workerURLs(), Rate: 200, Batch: 10, Concurrency: 3,
		RolloutStore: rollouts, GenericStore: events, RunID: "s3", OnBatch: l.record,
	})
	ow := newOverwriter(hot, 8)
	ctx, stopOverwrites := context.WithCancel(context.Background())
	defer stopOverwrites()
	owDone := make(chan struct{})
	go func() {
		defer close(owDone)
		ow.run(ctx, []*workerProc{w1, w2, w3})
	}()

	testwait.ForEvery(t, time.Minute, poll, "the master has finished merges on S3 under load", func() (bool, string) {
		n := 0
		for _, tk := range c.tasksNow() {
			if tk.Kind == "merge_wal" && tk.State == "done" {
				n++
			}
		}
		return n >= 3, fmt.Sprintf("%d merge_wal tasks done", n)
	})
	// Kill w2 while a merge runs (the master calls w1, w2, w3 in turn), and never
	// bring it back: its shard is for the others to adopt.
	caught := false
	for deadline := time.Now().Add(15 * time.Second); !caught && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, tk := range c.tasksNow() {
			caught = caught || (tk.Kind == "merge_wal" && tk.State == "running")
		}
	}
	w2.kill()
	killed := time.Now()
	t.Logf("w2 killed with SIGKILL (a merge task was running: %v)", caught)
	time.Sleep(3 * time.Second) // adds go on through w1 and w3; those sent to w2 fail
	st := stopLoad()
	stopOverwrites()
	<-owDone
	acked, maybe := l.counts()
	t.Logf("load: %d rows acknowledged, %d in failed requests, %d requests; %d overwrites acknowledged", acked, maybe, st.Requests, ow.ackedWrites())
	if acked == 0 || ow.ackedWrites() == 0 {
		t.Fatal("nothing was acknowledged")
	}

	// The survivors: every acknowledged row once, w2's shard adopted and retired.
	c.forgetWorker("w2")
	c.awaitMergedExactlyOnce(m, l, loadgen.KindRollout, rollouts, 90*time.Second)
	c.awaitMergedExactlyOnce(m, l, loadgen.KindGeneric, events, 90*time.Second)
	for _, tgt := range []string{rollouts, target(loadgen.KindGeneric, events)} {
		testwait.ForEvery(t, 30*time.Second, poll, tgt+": w2's shard adopted and retired", func() (bool, string) {
			row, ok := shardStats(c, m, tgt)
			if !ok || row.PendingWALGenerations != 0 || slices.Contains(row.ActiveShards, "w2") {
				return false, fmt.Sprintf("stats: %+v", row)
			}
			return strings.Contains(c.adminTaskDetails(tgt), "adopted 1 orphaned shard"), "no merge_wal task says it adopted a shard yet"
		})
	}
	t.Logf("w2's rows merged through its adopted shard %s after the kill", time.Since(killed).Round(100*time.Millisecond))

	// Compaction and garbage collection ran on S3, and what they deleted is gone
	// from the bucket.
	bucket := objstoretest.OpenURL(t, store.url)
	testwait.ForEvery(t, 90*time.Second, poll, rollouts+" compacted and its old versions collected in the bucket", func() (bool, string) {
		mt := c.maintenanceTotals(rollouts)
		if mt.FragmentsCompacted == 0 || mt.VersionsDeleted == 0 || mt.FilesDeleted == 0 {
			return false, fmt.Sprintf("compact tasks so far: %+v", mt)
		}
		versions, newest, err := storedVersions(bucket, rollouts)
		if err != nil {
			return false, err.Error()
		}
		if versions >= int(newest) {
			return false, fmt.Sprintf("%d manifests stored for %d versions: garbage collection deleted none of them", versions, newest)
		}
		t.Logf("compact tasks: %+v; %d manifests left in the bucket of %d versions", mt, versions, newest)
		return true, ""
	})

	// The overwritten ids: each once, at its latest value, through each survivor.
	for _, w := range []*workerProc{w1, w3} {
		recs, err := listRecords(&http.Client{Timeout: 10 * time.Second}, w.url()+"/api/v1/rollouts/"+hot+"/records", nil)
		if err != nil {
			t.Fatalf("list %s through %s: %v", hot, w.id, err)
		}
		if p := ow.check(recs); p != "" {
			t.Errorf("%s through %s: %s", hot, w.id, p)
		}
	}
}

// forgetWorker drops a worker killed for good from the cluster's list, so the
// checks that read through every worker read through the survivors. Its process
// stays tracked: its log is still printed if the test fails.
func (c *cluster) forgetWorker(id string) {
	c.t.Helper()
	if w := c.workers[id]; w == nil || !w.exited() {
		c.t.Fatalf("forget worker %s: it is not a worker that exited", id)
	}
	delete(c.workers, id)
}

// maintenance sums the counts of a target's finished compact tasks.
type maintenance struct {
	FragmentsCompacted int64 `json:"fragments_compacted"`
	VersionsDeleted    int64 `json:"versions_deleted"`
	FilesDeleted       int64 `json:"files_deleted"`
}

// maintenanceTotals reads every compact task of tgt from etcd and sums what the
// done ones compacted and deleted.
func (c *cluster) maintenanceTotals(tgt string) maintenance {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.client.Get(ctx, c.prefix+"/tasks/", clientv3.WithPrefix())
	if err != nil {
		return maintenance{}
	}
	var sum maintenance
	for _, kv := range resp.Kvs {
		var tk struct {
			Kind, Target, State string
			Stats               maintenance `json:"stats"`
		}
		if json.Unmarshal(kv.Value, &tk) != nil || tk.Kind != "compact" || tk.Target != tgt || tk.State != "done" {
			continue
		}
		sum.FragmentsCompacted += tk.Stats.FragmentsCompacted
		sum.VersionsDeleted += tk.Stats.VersionsDeleted
		sum.FilesDeleted += tk.Stats.FilesDeleted
	}
	return sum
}

// storedVersions counts the base manifests of rollout store name in the bucket
// and returns the newest version among them; the table's directory is the one
// its registry object names.
func storedVersions(b *objstore.Bucket, name string) (count int, newest uint64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data, err := b.Get(ctx, "_registry/rollout/"+name+".json")
	if err != nil {
		return 0, 0, err
	}
	var entry struct {
		URI string `json:"uri"`
	}
	if err := json.Unmarshal(data, &entry); err != nil || entry.URI == "" {
		return 0, 0, fmt.Errorf("registry object of %s: %s %v", name, data, err)
	}
	objs, err := b.List(ctx, strings.TrimSuffix(entry.URI, "/")+"/_versions/")
	if err != nil {
		return 0, 0, err
	}
	for _, o := range objs {
		base := o.Key[strings.LastIndex(o.Key, "/")+1:]
		var v uint64
		if _, err := fmt.Sscanf(base, "%d.json", &v); err == nil {
			count++
			newest = max(newest, v)
		}
	}
	return count, newest, nil
}

// overwriter rewrites a few ids of a rollout store over and over with rising
// values, one request at a time (?flush=true) through the given workers in turn,
// and knows which values a read may show at the end: an id's last acknowledged
// value, or one sent after it whose request failed (written or not: unknown).
type overwriter struct {
	store string
	ids   int

	mu      sync.Mutex
	acked   map[string]int   // id -> last acknowledged value
	unknown map[string][]int // id -> values sent after it, outcome unknown
	writes  int
}

func newOverwriter(store string, ids int) *overwriter {
	return &overwriter{store: store, ids: ids, acked: map[string]int{}, unknown: map[string][]int{}}
}

func (o *overwriter) run(ctx context.Context, workers []*workerProc) {
	httpc := &http.Client{Timeout: 10 * time.Second}
	for v := 1; ctx.Err() == nil; v++ {
		id := fmt.Sprintf("hot-%d", v%o.ids)
		w := workers[v%len(workers)]
		code, _, err := postWith(httpc, w.url()+"/api/v1/rollouts/"+o.store+"/records?flush=true", "", `{"records":[`+record(id, v)+`]}`)
		o.mu.Lock()
		if err == nil && code == http.StatusCreated {
			o.acked[id], o.unknown[id] = v, nil
			o.writes++
		} else {
			o.unknown[id] = append(o.unknown[id], v)
		}
		o.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

func (o *overwriter) ackedWrites() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.writes
}

// check compares a listing of the store with what was written: each id once, at
// its last acknowledged value or a later unknown one. It returns "" when all holds.
func (o *overwriter) check(recs []listedRecord) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := map[string]bool{}
	var problems []string
	for _, r := range recs {
		if seen[r.ID] {
			problems = append(problems, "duplicate "+r.ID)
		}
		seen[r.ID] = true
		var v int
		if _, err := fmt.Sscan(r.Content, &v); err != nil {
			problems = append(problems, fmt.Sprintf("%s: content %q", r.ID, r.Content))
			continue
		}
		if v != o.acked[r.ID] && !slices.Contains(o.unknown[r.ID], v) {
			problems = append(problems, fmt.Sprintf("%s reads %d, want %d (its last acknowledged value) or one of %v", r.ID, v, o.acked[r.ID], o.unknown[r.ID]))
		}
	}
	for id := range o.acked {
		if !seen[id] {
			problems = append(problems, "missing "+id)
		}
	}
	return strings.Join(problems, "; ")
}
