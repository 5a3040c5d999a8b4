//go:build chaos

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/chaos"
	"github.com/tidemark-io/tidemark/tools/loadgen"
)

// faultsClientTimeout bounds one client request in the fault campaigns: an answer
// that takes longer counts as a hang.
const faultsClientTimeout = 30 * time.Second

// TestChaosObjectStoreFaultsLoseNoAcknowledgedRow runs clients adding rollouts and
// generic rows through 3 workers for a minute (TIDEMARK_CHAOS_DURATION) while the
// bucket of every worker and of the master fails 15% of requests (puts before or
// after the write, at random) and rejects requests over a concurrency cap, like a
// store answering 503 SlowDown. Every answer must be a success or a clean error
// (4xx/5xx with the JSON error body, within the client timeout, no reset
// connection); then the faults go off, the cluster drains, and every acknowledged
// row is read exactly once through every worker. The guarded failures: an add
// acknowledged although its WAL entry was not durable, a retry after an ambiguous
// put that duplicates rows, a handler that hangs or drops the connection when the
// store fails.
func TestChaosObjectStoreFaultsLoseNoAcknowledgedRow(t *testing.T) {
	cc := startChaosReport(t, "object-store faults")
	duration := chaosDuration(t, "TIDEMARK_CHAOS_DURATION", time.Minute)
	c := newCluster(t, map[string]string{"FLUSH_INTERVAL": "500ms"}, map[string]string{"MERGE_WAL_MIN_GENERATIONS": "1"})
	faults := map[string]string{} // process -> faults file
	for _, name := range []string{"m1", "w1", "w2", "w3"} {
		faults[name] = filepath.Join(c.dir, "faults-"+name+".json")
	}
	m := c.startMaster("m1", map[string]string{chaos.FaultsFileEnv: faults["m1"]})
	for _, id := range []string{"w1", "w2", "w3"} {
		c.startChaosWorker(id, faults[id])
	}
	spec := chaos.Spec{
		ErrorRate: 0.15, WritePhase: "both",
		Latency: chaos.Duration(time.Millisecond), Jitter: chaos.Duration(5 * time.Millisecond),
		MaxConcurrent: 8, Throttle: "reject",
	}
	// Under one page of listIDs per store, whatever the duration.
	rate := min(100, 16000/duration.Seconds())
	cc.addf("faults", "every worker's and the master's bucket: %.0f%% errors (puts before or after the write), %s+%s latency, more than %d requests in flight rejected",
		spec.ErrorRate*100, time.Duration(spec.Latency), time.Duration(spec.Jitter), spec.MaxConcurrent)
	cc.addf("load", "%s of %.0f rows/s in batches of 10, 4 clients, rollout and generic stores, %s client timeout", duration, rate, faultsClientTimeout)

	const rollouts, events = "faults_rollouts", "faults_events"
	answers := newAnswerLog()
	hc := &http.Client{Timeout: faultsClientTimeout, Transport: &classifyingTransport{base: http.DefaultTransport, log: answers}}
	l := newLedger()
	var failedMu sync.Mutex
	var failed []loadgen.Batch
	record := func(b loadgen.Batch) {
		l.record(b)
		if b.Err != nil {
			failedMu.Lock()
			failed = append(failed, b)
			failedMu.Unlock()
		}
	}
	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	loadDone := make(chan loadgen.Stats, 1)
	go func() {
		st, err := loadgen.Run(ctx, loadgen.Config{
			Workers: c.workerURLs(), Rate: rate, Batch: 10, Concurrency: 4, Client: hc,
			RolloutStore: rollouts, GenericStore: events, RunID: "faults", OnBatch: record,
		})
		if err != nil {
			t.Errorf("load: %v", err)
		}
		loadDone <- st
	}()
	// The stores are created before the faults go on: creation is not what this
	// campaign measures, and the load generator stops if it fails.
	testwait.ForEvery(c.t, time.Minute, poll, "the first rows are acknowledged", func() (bool, string) {
		acked, _ := l.counts()
		return acked > 0, fmt.Sprintf("%d acked", acked)
	})
	on, _ := json.Marshal(spec)
	for _, path := range faults {
		writeFaults(t, path, string(on))
	}
	faultsOn := time.Now()
	answers.reset()
	// A reader lists both stores through every worker in turn while the faults
	// are on: reads must answer cleanly too.
	reads := newAnswerLog()
	readClient := &http.Client{Timeout: faultsClientTimeout, Transport: &classifyingTransport{base: http.DefaultTransport, log: reads}}
	readsDone := make(chan struct{})
	go func() {
		defer close(readsDone)
		for i := 0; ctx.Err() == nil; i++ {
			w := c.workerURLs()[i%3]
			kind := []loadgen.Kind{loadgen.KindRollout, loadgen.KindGeneric}[i/3%2]
			store := map[loadgen.Kind]string{loadgen.KindRollout: rollouts, loadgen.KindGeneric: events}[kind]
			_, _ = dataClient(w, readClient).ListRows(ctx, dataKind(kind), store, client.ListOptions{Limit: 100})
			time.Sleep(100 * time.Millisecond)
		}
	}()
	time.Sleep(duration)
	stopLoad()
	st := <-loadDone // requests in flight finish under the faults
	<-readsDone
	for _, path := range faults {
		writeFaults(t, path, "")
	}
	faultsOff := time.Now()
	injected, throttled, requests := faultStats(t, slices.Sorted(maps.Values(faults)))

	snap := answers.snapshot()
	acked, maybe := l.counts()
	cc.add("requests (adds during the faults)", snap.requests)
	cc.addf("acknowledged", "%d of those requests; %d rows in all (with the warm-up before the faults)", snap.ok, acked)
	cc.add("clean errors by answer", snap.cleanSummary())
	cc.add("unclean answers (reset, hang, non-JSON)", snap.uncleanSummary())
	rsnap := reads.snapshot()
	cc.addf("reads during the faults (lists of 100 rows)", "%d: %d ok; clean errors: %s; unclean: %s; p50 / p99 %s / %s",
		rsnap.requests, rsnap.ok, rsnap.cleanSummary(), rsnap.uncleanSummary(),
		percentile(rsnap.latencies, 50).Round(time.Millisecond), percentile(rsnap.latencies, 99).Round(time.Millisecond))
	cc.add("causes of the 500 answers to adds and reads (workers' logs)", summary(c.failedRequestCauses()))
	cc.addf("client latency p50 / p99 / max", "%s / %s / %s",
		percentile(snap.latencies, 50).Round(time.Millisecond), percentile(snap.latencies, 99).Round(time.Millisecond), percentile(snap.latencies, 100).Round(time.Millisecond))
	cc.addf("object-store requests / injected faults / throttled", "%d / %d / %d", requests, injected, throttled)
	cc.addf("rows of failed requests (may or may not be stored)", "%d", maybe)
	t.Logf("load: %+v", st)

	for _, p := range append(c.procsOf(), m.proc) {
		if p.exited() {
			t.Errorf("%s exited during the faults: %v\n%s", p.name, p.err, p.tail(20))
		}
	}
	if rsnap.unclean() > 0 {
		t.Errorf("%d reads were not answered cleanly: %s; e.g. %s", rsnap.unclean(), rsnap.uncleanSummary(), strings.Join(rsnap.examples, " | "))
	}
	if snap.unclean() > 0 {
		t.Errorf("%d answers were not clean: %s; e.g. %s", snap.unclean(), snap.uncleanSummary(), strings.Join(snap.examples, " | "))
	}
	if injected == 0 || snap.ok == 0 || snap.requests-snap.ok == 0 {
		t.Errorf("the campaign measured nothing: %d faults injected, %d of %d requests acknowledged", injected, snap.ok, snap.requests)
	}

	// A client retries what failed. The retry goes to another worker than the
	// failed request, as behind a load balancer: a row that the failed request did
	// store (the write landed, the answer was lost) then exists in two shards, and
	// must still be read once.
	failedMu.Lock()
	retry := slices.Clone(failed)
	failedMu.Unlock()
	retried, attempts := c.resend(t, hc, retry, "faults", l)
	cc.addf("failed requests retried after the faults (to another worker)", "%d batches, %d rows, %d attempts", len(retry), retried, attempts)

	var lost, dup, unknown int
	drained := c.awaitDrained(m, l, map[loadgen.Kind]string{loadgen.KindRollout: rollouts, loadgen.KindGeneric: events}, 3*time.Minute,
		func(n rowCounts) { lost, dup, unknown = n.lost, n.dup, n.unknown })
	cc.addf("lost / duplicated / never-sent rows", "%d / %d / %d", lost, dup, unknown)
	if drained {
		cc.add("drain time (faults off to every row merged, exactly once on every worker)", time.Since(faultsOff).Round(time.Second))
	} else {
		cc.add("drain time (faults off to every row merged, exactly once on every worker)", "not drained within 3m")
		t.Errorf("the cluster did not drain within 3m of the faults going off")
	}
	if lost+dup+unknown > 0 {
		t.Errorf("%d acknowledged rows lost, %d duplicated, %d never sent", lost, dup, unknown)
	}
	mergesDone, mergesFailed := 0, 0
	for _, tk := range c.tasksNow() {
		if tk.Kind != "merge_wal" || tk.FinishedAt.Before(faultsOn) || tk.FinishedAt.After(faultsOff) {
			continue
		}
		switch tk.State {
		case "done":
			mergesDone++
		case "failed":
			mergesFailed++
		}
	}
	cc.addf("merge_wal tasks finished during the faults: done / failed", "%d / %d", mergesDone, mergesFailed)
}

