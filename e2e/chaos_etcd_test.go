//go:build chaos

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tidemark-io/tidemark/pkg/client"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/testutil/testwait"
	"github.com/tidemark-io/tidemark/tools/loadgen"
)

// TestChaosEtcdOutageKeepsDataServedAndSchedulingResumes is the etcd outage
// campaign: under continuous adds and reads, etcd stops (SIGINT) for 30 s
// (TIDEMARK_CHAOS_ETCD_OUTAGE) and starts again on the same address and data.
// The data path does not depend on etcd, so adds and reads on every worker keep
// succeeding at about their usual latency; the master and the workers keep
// running; the master pauses scheduling without losing the tasks it had queued or
// running; and once etcd is back, without any help: the workers' registrations
// return, the master schedules again (a merge_wal task succeeds), every task of
// before the outage finishes, and every acknowledged row is merged exactly once.
func TestChaosEtcdOutageKeepsDataServedAndSchedulingResumes(t *testing.T) {
	cc := startChaosReport(t, "etcd outage")
	outage := chaosDuration(t, "TIDEMARK_CHAOS_ETCD_OUTAGE", 30*time.Second)
	c := newCluster(t, map[string]string{"FLUSH_INTERVAL": "500ms"}, map[string]string{"MERGE_WAL_MIN_GENERATIONS": "1"})
	keepChaosLogs(t, c)
	m := c.startMaster("m1", nil)
	ids := []string{"w1", "w2", "w3"}
	for _, id := range ids {
		c.startWorker(id)
	}

	// Idle stores with one pending generation each: their merges are enqueued
	// right before the outage, so that it finds tasks queued and running.
	const idle = 6
	for i := range idle {
		st, err := loadgen.Run(context.Background(), loadgen.Config{
			Workers: c.workerURLs()[i%3 : i%3+1], MaxRows: 10, Batch: 10,
			RolloutStore: fmt.Sprintf("chaos_etcd_idle%d", i), RunID: fmt.Sprintf("idle%d", i), Flush: true,
		})
		if err != nil || st.Failed > 0 {
			t.Fatalf("idle store %d: %+v, %v", i, st, err)
		}
	}

	const rollouts, events = "chaos_etcd_rollouts", "chaos_etcd_events"
	l := newLedger()
	probes := &probeLog{}
	ctx, stopTraffic := context.WithCancel(context.Background())
	defer stopTraffic()
	loadDone := make(chan loadgen.Stats, 1)
	go func() {
		st, err := loadgen.Run(ctx, loadgen.Config{
			Workers: c.workerURLs(), Rate: 100, Batch: 10, Concurrency: 3,
			RolloutStore: rollouts, GenericStore: events, RunID: "etcd", OnBatch: l.record,
			Client: &http.Client{Timeout: time.Minute, Transport: probes.transport("add", http.DefaultTransport)},
		})
		if err != nil {
			t.Errorf("load: %v", err)
		}
		loadDone <- st
	}()
	readsDone := make(chan struct{})
	go func() { defer close(readsDone); c.readProbes(ctx, probes, l, rollouts) }()

	testwait.ForEvery(c.t, 30*time.Second, poll, "the master merged under load", func() (bool, string) {
		return c.tasksIn("done") > 0, ""
	})
	time.Sleep(5 * time.Second) // the "before" window of the probes

	// Enqueue the idle stores' merges directly in etcd (as a sweep of another
	// replica would), wait for the master to run one, and stop etcd at once.
	ts := tasks.New(c.client, c.prefix)
	for i := range idle {
		if _, _, err := ts.Enqueue(context.Background(), tasks.KindMergeWAL, registry.MustParseTarget(fmt.Sprintf("chaos_etcd_idle%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	testwait.ForEvery(c.t, 10*time.Second, poll, "a merge task runs", func() (bool, string) { return c.runningTasks() > 0, "" })
	before := c.liveTasks()
	oldLeases := c.workerLeases()
	stopAt := time.Now()
	if err := c.etcd.stop(syscall.SIGINT, 20*time.Second); err != nil {
		t.Fatalf("stop etcd: %v", err)
	}
	t.Logf("etcd stopped in %s", time.Since(stopAt).Round(10*time.Millisecond))
	t.Logf("etcd stopped with %d live tasks (%s); outage of %s", len(before), strings.Join(taskStates(before), ", "), outage)
	time.Sleep(outage - time.Since(stopAt))
	for _, p := range c.liveProcs() {
		if p.exited() {
			t.Errorf("%s exited during the etcd outage: %v\n%s", p.name, p.err, p.tail(20))
		}
	}
	restartAt := time.Now()
	c.restartEtcd()
	backAt := time.Now()
	t.Logf("etcd restarted in %s", backAt.Sub(restartAt).Round(10*time.Millisecond))
	t.Logf("etcd back after %s", backAt.Sub(stopAt).Round(100*time.Millisecond))

	// Recovery, without help.
	// Each worker's lease expired during the outage (its keepalive got no answer
	// for a TTL): registered again means a record under a new lease. The old
	// records outlive etcd's restart by a TTL, which resets on a restart.
	var registered time.Duration
	testwait.ForEvery(c.t, time.Minute, poll, "every worker is registered again under a new lease", func() (bool, string) {
		now := c.workerLeases()
		for _, id := range ids {
			if l, ok := now[id]; !ok || l == oldLeases[id] {
				return false, fmt.Sprintf("%s: lease %x (before the outage %x)", id, l, oldLeases[id])
			}
		}
		return true, ""
	})
	// When, by the workers' own logs: polling adds its interval.
	// A worker's attempt blocked on etcd may succeed before the test's probe
	// does: count from the restart of the etcd process.
	for _, id := range ids {
		at := c.firstLogAfter(id, "worker registered", restartAt)
		if at.IsZero() {
			t.Errorf("%s logged no registration after etcd restarted", id)
		}
		registered = max(registered, at.Sub(restartAt))
	}
	var firstTask time.Duration
	testwait.ForEvery(c.t, time.Minute, poll, "a merge_wal task started after the outage succeeds", func() (bool, string) {
		for _, tk := range c.tasksNow() {
			if tk.Kind == "merge_wal" && tk.State == "done" && tk.StartedAt.After(backAt) {
				firstTask = tk.FinishedAt.Sub(backAt)
				return true, ""
			}
		}
		return false, ""
	})
	testwait.ForEvery(c.t, time.Minute, poll, "every task of before the outage finished", func() (bool, string) {
		now := map[string]task{}
		for _, tk := range c.tasksNow() {
			now[tk.ID] = tk
		}
		for _, b := range before {
			tk, ok := now[b.ID]
			if !ok {
				t.Fatalf("task %s (%s %s), %s at the outage, is gone from etcd", b.ID, b.Kind, b.Target, b.State)
			}
			if tk.State != "done" {
				return false, fmt.Sprintf("task %s (%s) is %s: %s", tk.ID, tk.Target, tk.State, tk.Error)
			}
		}
		return true, ""
	})
	recovered := time.Since(backAt) // the "after" window
	var allDone time.Time
	for _, b := range before {
		allDone = maxTime(allDone, c.taskRecord(b.ID).FinishedAt)
	}
	time.Sleep(3 * time.Second) // the "after" window
	stopTraffic()
	st := <-loadDone
	<-readsDone

	windows := []struct {
		name       string
		from, till time.Time
	}{{"before", stopAt.Add(-5 * time.Second), stopAt}, {"during", stopAt, backAt}, {"after", backAt, backAt.Add(recovered)}}
	for _, op := range []string{"add", "read"} {
		for _, w := range windows {
			s := probes.summary(op, w.from, w.till)
			cc.add(fmt.Sprintf("%ss %s the outage", op, w.name), s)
			if w.name == "during" && (s.failed > 0 || s.ok == 0) {
				t.Errorf("%ss during the etcd outage: %s, want successes and no error", op, s)
			}
		}
	}
	for at := stopAt.Add(-5 * time.Second); at.Before(backAt.Add(recovered)); at = at.Add(5 * time.Second) {
		t.Logf("%+6.0fs: adds %s; reads %s", at.Sub(stopAt).Seconds(), probes.summary("add", at, at.Add(5*time.Second)),
			probes.summary("read", at, at.Add(5*time.Second)))
	}
	acked, maybe := l.counts()
	cc.add("outage", backAt.Sub(stopAt).Round(100*time.Millisecond))
	cc.add("tasks live at the outage (all finished after it)", fmt.Sprintf("%d: %s", len(before), strings.Join(taskStates(before), ", ")))
	cc.add("etcd restart: process start to answering", backAt.Sub(restartAt).Round(100*time.Millisecond))
	cc.add("workers registered again, after the etcd process restarted", registered.Round(100*time.Millisecond))
	cc.add("first merge_wal task started after etcd is back done after", firstTask.Round(100*time.Millisecond))
	cc.add("every task of before the outage done after", allDone.Sub(backAt).Round(100*time.Millisecond))
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		cc.add("machine load average (1, 5, 15 min) at the end", strings.Join(strings.Fields(string(load))[:3], ", "))
	}
	cc.add("rows acknowledged / in failed adds", fmt.Sprintf("%d / %d (%d requests)", acked, maybe, st.Requests))

	for _, p := range c.liveProcs() {
		if p.exited() {
			t.Errorf("%s exited: %v\n%s", p.name, p.err, p.tail(20))
		}
	}
	c.awaitMergedExactlyOnce(m, l, loadgen.KindRollout, rollouts, time.Minute)
	c.awaitMergedExactlyOnce(m, l, loadgen.KindGeneric, events, time.Minute)
}

// keepChaosLogs copies every process's log of c into the directory
// TIDEMARK_CHAOS_KEEP_LOGS names, when that is set, as the test ends (before the
// cluster's shutdown, the last thing registered before it): the timeline of a
// campaign is in them.
func keepChaosLogs(t *testing.T, c *cluster) {
	dst := os.Getenv("TIDEMARK_CHAOS_KEEP_LOGS")
	if dst == "" {
		return
	}
	t.Cleanup(func() {
		logs, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
		dir := filepath.Join(dst, t.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Errorf("keep logs: %v", err)
			return
		}
		for _, l := range logs {
			data, err := os.ReadFile(l)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, filepath.Base(l)), data, 0o644)
			}
			if err != nil {
				t.Errorf("keep logs: %v", err)
			}
		}
		t.Logf("logs kept in %s", dir)
	})
}

