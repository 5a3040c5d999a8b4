package fanout

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// countingWorker is a WorkerService that records calls and how many ran at once.
type countingWorker struct {
	tidemarkv1.UnimplementedWorkerServiceServer
	name     string
	inFlight *atomic.Int32
	maxSeen  *atomic.Int32
	calls    atomic.Int32
	tokens   chan int64
	fail     error
	// merged, if set, is how many generations each merge reports (else 2).
	merged *atomic.Int64
	// commits, when set, records the order of merges across workers.
	commits *orderLog
}

// orderLog records names in call order, safely across goroutines.
type orderLog struct {
	mu    sync.Mutex
	names []string
}

func (o *orderLog) add(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.names = append(o.names, name)
}

func (o *orderLog) get() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.names...)
}

// raiseMax sets max to n if n is larger.
func raiseMax(max *atomic.Int32, n int32) {
	for {
		m := max.Load()
		if n <= m || max.CompareAndSwap(m, n) {
			return
		}
	}
}

func (w *countingWorker) MergeWal(ctx context.Context, r *tidemarkv1.MergeWalRequest) (*tidemarkv1.MergeWalResponse, error) {
	w.calls.Add(1)
	n := w.inFlight.Add(1)
	defer w.inFlight.Add(-1)
	for {
		m := w.maxSeen.Load()
		if n <= m || w.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	if w.tokens != nil {
		w.tokens <- r.GetFencingToken()
	}
	if w.commits != nil {
		w.commits.add(w.name)
	}
	time.Sleep(20 * time.Millisecond) // long enough that overlapping calls would overlap
	if w.fail != nil {
		return nil, w.fail
	}
	gens := int64(2)
	if w.merged != nil {
		gens = w.merged.Load()
	}
	return &tidemarkv1.MergeWalResponse{Generations: gens, Rows: 5 * gens, Reclaimed: gens, InstanceId: w.name}, nil
}

func startWorker(t *testing.T, w *countingWorker) Worker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	tidemarkv1.RegisterWorkerServiceServer(gs, w)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return Worker{InstanceID: w.name, GRPCAddr: ln.Addr().String()}
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func claimFor(target string, token int64) *tasks.Claim {
	return &tasks.Claim{Task: tasks.Task{ID: "t1", Kind: tasks.KindMergeWAL, Target: tgt(target)}, FencingToken: token}
}

// tgt is the target of a test's text, which must be valid.
func tgt(text string) registry.Target {
	target, err := registry.ParseTarget(text)
	if err != nil {
		panic(err)
	}
	return target
}

// trio is the world of the tests of one misbehaving worker: counting workers w0
// and w2 around the middle one under test, all sharing the in-flight counters (so
// overlapping commits across them show), and one caller.
type trio struct {
	inFlight, maxSeen atomic.Int32
	w0, w2            *countingWorker
	caller            *GRPCCaller
}

func newTrio(t *testing.T, cfg GRPCCallerConfig) *trio {
	tr := &trio{caller: NewGRPCCaller(cfg)}
	t.Cleanup(func() { tr.caller.Close() })
	tr.w0, tr.w2 = tr.worker("w0"), tr.worker("w2")
	return tr
}

// worker is a counting worker sharing the trio's counters, not yet serving.
func (tr *trio) worker(name string) *countingWorker {
	return &countingWorker{name: name, inFlight: &tr.inFlight, maxSeen: &tr.maxSeen}
}

// run fans claimFor("s", 7) out over w0, middle and w2 with f's settings.
func (tr *trio) run(t *testing.T, middle Worker, cfg Config) (tasks.Report, error) {
	cfg.Discovery = StaticDiscovery{startWorker(t, tr.w0), middle, startWorker(t, tr.w2)}
	cfg.Caller = tr.caller
	return New(cfg).Run(context.Background(), claimFor("s", 7))
}

// serve runs srv as the worker named name.
func serve(t *testing.T, name string, srv tidemarkv1.WorkerServiceServer) Worker {
	return Worker{InstanceID: name, GRPCAddr: startWorkerService(t, srv)}
}

// The commit storm: workers merging into one base table at once. In the serial
// shape the merges must run strictly one after another, in discovery's order,
// under the claim's token.
func TestFanOutCommitsOneWorkerAfterAnother(t *testing.T) {
	var inFlight, maxSeen atomic.Int32
	commits := &orderLog{}
	var workers StaticDiscovery
	for i := 0; i < 3; i++ {
		w := &countingWorker{name: fmt.Sprint("w", i), inFlight: &inFlight, maxSeen: &maxSeen, tokens: make(chan int64, 1), commits: commits}
		workers = append(workers, startWorker(t, w))
		defer func() {
			if tok := <-w.tokens; tok != 42 {
				t.Errorf("worker %s got fencing token %d, want 42", w.name, tok)
			}
		}()
	}
	caller := NewGRPCCaller(GRPCCallerConfig{})
	defer caller.Close()
	f := New(Config{Discovery: workers, Caller: caller, Shape: Serial})
	report, err := f.Run(context.Background(), claimFor("generic:gs", 42))
	if err != nil {
		t.Fatal(err)
	}
	if report.Detail != "merged 6 generations across 3/3 workers" {
		t.Fatalf("detail %q", report.Detail)
	}
	if want := (tasks.Stats{Workers: 3, WorkersMerged: 3, GenerationsMerged: 6, RowsMerged: 30}); report.Stats != want {
		t.Fatalf("stats %+v, want %+v", report.Stats, want)
	}
	if maxSeen.Load() != 1 {
		t.Fatalf("max commits in flight %d, want 1", maxSeen.Load())
	}
	if got := fmt.Sprint(commits.get()); got != "[w0 w1 w2]" {
		t.Fatalf("merges %s, want discovery's order [w0 w1 w2]", got)
	}
}

func TestErroringWorkerStopsTheFanOutAndFailsTheTask(t *testing.T) {
	tr := newTrio(t, GRPCCallerConfig{})
	w1, w2 := tr.worker("w1"), tr.w2
	w1.fail = status.Error(codes.Internal, "disk on fire")
	_, err := tr.run(t, startWorker(t, w1), Config{})
	if err == nil || !strings.Contains(err.Error(), "worker w1") || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("got %v, want an error naming w1 and its message", err)
	}
	if w2.calls.Load() != 0 {
		t.Fatal("the fan-out went on after an error")
	}
}