// TestChaosStuckWorkerMergeIsBoundedAndNamed makes one worker's merges of one
// store hang (its fragment uploads never answer) while clients write to that
// store and another. With a worker's merge bounded at 5s (TASK_TIMEOUT 30s), the stuck target's
// merge_wal tasks must fail within the timeout with an error naming the worker,
// the other store's merges must keep succeeding and reaching its base table, and
// once the store answers again the stuck target merges. The guarded failure: one
// hung worker call holding a master's merge slot (and the target) forever.
func TestChaosStuckWorkerMergeIsBoundedAndNamed(t *testing.T) {
	cc := startChaosReport(t, "stuck worker")
	const workerTimeout = 5 * time.Second
	hangFor := chaosDuration(t, "TIDEMARK_CHAOS_HANG", 30*time.Second)
	c := newCluster(t, map[string]string{"FLUSH_INTERVAL": "500ms"}, map[string]string{
		"MERGE_WAL_MIN_GENERATIONS": "1",
		"TASK_TIMEOUT":              (6 * workerTimeout).String(), // a worker's merge: a sixth
	})
	m := c.startMaster("m1", nil)
	c.startWorker("w1")
	stuckFaults := filepath.Join(c.dir, "faults-w2.json")
	c.startChaosWorker("w2", stuckFaults)

	const stuck, free = "stuck_rollouts", "free_events"
	stuckTarget, freeTarget := target(loadgen.KindRollout, stuck), target(loadgen.KindGeneric, free)
	l := newLedger()
	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		if _, err := loadgen.Run(ctx, loadgen.Config{
			Workers: c.workerURLs(), Rate: 100, Batch: 10, Concurrency: 2,
			RolloutStore: stuck, GenericStore: free, RunID: "stuck", OnBatch: l.record,
		}); err != nil {
			t.Errorf("load: %v", err)
		}
	}()
	testwait.ForEvery(c.t, time.Minute, poll, "both targets have been merged once", func() (bool, string) {
		st := c.stats(m)
		return st[stuckTarget].RowCount > 0 && st[freeTarget].RowCount > 0, fmt.Sprint(st)
	})

	// Only w2's uploads of the stuck store's base fragments hang: its appends to
	// the WAL (entries, generations) answer, so clients keep being served.
	rule, _ := json.Marshal(chaos.Spec{Rules: []chaos.RuleSpec{{
		Ops: []objstore.Op{objstore.OpPut}, KeyPrefix: "rollout/" + stuck + "@", KeyContains: "/data/", Hang: true,
	}}})
	writeFaults(t, stuckFaults, string(rule))
	hangStart := time.Now()
	freeBefore := c.stats(m)[freeTarget]
	cc.addf("hang", "w2's puts under rollout/%s/data/ never answer (until the call's context ends), for %s", stuck, hangFor)
	cc.add("worker timeout (TASK_TIMEOUT / 6)", workerTimeout)

	var failedTask task
	testwait.ForEvery(c.t, workerTimeout+60*time.Second, poll, "a merge_wal of "+stuckTarget+" fails naming w2", func() (bool, string) {
		for _, tk := range c.tasksNow() {
			if tk.Kind == "merge_wal" && tk.Target == stuckTarget && tk.State == "failed" && tk.StartedAt.After(hangStart) {
				failedTask = tk
				return true, ""
			}
		}
		return false, "no failed task yet"
	})
	took := failedTask.FinishedAt.Sub(failedTask.StartedAt)
	cc.add("task error", failedTask.Error)
	cc.add("stuck task ran for", took.Round(100*time.Millisecond))
	if !strings.Contains(failedTask.Error, "worker w2 (") || !strings.Contains(failedTask.Error, "within the worker timeout of 5s") {
		t.Errorf("the stuck task's error does not name worker w2 and say it ran out of the worker timeout: %q", failedTask.Error)
	}
	if took > workerTimeout+10*time.Second {
		t.Errorf("the stuck task ran %s, far beyond the %s worker timeout", took, workerTimeout)
	}
	// The operator's view (master HTTP API) says the same.
	code, body, err := httpGet("http://" + m.httpAddr + "/api/v1/tasks/" + failedTask.ID)
	if err != nil || code != http.StatusOK || !strings.Contains(string(body), "worker w2 (") {
		t.Errorf("GET /api/v1/tasks/%s = %d %s %v; want the record naming w2", failedTask.ID, code, body, err)
	}

	if rest := hangFor - time.Since(hangStart); rest > 0 {
		time.Sleep(rest)
	}
	// The worker side is bounded too: the master's deadline reaches w2's merge
	// through gRPC, so the hung upload is abandoned instead of holding the
	// target's merge on w2 until the object-store timeout.
	var ended []string
	for _, d := range c.workers["w2"].mergeFailures(stuckTarget) {
		took, err := time.ParseDuration(d)
		if err != nil || took > workerTimeout+5*time.Second {
			t.Errorf("w2's merge of %s ended after %s, long after the master's %s timeout", stuckTarget, d, workerTimeout)
		}
		ended = append(ended, took.Round(10*time.Millisecond).String())
	}
	cc.add("w2's stuck merges ended after (its log)", strings.Join(ended, ", "))
	if len(ended) == 0 {
		t.Errorf("w2 logged no failed merge of %s", stuckTarget)
	}
	freeDone, stuckFailed, stuckDone := 0, 0, 0
	for _, tk := range c.tasksNow() {
		if tk.Kind != "merge_wal" || tk.StartedAt.Before(hangStart) {
			continue
		}
		switch {
		case tk.Target == freeTarget && tk.State == "done":
			freeDone++
		case tk.Target == stuckTarget && tk.State == "failed":
			stuckFailed++
		case tk.Target == stuckTarget && tk.State == "done":
			stuckDone++
		}
	}
	freeAfter := c.stats(m)[freeTarget]
	cc.addf("during the hang", "%s: %d merges done, base rows %d -> %d; %s: %d merges failed, %d done",
		freeTarget, freeDone, freeBefore.RowCount, freeAfter.RowCount, stuckTarget, stuckFailed, stuckDone)
	if freeDone == 0 || freeAfter.RowCount <= freeBefore.RowCount {
		t.Errorf("%s was not merged during the hang: %d merges done, base rows %d -> %d", freeTarget, freeDone, freeBefore.RowCount, freeAfter.RowCount)
	}

	writeFaults(t, stuckFaults, "")
	healed := time.Now()
	stopLoad()
	<-loadDone
	c.awaitMergedExactlyOnce(m, l, loadgen.KindRollout, stuck, 2*time.Minute)
	cc.add("stuck target merged after the hang ended in", time.Since(healed).Round(time.Second))
	c.awaitMergedExactlyOnce(m, l, loadgen.KindGeneric, free, time.Minute)
	acked, _ := l.counts()
	cc.addf("rows", "%d acknowledged, each read exactly once through both workers after the hang", acked)
}

