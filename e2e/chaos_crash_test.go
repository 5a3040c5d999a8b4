//go:build chaos

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/chaos"
	"github.com/tidemark-io/tidemark/tools/loadgen"
)

// TestChaosWorkerCrashPointsLoseNoAcknowledgedRow is the crash-point campaign:
// three workers and a master under continuous adds of both kinds from two
// clients (plain adds, and read-your-write adds that seal a generation each), and
// a loop of trials (TIDEMARK_CHAOS_TRIALS, 50) that each wait a random 0-1.5 s,
// SIGKILL a random worker and restart it on the same ports and instance id. The
// random delays land the kills in group-committed appends, seals (sweeper and
// ?flush=true), the master's merge calls and their commits. Then the traffic
// stops, the master merges everything, and every worker must list every
// acknowledged row exactly once; a row whose add failed or was in flight at a
// kill ("maybe") may be there, at most once.
//
// The guarded failures: an acknowledged add lost because its entry was not
// durable before the answer, a WAL replay after a crash that re-adds rows a merge
// had committed (a duplicate), and a merge interrupted between its base commit and
// its shard drain that commits the same generations twice.
func TestChaosWorkerCrashPointsLoseNoAcknowledgedRow(t *testing.T) {
	cc := startChaosReport(t, "worker crash points")
	trials := chaosInt(t, "TIDEMARK_CHAOS_TRIALS", 50)
	t.Logf("%d trials", trials)
	rng := chaosRand(t)

	// The master merges whatever is pending, often, and every object-store request
	// of the workers takes a few milliseconds, as on a real store: merges last
	// long enough for more of the kills to land in one.
	faults := filepath.Join(t.TempDir(), "faults.json")
	if err := os.WriteFile(faults, []byte(`{"latency": "4ms", "jitter": "4ms"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, map[string]string{"FLUSH_INTERVAL": "500ms", chaos.FaultsFileEnv: faults}, map[string]string{
		"MERGE_WAL_MIN_GENERATIONS": "1", "STATS_SCAN_INTERVAL": "300ms", "MERGE_WAL_INTERVAL": "300ms",
	})
	started := time.Now() // after the binaries were built
	m := c.startMaster("m1", nil)
	ids := []string{"w1", "w2", "w3"}
	for _, id := range ids {
		c.startWorker(id)
	}

	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	load := startSegmentedLoad(ctx, t, c.workerURLs(), "crash")

	testwait.ForEvery(c.t, 30*time.Second, poll, "the master has finished a merge under load", func() (bool, string) {
		return c.tasksIn("done") > 0, fmt.Sprintf("%d acked", load.acked())
	})

	loopStart := time.Now()
	var (
		killsInTask int
		restart     []time.Duration
		perWorker   = map[string]int{}
	)
	for i := range trials {
		time.Sleep(time.Duration(rng.Int64N(int64(1500 * time.Millisecond))))
		id := ids[rng.IntN(len(ids))]
		if c.runningTasks() > 0 {
			killsInTask++
		}
		c.workers[id].kill()
		t0 := time.Now()
		c.startWorker(id)
		restart = append(restart, time.Since(t0))
		perWorker[id]++
		if (i+1)%10 == 0 {
			t.Logf("trial %d/%d: %d rows acked so far, %d kills while a merge task ran", i+1, trials, load.acked(), killsInTask)
		}
	}
	loopTook := time.Since(loopStart)
	stopLoad()
	segs := load.wait()

	acked, maybe := 0, 0
	for _, s := range segs {
		a, m := s.l.counts()
		acked, maybe = acked+a, maybe+m
	}
	cc.add("trials", trials)
	cc.add("kills per worker", fmt.Sprintf("w1 %d, w2 %d, w3 %d", perWorker["w1"], perWorker["w2"], perWorker["w3"]))
	cc.add("kills while a merge_wal task was running (etcd P/running/)", killsInTask)
	cc.add("restart to serving, p50 / max", fmt.Sprintf("%s / %s", percentile(restart, 50).Round(time.Millisecond), percentile(restart, 100).Round(time.Millisecond)))
	cc.add("acknowledged rows", acked)
	cc.add("maybe rows (add failed or in flight at a kill)", maybe)
	cc.add("stores written", 2*len(segs))
	if acked == 0 {
		t.Fatal("no row was acknowledged")
	}

	// Drain: the flush sweepers seal what is left, the master's sweep merges it.
	// The wait does not fail the test: the figures below say what is wrong, and
	// awaitMergedExactlyOnce then fails it naming a row.
	drainStart := time.Now()
	var n rowCounts
	for {
		var status string
		n, status = c.compareStores(m, segs, ids)
		if status == "" || time.Since(drainStart) > 2*time.Minute {
			cc.add("drain after the last kill (until merged, exactly once)", time.Since(drainStart).Round(100*time.Millisecond))
			if status != "" {
				t.Errorf("not drained after 2m: %s", status)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	cc.add("lost acknowledged rows", n.lost)
	cc.add("duplicated rows", n.dup)
	cc.add("rows never sent", n.unknown)
	cc.add("maybe rows present (at most once each)", n.maybePresent)
	failed, byKill := c.failedMergesByKill(ids)
	cc.add("merge_wal tasks done", c.tasksIn("done"))
	cc.add("merge_wal tasks failed, of them by a worker killed mid-call", fmt.Sprintf("%d, %d", failed, byKill))
	cc.add("trial loop / total time (from the cluster start)", fmt.Sprintf("%s / %s", loopTook.Round(time.Second), time.Since(started).Round(time.Second)))

	for _, s := range segs {
		c.awaitMergedExactlyOnce(m, s.l, loadgen.KindRollout, s.rollouts, 30*time.Second)
		c.awaitMergedExactlyOnce(m, s.l, loadgen.KindGeneric, s.events, 30*time.Second)
	}
}

// compareStores lists every segment's stores through every worker and compares
// them with the ledgers: the sums over the stores of the worst worker's counts,
// and "" when every store is merged (no pending generation, the master's row
// count is what the workers list) and readable exactly once everywhere, else
// what is not yet.
func (c *cluster) compareStores(m *masterProc, segs []*loadSegment, workers []string) (rowCounts, string) {
	var total rowCounts
	var status []string
	stats := c.stats(m)
	for _, s := range segs {
		for _, kind := range []loadgen.Kind{loadgen.KindRollout, loadgen.KindGeneric} {
			store := s.store(kind)
			s.l.mu.Lock()
			acked, maybe := s.l.acked[kind], s.l.maybe[kind]
			s.l.mu.Unlock()
			var worst rowCounts
			listed := -1
			for _, id := range workers {
				ids, err := listIDs(c.workers[id].url(), kind, store)
				if err != nil {
					status = append(status, fmt.Sprintf("%s through %s: %v", store, id, err))
					continue
				}
				n := countRows(ids, acked, maybe)
				worst = rowCounts{max(worst.lost, n.lost), max(worst.dup, n.dup), max(worst.unknown, n.unknown), max(worst.maybePresent, n.maybePresent)}
				if n.lost+n.dup+n.unknown > 0 {
					status = append(status, fmt.Sprintf("%s through %s: %+v", store, id, n))
				}
				if listed >= 0 && listed != len(ids) {
					status = append(status, fmt.Sprintf("%s: workers list %d and %d rows", store, listed, len(ids)))
				}
				listed = len(ids)
			}
			total = rowCounts{total.lost + worst.lost, total.dup + worst.dup, total.unknown + worst.unknown, total.maybePresent + worst.maybePresent}
			if row, ok := stats[target(kind, store)]; !ok || row.PendingWALGenerations > 0 || row.RowCount != int64(listed) {
				status = append(status, fmt.Sprintf("%s: stats %+v, workers list %d rows", store, row, listed))
			}
		}
	}
	return total, strings.Join(status, "; ")
}

// loadSegment is one pair of stores written by the campaign's clients until
// they hold segmentRows, with its own ledger: a store never outgrows what
// listIDs reads in one page, however many trials run.
type loadSegment struct {
	rollouts, events string
	l                *ledger
}

func (s *loadSegment) store(k loadgen.Kind) string {
	if k == loadgen.KindGeneric {
		return s.events
	}
	return s.rollouts
}

// segmentedLoad runs load segments one after another until its context ends.
type segmentedLoad struct {
	mu   sync.Mutex
	segs []*loadSegment
	done chan struct{}
}

// Per segment: the plain client adds segmentRows (half per kind), the flush client
// segmentFlushRows with ?flush=true (a seal inside every request).
const (
	segmentRows      = 6000
	segmentFlushRows = 1000
)

// startSegmentedLoad writes both kinds through every worker from two clients at
// once: plain adds at 150 rows/s, and read-your-write adds (?flush=true) at 25
// rows/s. Requests that fail while a worker is down are recorded as maybe rows.
func startSegmentedLoad(ctx context.Context, t *testing.T, workers []string, name string) *segmentedLoad {
	sl := &segmentedLoad{done: make(chan struct{})}
	go func() {
		defer close(sl.done)
		for n := 0; ctx.Err() == nil; n++ {
			s := &loadSegment{
				rollouts: fmt.Sprintf("chaos_%s_r%d", name, n),
				events:   fmt.Sprintf("chaos_%s_e%d", name, n),
				l:        newLedger(),
			}
			sl.mu.Lock()
			sl.segs = append(sl.segs, s)
			sl.mu.Unlock()
			clients := []loadgen.Config{
				{Rate: 150, Batch: 10, Concurrency: 3, MaxRows: segmentRows, RunID: fmt.Sprintf("%s%d-plain", name, n)},
				{Rate: 25, Batch: 5, Concurrency: 2, MaxRows: segmentFlushRows, RunID: fmt.Sprintf("%s%d-flush", name, n), Flush: true},
			}
			var wg sync.WaitGroup
			for _, cfg := range clients {
				cfg.Workers, cfg.RolloutStore, cfg.GenericStore, cfg.OnBatch = workers, s.rollouts, s.events, s.l.record
				wg.Go(func() { runLoadRetryingSetup(ctx, t, cfg) })
			}
			wg.Wait()
		}
	}()
	return sl
}

// runLoadRetryingSetup runs cfg, retrying while the store creation it starts with
// fails (the worker it asks may be down at that moment): nothing is sent before.
func runLoadRetryingSetup(ctx context.Context, t *testing.T, cfg loadgen.Config) {
	for i := 0; ctx.Err() == nil; i++ {
		// Ask the workers in turn: the first one may be the one just killed.
		ws := slices.Clone(cfg.Workers)
		cfg.Workers = append(ws[i%len(ws):], ws[:i%len(ws)]...)
		_, err := loadgen.Run(ctx, cfg)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			return
		}
		if i > 100 {
			t.Errorf("load %s: %v", cfg.RunID, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (sl *segmentedLoad) acked() int {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	n := 0
	for _, s := range sl.segs {
		a, _ := s.l.counts()
		n += a
	}
	return n
}

// wait waits until the clients stopped (every request in flight answered) and
// returns the segments written.
func (sl *segmentedLoad) wait() []*loadSegment {
	<-sl.done
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return slices.Clone(sl.segs)
}

// rowCounts is how a worker's listing compares with a ledger.
type rowCounts struct {
	lost         int // acknowledged, not listed
	dup          int // listed more than once
	unknown      int // listed, never sent
	maybePresent int // maybe rows listed
}

func countRows(listed []string, acked, maybe map[string]bool) rowCounts {
	seen := map[string]int{}
	var n rowCounts
	for _, id := range listed {
		seen[id]++
		switch {
		case seen[id] == 2:
			n.dup++
		case seen[id] > 2:
		case maybe[id]:
			n.maybePresent++
		case !acked[id]:
			n.unknown++
		}
	}
	for id := range acked {
		if seen[id] == 0 {
			n.lost++
		}
	}
	return n
}

// failedMergesByKill counts failed merge_wal tasks, and those of them that a
// worker's death stopped after the call reached it (the fan-out's error names the
// worker and is not "unreachable").
func (c *cluster) failedMergesByKill(workers []string) (failed, byKill int) {
	for _, tk := range c.tasksNow() {
		if tk.Kind != "merge_wal" || tk.State != "failed" {
			continue
		}
		failed++
		for _, id := range workers {
			if strings.Contains(tk.Error, "worker "+id+" (") {
				byKill++
				break
			}
		}
	}
	return failed, byKill
}

// chaosInt reads an integer override of a campaign setting, def when unset.
func chaosInt(t *testing.T, env string, def int) int {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", env, v)
	}
	return n
}

// chaosRand is a campaign's source of random choices, seeded from
// TIDEMARK_CHAOS_SEED when set (a failed run's log gives the seed that replays its
// schedule), from the clock otherwise.
func chaosRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(chaosInt(t, "TIDEMARK_CHAOS_SEED", int(time.Now().UnixNano()%1e9)))
	t.Logf("seed %d (TIDEMARK_CHAOS_SEED=%d reruns the same schedule)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed))
}

// chaosDuration reads a duration override of a campaign setting, def when unset.
func chaosDuration(t *testing.T, env string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration (30s, 1m)", env, v)
	}
	return d
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[min(max(i, 0), len(s)-1)]
}