func TestUnreachableWorkerIsSkippedAndNamed(t *testing.T) {
	tr := newTrio(t, GRPCCallerConfig{DialTimeout: 500 * time.Millisecond})
	w2 := tr.w2
	report, err := tr.run(t, Worker{InstanceID: "w1", GRPCAddr: deadAddr(t)}, Config{})
	if err == nil || !strings.Contains(err.Error(), "unavailable: w1") {
		t.Fatalf("got %v, want the task failed naming the unavailable w1", err)
	}
	if report.Detail != "merged 4 generations across 2/3 workers" {
		t.Fatalf("detail %q", report.Detail)
	}
	if want := (tasks.Stats{Workers: 3, WorkersMerged: 2, WorkersSkipped: 1, GenerationsMerged: 4, RowsMerged: 20}); report.Stats != want {
		t.Fatalf("stats %+v, want %+v", report.Stats, want)
	}
	if w2.calls.Load() != 1 {
		t.Fatal("the worker after the unreachable one was not called")
	}
}

// A corrupt object stops one worker's merge, and only that one: the worker answered
// (it no longer merges), and the others' shards do not depend on it. Stopping the
// fan-out there left every later worker's generations piling up behind one bad
// object. The task still fails, naming the worker and the object.
func TestACorruptObjectOnOneWorkerDoesNotStopTheFanOut(t *testing.T) {
	var inFlight, maxSeen atomic.Int32
	const key = "rollout/s/_wal/w1/gen/0a1b2c3d4e5f6a7b_gen_3.arrow"
	w0 := &countingWorker{name: "w0", inFlight: &inFlight, maxSeen: &maxSeen}
	w1 := &countingWorker{name: "w1", inFlight: &inFlight, maxSeen: &maxSeen,
		fail: status.Error(codes.DataLoss, "merge s: wal generation "+key+": corrupt WAL object: bad magic")}
	w2 := &countingWorker{name: "w2", inFlight: &inFlight, maxSeen: &maxSeen}
	workers := StaticDiscovery{startWorker(t, w0), startWorker(t, w1), startWorker(t, w2)}
	caller := NewGRPCCaller(GRPCCallerConfig{})
	defer caller.Close()
	report, err := New(Config{Discovery: workers, Caller: caller}).Run(context.Background(), claimFor("s", 7))
	if w2.calls.Load() != 1 {
		t.Fatalf("the worker after the corrupt one was called %d times, want 1", w2.calls.Load())
	}
	if err == nil || !strings.Contains(err.Error(), "worker w1") || !strings.Contains(err.Error(), key) {
		t.Fatalf("got %v, want the task failed naming w1 and %s", err, key)
	}
	if report.Detail != "merged 4 generations across 2/3 workers" {
		t.Fatalf("detail %q", report.Detail)
	}
	if report.Stats.WorkersMerged != 2 || report.Stats.WorkersFailed != 1 {
		t.Fatalf("stats %+v, want 2 workers merged and 1 failed", report.Stats)
	}
	if maxSeen.Load() != 1 {
		t.Fatalf("max in flight %d, want 1", maxSeen.Load())
	}
}

// TestConnectionsOfWorkersThatLeftAreClosed runs a task with two workers, then one
// with only the second: the first's connection is closed and dropped. Production
// failure: connections of deregistered workers (pods renamed by every deploy) were
// kept forever, each reconnecting to a dead address.
func TestConnectionsOfWorkersThatLeftAreClosed(t *testing.T) {
	var inFlight, maxSeen atomic.Int32
	w0 := startWorker(t, &countingWorker{name: "w0", inFlight: &inFlight, maxSeen: &maxSeen})
	w1 := startWorker(t, &countingWorker{name: "w1", inFlight: &inFlight, maxSeen: &maxSeen})
	caller := NewGRPCCaller(GRPCCallerConfig{})
	defer caller.Close()
	if _, err := New(Config{Discovery: StaticDiscovery{w0, w1}, Caller: caller}).Run(context.Background(), claimFor("s", 7)); err != nil {
		t.Fatal(err)
	}
	gone, err := caller.conn(w0.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Discovery: StaticDiscovery{w1}, Caller: caller}).Run(context.Background(), claimFor("s", 8)); err != nil {
		t.Fatal(err)
	}
	if s := gone.GetState(); s != connectivity.Shutdown {
		t.Fatalf("connection to the worker that left is %s, want SHUTDOWN", s)
	}
	caller.mu.Lock()
	defer caller.mu.Unlock()
	if _, ok := caller.conns[w0.GRPCAddr]; ok || len(caller.conns) != 1 {
		t.Fatalf("connections kept: %d (w0's among them: %v)", len(caller.conns), ok)
	}
}