// startChaosWorker starts worker id with its bucket under the faults file path.
func (c *cluster) startChaosWorker(id, faultsPath string) *workerProc {
	c.t.Helper()
	env := map[string]string{}
	for k, v := range c.workerEnv {
		env[k] = v
	}
	saved := c.workerEnv
	env[chaos.FaultsFileEnv] = faultsPath
	c.workerEnv = env
	defer func() { c.workerEnv = saved }()
	return c.startWorker(id)
}

// mergeFailures returns the durations w logged for its failed merges of target.
func (w *workerProc) mergeFailures(target string) []string {
	data, _ := os.ReadFile(w.logPath)
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		var rec struct {
			Msg, Target, Duration string
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "merge failed" && rec.Target == target {
			out = append(out, rec.Duration)
		}
	}
	return out
}

// procsOf returns the cluster's worker processes.
func (c *cluster) procsOf() []*proc {
	var out []*proc
	for _, id := range sortedIDs(c.workers) {
		out = append(out, c.workers[id].proc)
	}
	return out
}

// resend re-sends each failed batch of run runID (same ids, rows regenerated) to
// the worker after the one that failed it, until it is acknowledged, and records
// the rows as acknowledged. It returns the rows resent and the attempts made.
func (c *cluster) resend(t *testing.T, hc *http.Client, batches []loadgen.Batch, runID string, l *ledger) (rows, attempts int) {
	t.Helper()
	urls := c.workerURLs()
	for i, b := range batches {
		var raw []json.RawMessage
		for _, id := range b.IDs {
			var n int64
			if _, err := fmt.Sscanf(strings.TrimPrefix(id, runID+"-"), "%d", &n); err != nil {
				t.Fatalf("row id %q is not %s-<n>", id, runID)
			}
			if b.Kind == loadgen.KindRollout {
				raw = append(raw, loadgen.RolloutRecord(runID, n, time.Now()))
			} else {
				raw = append(raw, loadgen.GenericRow(runID, n, time.Now()))
			}
		}
		next := urls[(slices.Index(urls, b.Worker)+1)%len(urls)]
		wc := dataClient(next, hc)
		for try := 1; ; try++ {
			attempts++
			_, err := wc.AddRows(context.Background(), dataKind(b.Kind), b.Store, raw, client.AddOptions{})
			if err == nil {
				break
			}
			if try == 10 {
				t.Fatalf("retry of failed batch %d (%s %s) through %s: %v after %d attempts", i, b.Kind, b.Store, next, err, try)
			}
			time.Sleep(500 * time.Millisecond)
		}
		l.record(loadgen.Batch{Worker: next, Kind: b.Kind, Store: b.Store, IDs: b.IDs})
		rows += len(b.IDs)
	}
	return rows, attempts
}

