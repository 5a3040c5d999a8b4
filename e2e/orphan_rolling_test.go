package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/loadgen"
)

// A rolling restart's pace: rollingRounds replacements, one every rollingEvery.
// Ten rounds of 3 s keep the test near a minute on 2 cores, and still leave every
// replaced worker's shard orphaned while later rounds run (a SIGKILLed worker's
// lease outlives a round by a second, and ORPHAN_GRACE adds 3 s).
const (
	rollingRounds = 10
	rollingEvery  = 3 * time.Second
)

// TestRollingRestartUnderNewIDsStrandsNothing replaces the workers one at a time
// under new instance ids, as a Kubernetes Deployment does on every rollout: ten
// rounds, each stopping the oldest worker (SIGTERM and SIGKILL in turn) and
// starting w4, w5, ... in its place, while two clients add rows (some with
// ?flush=true) through whichever workers are live. Production failure (DESIGN.md
// problem 5): every rollout left each old pod's shard without an owner, so its
// unsealed acknowledged rows were readable through no worker and its sealed
// generations were never merged; pending generations only grew. Invariants: once
// the traffic stops, every acknowledged row is listed exactly once through every
// live worker (a row whose add failed, at most once), nothing is pending, and the
// active shards are live workers' only: none of the ten replaced ids is left.
func TestRollingRestartUnderNewIDsStrandsNothing(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil, map[string]string{
		"ORPHAN_GRACE": orphanGrace,
		// A last generation of a shard must not wait for a second one: after the
		// traffic stops nothing else would come to reach the threshold.
		"MERGE_WAL_MIN_GENERATIONS": "1",
	})
	m := c.startMaster("m1", nil)
	f := &fleet{}
	for _, id := range []string{"w1", "w2", "w3"} {
		f.add(c.startWorker(id))
	}
	const store = "rolling"
	client := &http.Client{Timeout: 30 * time.Second}
	mustSend(t, client, http.MethodPost, f.live()[0].url()+"/api/v1/generic", fmt.Sprintf(`{"name":%q,"schema":%s}`, store, churnSpec), http.StatusCreated)

	led := &rowLedger{}
	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	var load sync.WaitGroup
	for g := range 2 {
		load.Go(func() {
			addThroughFleet(ctx, client, f, g, func(int64) string { return store }, led.record)
		})
	}

	var replaced []string
	start := time.Now()
	for round := range rollingRounds {
		if d := time.Until(start.Add(time.Duration(round+1) * rollingEvery)); d > 0 {
			time.Sleep(d)
		}
		old := f.oldest()
		f.remove(old.id)
		how := "SIGKILL"
		if round%2 == 0 {
			how = "SIGTERM"
			if err := old.stop(syscall.SIGTERM, 10*time.Second); err != nil {
				t.Logf("round %d: %s did not stop cleanly: %v", round+1, old.id, err)
			}
		} else {
			old.kill()
		}
		replaced = append(replaced, old.id)
		nw := c.startWorker(fmt.Sprintf("w%d", 4+round))
		f.add(nw)
		acked, maybe := led.counts()
		t.Logf("round %d: %s stopped by %s, %s started; %d rows acknowledged, %d maybe", round+1, old.id, how, nw.id, acked, maybe)
	}
	stopLoad()
	load.Wait()
	rolled := time.Now()

	acked, maybe := led.snapshot()
	t.Logf("answers to adds by status (0: no answer): %v", led.statuses())
	if len(acked) < 100 {
		t.Fatalf("only %d rows acknowledged during the rollout: the test proved nothing", len(acked))
	}
	if n := led.status(http.StatusInternalServerError); n > 0 {
		t.Errorf("%d adds were answered 500 during the rollout: a client cannot act on that", n)
	}
	live := f.live()
	liveIDs := f.ids()
	tgt := target(loadgen.KindGeneric, store)
	testwait.ForEvery(c.t, 90*time.Second, poll, "every acknowledged row listed once through every live worker, nothing pending, only live workers' shards active", func() (bool, string) {
		for _, w := range live {
			ids, err := listIDs(w.url(), loadgen.KindGeneric, store)
			if err != nil {
				return false, w.id + ": " + err.Error()
			}
			if p := exactlyOnce(ids, acked, maybe); p != "" {
				return false, w.id + ": " + p
			}
		}
		row, ok := shardStats(c, m, tgt)
		if !ok {
			return false, "no stats row"
		}
		var stranded []string
		for _, s := range row.ActiveShards {
			if !slices.Contains(liveIDs, s) {
				stranded = append(stranded, s)
			}
		}
		if row.PendingWALGenerations != 0 || len(stranded) > 0 {
			return false, fmt.Sprintf("pending %d (by shard %v); active shards of no live worker: %v", row.PendingWALGenerations, row.PendingByShard, stranded)
		}
		return true, ""
	})
	t.Logf("%d acknowledged rows (and %d maybe) of %d replaced workers settled %s after the rollout ended",
		len(acked), len(maybe), len(replaced), time.Since(rolled).Round(100*time.Millisecond))
	if !strings.Contains(c.adminTaskDetails(tgt), "adopted") {
		t.Errorf("no merge_wal task of %s says it adopted a shard, yet the replaced workers' shards are gone", tgt)
	}
}