// restartEtcd starts etcd again (after it was stopped) with the arguments, data
// directory, address and log of the first start, and waits until it answers. It
// asks through a new client at each try: the cluster's client reconnects on its
// own gRPC backoff, which would measure the client, not etcd.
func (c *cluster) restartEtcd() {
	c.t.Helper()
	if !c.etcd.exited() {
		c.t.Fatal("restartEtcd: etcd is still running")
	}
	c.etcd = startProc(c.t, c.dir, "etcd", c.bin.master, c.etcd.cmd.Args[1:], nil)
	testwait.ForEvery(c.t, 30*time.Second, poll, "etcd answers again", func() (bool, string) {
		if c.etcd.exited() {
			c.t.Fatalf("master dev (etcd) exited: %v\n%s", c.etcd.err, c.etcd.tail(20))
		}
		probe, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcdURL}, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			return false, err.Error()
		}
		defer probe.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = probe.Get(ctx, "probe")
		return err == nil, fmt.Sprint(err)
	})
	// The cluster's client too would find etcd late, on its backoff: what the
	// test reads from now on must not wait for it.
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	old := c.client
	c.client = client
	_ = old.Close()
}

// firstLogAfter is the time of the first line of process name's log with msg
// after from (zero if none).
func (c *cluster) firstLogAfter(name, msg string, from time.Time) time.Time {
	data, err := os.ReadFile(filepath.Join(c.dir, name+".log"))
	if err != nil {
		c.t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		var l struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == msg && l.Time.After(from) {
			return l.Time
		}
	}
	return time.Time{}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// workerLeases reads the lease of every worker record (P/workers/<id>).
func (c *cluster) workerLeases() map[string]int64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := c.client.Get(ctx, c.prefix+"/workers/", clientv3.WithPrefix())
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), c.prefix+"/workers/")] = kv.Lease
	}
	return out
}