// failedRequestCauses counts the data API requests the workers answered with a
// 500 (logged as "data API request failed") by cause: an error the store was made
// to return, a throttled request (which should have been a 503), or anything else.
func (c *cluster) failedRequestCauses() map[string]int {
	causes := map[string]int{}
	for _, p := range c.procsOf() {
		data, err := os.ReadFile(p.logPath)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.Contains(line, `"msg":"data API request failed"`) {
				continue
			}
			switch {
			case strings.Contains(line, objstore.ErrThrottled.Error()):
				causes["throttled store request"]++
			case strings.Contains(line, objstore.ErrInjected.Error()):
				causes["injected store error"]++
			default:
				causes["other"]++
			}
		}
	}
	return causes
}

// faultStats sums the counters the processes' fault hooks wrote beside their
// faults files.
func faultStats(t *testing.T, paths []string) (injected, throttled, requests int64) {
	t.Helper()
	time.Sleep(500 * time.Millisecond) // a poll after the last request
	for _, p := range paths {
		data, err := os.ReadFile(p + chaos.StatsSuffix)
		if err != nil {
			t.Errorf("fault counters of %s: %v", p, err)
			continue
		}
		var st chaos.Stats
		if err := json.Unmarshal(data, &st); err != nil {
			t.Errorf("fault counters %s: %v", p+chaos.StatsSuffix, err)
			continue
		}
		injected += st.Injected
		throttled += st.Throttled
		requests += st.Requests
	}
	return injected, throttled, requests
}