// fleet is the workers clients write through. A rollout replaces its members while
// the clients run; workerProc's process fields belong to the test goroutine that
// starts and stops it, so the clients only read addresses.
type fleet struct {
	mu      sync.Mutex
	workers []*workerProc // oldest first
	next    int
}

func (f *fleet) add(w *workerProc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workers = append(f.workers, w)
}

func (f *fleet) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workers = slices.DeleteFunc(f.workers, func(w *workerProc) bool { return w.id == id })
}

func (f *fleet) oldest() *workerProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.workers[0]
}

// pick returns the live workers in turn, nil when there is none.
func (f *fleet) pick() *workerProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.workers) == 0 {
		return nil
	}
	f.next++
	return f.workers[f.next%len(f.workers)]
}

func (f *fleet) live() []*workerProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.workers)
}

func (f *fleet) ids() []string {
	var ids []string
	for _, w := range f.live() {
		ids = append(ids, w.id)
	}
	return ids
}

// addThroughFleet adds two rows per request through the fleet's workers in turn
// until ctx ends; every third request asks for ?flush=true, so the rows of a worker
// that dies are partly sealed and partly only in its WAL entries. storeOf names
// the store of the n-th request (n counts from 0 per client); record gets each
// request's worker, store, ids and answer status (0: none, e.g. the worker died).
// The pause between requests keeps a store of the rolling test within one listing
// page.
func addThroughFleet(ctx context.Context, client *http.Client, f *fleet, g int, storeOf func(n int64) string, record func(w *workerProc, store string, ids []string, status int)) {
	for i := int64(0); ctx.Err() == nil; i++ {
		w := f.pick()
		if w == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ids := []string{fmt.Sprintf("c%d-%06d-a", g, i), fmt.Sprintf("c%d-%06d-b", g, i)}
		store := storeOf(i)
		path := w.url() + "/api/v1/generic/" + store + "/rows"
		if i%3 == 0 {
			path += "?flush=true"
		}
		a, err := send(client, http.MethodPost, path, fmt.Sprintf(`{"rows":[{"id":%q,"n":%d},{"id":%q,"n":1}]}`, ids[0], i, ids[1]))
		if err != nil {
			a.status = 0
		}
		record(w, store, ids, a.status)
		time.Sleep(40 * time.Millisecond)
	}
}

// rowLedger records the ids of adds by their answer: acknowledged (201) or maybe
// (any other answer, or none: written or not, nobody knows).
type rowLedger struct {
	mu       sync.Mutex
	acked    map[string]bool
	maybe    map[string]bool
	byStatus map[int]int
}

func (l *rowLedger) record(_ *workerProc, _ string, ids []string, status int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.acked == nil {
		l.acked, l.maybe, l.byStatus = map[string]bool{}, map[string]bool{}, map[int]int{}
	}
	l.byStatus[status]++
	dst := l.maybe
	if status == http.StatusCreated {
		dst = l.acked
	}
	for _, id := range ids {
		dst[id] = true
	}
}

func (l *rowLedger) counts() (acked, maybe int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked), len(l.maybe)
}

func (l *rowLedger) snapshot() (acked, maybe map[string]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.acked), maps.Clone(l.maybe)
}

func (l *rowLedger) statuses() map[int]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.byStatus)
}

func (l *rowLedger) status(code int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byStatus[code]
}