// liveProcs are the current masters and workers.
func (c *cluster) liveProcs() []*proc {
	var out []*proc
	for _, id := range sortedIDs(c.masters) {
		out = append(out, c.masters[id].proc)
	}
	for _, id := range sortedIDs(c.workers) {
		out = append(out, c.workers[id].proc)
	}
	return out
}

// liveTasks are the queued and running tasks.
func (c *cluster) liveTasks() []task {
	var out []task
	for _, tk := range c.tasksNow() {
		if tk.State == "queued" || tk.State == "running" {
			out = append(out, tk)
		}
	}
	return out
}

func taskStates(list []task) []string {
	out := make([]string, len(list))
	for i, tk := range list {
		out[i] = tk.Target + " " + tk.State
	}
	return out
}

// readProbes reads through the workers in turn until ctx ends: a get of a
// random acknowledged rollout id, or a page of the list, every 50 ms.
func (c *cluster) readProbes(ctx context.Context, probes *probeLog, l *ledger, store string) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: probes.transport("read", http.DefaultTransport)}
	var workers []*client.Client
	for _, u := range c.workerURLs() {
		workers = append(workers, dataClient(u, hc))
	}
	for i := 0; ctx.Err() == nil; i++ {
		wc := workers[i%len(workers)]
		if id := l.anyAcked(loadgen.KindRollout); id != "" && i%2 == 0 {
			_, _ = wc.GetRow(ctx, client.Rollouts, store, id, client.ReadOptions{})
		} else {
			_, _ = wc.ListRows(ctx, client.Rollouts, store, client.ListOptions{Limit: 20})
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// anyAcked returns an acknowledged id of kind, "" when there is none yet.
func (l *ledger) anyAcked(kind loadgen.Kind) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := rand.IntN(len(l.acked[kind]) + 1)
	for id := range l.acked[kind] {
		if n == 0 {
			return id
		}
		n--
	}
	return ""
}

// probeLog records every request's start, latency and outcome (2xx or not).
type probeLog struct {
	mu   sync.Mutex
	list []probeResult
}

type probeResult struct {
	op   string
	at   time.Time
	took time.Duration
	ok   bool
}

func (p *probeLog) transport(op string, next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		t0 := time.Now()
		resp, err := next.RoundTrip(r)
		p.mu.Lock()
		p.list = append(p.list, probeResult{op: op, at: t0, took: time.Since(t0), ok: err == nil && resp.StatusCode < 300})
		p.mu.Unlock()
		return resp, err
	})
}

// probeSummary sums up the requests of one kind in a window.
type probeSummary struct {
	ok, failed int
	p50, p99   time.Duration
}

func (s probeSummary) String() string {
	return fmt.Sprintf("%d ok, %d errors, latency p50 %s, p99 %s", s.ok, s.failed,
		s.p50.Round(100*time.Microsecond), s.p99.Round(100*time.Microsecond))
}

// summary sums up op's requests started in [from, till).
func (p *probeLog) summary(op string, from, till time.Time) probeSummary {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ok, failed int
	var took []time.Duration
	for _, r := range p.list {
		if r.op != op || r.at.Before(from) || !r.at.Before(till) {
			continue
		}
		if r.ok {
			ok++
		} else {
			failed++
		}
		took = append(took, r.took)
	}
	return probeSummary{ok: ok, failed: failed, p50: percentile(took, 50), p99: percentile(took, 99)}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