// awaitDrained waits until every store has no pending generation, as many base
// rows as the workers list, and every worker lists each acknowledged row exactly
// once; report gets the row counts of each poll (the worst over workers and
// stores). It returns whether that happened within timeout.
func (c *cluster) awaitDrained(m *masterProc, l *ledger, stores map[loadgen.Kind]string, timeout time.Duration, report func(rowCounts)) bool {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		var worst rowCounts
		ok := true
		stats := c.stats(m)
		for kind, store := range stores {
			l.mu.Lock()
			acked, maybe := l.acked[kind], l.maybe[kind]
			l.mu.Unlock()
			listed := -1
			for _, id := range sortedIDs(c.workers) {
				ids, err := listIDs(c.workers[id].url(), kind, store)
				if err != nil {
					ok, last = false, fmt.Sprintf("%s: %v", id, err)
					continue
				}
				n := countRows(ids, acked, maybe)
				worst.lost, worst.dup, worst.unknown = max(worst.lost, n.lost), max(worst.dup, n.dup), max(worst.unknown, n.unknown)
				if n.lost+n.dup+n.unknown > 0 || (listed >= 0 && listed != len(ids)) {
					ok, last = false, fmt.Sprintf("%s %s: %+v, %d listed", id, store, n, len(ids))
				}
				listed = len(ids)
			}
			row := stats[target(kind, store)]
			if row.PendingWALGenerations != 0 || row.RowCount != int64(listed) {
				ok, last = false, fmt.Sprintf("%s: %d base rows, %d pending generations, %d listed", store, row.RowCount, row.PendingWALGenerations, listed)
			}
		}
		report(worst)
		if ok {
			return true
		}
		time.Sleep(time.Second)
	}
	c.t.Logf("not drained: %s", last)
	return false
}

// answerLog classifies every answer the clients got.
type answerLog struct {
	mu        sync.Mutex
	requests  int
	ok        int
	clean     map[string]int // "503 UNAVAILABLE" -> count
	bad       map[string]int // "timeout", "transport error", "non-JSON 502" -> count
	examples  []string
	latencies []time.Duration
}

func newAnswerLog() *answerLog {
	return &answerLog{clean: map[string]int{}, bad: map[string]int{}}
}

func (a *answerLog) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests, a.ok = 0, 0
	a.clean, a.bad, a.examples, a.latencies = map[string]int{}, map[string]int{}, nil, nil
}

func (a *answerLog) add(took time.Duration, ok bool, clean, bad, example string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests++
	a.latencies = append(a.latencies, took)
	switch {
	case ok:
		a.ok++
	case clean != "":
		a.clean[clean]++
	default:
		a.bad[bad]++
		if len(a.examples) < 3 {
			a.examples = append(a.examples, example)
		}
	}
}

type answerSnapshot struct {
	requests, ok int
	clean, bad   map[string]int
	examples     []string
	latencies    []time.Duration
}

func (a *answerLog) snapshot() answerSnapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	return answerSnapshot{
		requests: a.requests, ok: a.ok, clean: maps.Clone(a.clean), bad: maps.Clone(a.bad),
		examples: slices.Clone(a.examples), latencies: slices.Clone(a.latencies),
	}
}

func (s answerSnapshot) unclean() int {
	n := 0
	for _, v := range s.bad {
		n += v
	}
	return n
}

func summary(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range sortedIDs(m) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func (s answerSnapshot) cleanSummary() string   { return summary(s.clean) }
func (s answerSnapshot) uncleanSummary() string { return summary(s.bad) }

// classifyingTransport records how every request ended: a success, a clean error
// (status >= 400 with the {"error":{"code","message"}} body), or not clean (a
// transport error, a timeout, an error answer without the JSON body).
type classifyingTransport struct {
	base http.RoundTripper
	log  *answerLog
}

func (ct *classifyingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	what := req.Method + " " + req.URL.Path
	resp, err := ct.base.RoundTrip(req)
	if err != nil {
		kind := "transport error"
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			kind = "no answer within the client timeout"
		}
		ct.log.add(time.Since(start), false, "", kind, fmt.Sprintf("%s: %v", what, err))
		return nil, err
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	took := time.Since(start)
	switch {
	case rerr != nil:
		ct.log.add(took, false, "", "body cut off", fmt.Sprintf("%s: %d, body: %v", what, resp.StatusCode, rerr))
	case resp.StatusCode < 400:
		ct.log.add(took, true, "", "", "")
	default:
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error.Code != "" && e.Error.Message != "" {
			ct.log.add(took, false, fmt.Sprintf("%d %s", resp.StatusCode, e.Error.Code), "", "")
		} else {
			ct.log.add(took, false, "", fmt.Sprintf("%d without the JSON error body", resp.StatusCode), fmt.Sprintf("%s: %d %q", what, resp.StatusCode, body))
		}
	}
	return resp, nil
}
