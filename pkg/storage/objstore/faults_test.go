package objstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/testwait"
)

func openMem(t *testing.T, opts ...Option) *Bucket {
	t.Helper()
	b, err := Open(context.Background(), "mem://", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// gateBackend holds every get until the test releases it, and counts the gets inside
// the backend at once: the concurrency a store would actually see.
type gateBackend struct {
	backend
	release chan struct{}

	mu             sync.Mutex
	inFlight, peak int
}

func (g *gateBackend) get(ctx context.Context, key string, _ int64) ([]byte, error) {
	g.mu.Lock()
	g.inFlight++
	g.peak = max(g.peak, g.inFlight)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inFlight--
		g.mu.Unlock()
	}()
	select {
	case <-g.release:
		return []byte("ok"), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (g *gateBackend) counts() (inFlight, peak int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight, g.peak
}

func newGatedBucket(t *testing.T) (*Bucket, *gateBackend) {
	t.Helper()
	g := &gateBackend{backend: openMem(t).be, release: make(chan struct{})}
	return newBucket(g, "gate://"), g
}

// eventually polls cond; a condition that never holds fails the test instead of
// hanging it. It asserts states, not durations.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, 10*time.Second, what, func() (bool, string) { return cond(), "" })
}

func TestMaxConcurrentCapsRequestsInFlight(t *testing.T) {
	gated, g := newGatedBucket(t)
	f := NewFaults(nil)
	f.SetMaxConcurrent(3, ThrottleWait)
	b := WithFaults(gated, f)

	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			if _, err := b.Get(context.Background(), fmt.Sprintf("k%d", i)); err != nil {
				t.Errorf("get: %v", err)
			}
		})
	}
	eventually(t, "3 requests are in the store and 7 wait for a slot", func() bool {
		in, _ := g.counts()
		return in == 3 && f.Waiting() == 7
	})
	close(g.release)
	wg.Wait()
	if _, peak := g.counts(); peak != 3 {
		t.Errorf("store saw %d requests at once, want the cap, 3", peak)
	}
	if got := f.PeakInFlight(); got != 3 {
		t.Errorf("PeakInFlight = %d, want 3", got)
	}
	if got := f.Requests(OpGet); got != 10 {
		t.Errorf("Requests(get) = %d, want 10", got)
	}
}

func TestRaisingMaxConcurrentLetsWaitersIn(t *testing.T) {
	gated, g := newGatedBucket(t)
	f := NewFaults(nil)
	f.SetMaxConcurrent(1, ThrottleWait)
	b := WithFaults(gated, f)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { _, _ = b.Get(context.Background(), "k") })
	}
	eventually(t, "one request runs and one waits", func() bool { in, _ := g.counts(); return in == 1 && f.Waiting() == 1 })
	f.SetMaxConcurrent(2, ThrottleWait)
	eventually(t, "the waiter gets the new slot", func() bool { in, _ := g.counts(); return in == 2 })
	close(g.release)
	wg.Wait()
}

func TestThrottleRejectFailsFastWithErrThrottled(t *testing.T) {
	gated, g := newGatedBucket(t)
	f := NewFaults(nil)
	f.SetMaxConcurrent(2, ThrottleReject)
	b := WithFaults(gated, f)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { _, _ = b.Get(context.Background(), "k") })
	}
	eventually(t, "both slots are taken", func() bool { in, _ := g.counts(); return in == 2 })
	_, err := b.Get(context.Background(), "over/the/cap")
	if !errors.Is(err, ErrThrottled) || !errors.Is(err, ErrInjected) || !strings.Contains(err.Error(), "over/the/cap") {
		t.Errorf("third Get = %v, want ErrThrottled and ErrInjected naming the key", err)
	}
	if f.Throttled() != 1 || f.Injected() != 0 {
		t.Errorf("Throttled, Injected = %d, %d; want 1, 0", f.Throttled(), f.Injected())
	}
	close(g.release)
	wg.Wait()
	if _, err := b.Get(context.Background(), "k"); err != nil {
		t.Errorf("Get with free slots = %v", err)
	}
}

func TestWaitingForASlotHonoursTheContext(t *testing.T) {
	gated, g := newGatedBucket(t)
	f := NewFaults(nil)
	f.SetMaxConcurrent(1, ThrottleWait)
	b := WithFaults(gated, f)
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = b.Get(context.Background(), "holder") })
	eventually(t, "the slot is taken", func() bool { in, _ := g.counts(); return in == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := b.Get(ctx, "waiter"); errc <- err }()
	eventually(t, "the second request waits", func() bool { return f.Waiting() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled waiter = %v, want context.Canceled", err)
	}
	if f.Waiting() != 0 {
		t.Errorf("Waiting = %d after the waiter gave up, want 0", f.Waiting())
	}
	close(g.release)
	wg.Wait()
	if f.InFlight() != 0 {
		t.Errorf("InFlight = %d after everything finished, want 0", f.InFlight())
	}
}

func TestErrorRateInjectsAtRoughlyTheRateRepeatably(t *testing.T) {
	ctx := context.Background()
	base := openMem(t)
	if err := base.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	run := func(seed uint64) (failed []int) {
		f := NewFaults(rand.NewPCG(seed, seed))
		f.SetErrorRate(0.25)
		b := WithFaults(base, f)
		for i := range 2000 {
			_, err := b.Get(ctx, "k")
			if err == nil {
				continue
			}
			if !errors.Is(err, ErrInjected) || !strings.Contains(err.Error(), "get k") {
				t.Fatalf("request %d: %v, want ErrInjected naming the key", i, err)
			}
			failed = append(failed, i)
		}
		if f.Injected() != int64(len(failed)) {
			t.Errorf("Injected = %d, saw %d failures", f.Injected(), len(failed))
		}
		return failed
	}
	a := run(42)
	if n := len(a); n < 400 || n > 600 {
		t.Errorf("%d of 2000 requests failed at rate 0.25, want about 500", n)
	}
	if b := run(42); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("the same seed injected errors into different requests")
	}
	if c := run(43); fmt.Sprint(a) == fmt.Sprint(c) {
		t.Error("different seeds injected errors into the same requests")
	}
}

func TestErrorRateCanTargetOps(t *testing.T) {
	ctx := context.Background()
	f := NewFaults(nil)
	b := WithFaults(openMem(t), f)
	f.SetErrorRate(1, OpPut)
	if err := b.Put(ctx, "k", nil); !errors.Is(err, ErrInjected) {
		t.Errorf("Put = %v, want ErrInjected", err)
	}
	if err := b.PutIfAbsent(ctx, "k", []byte("v")); err != nil {
		t.Errorf("PutIfAbsent, not targeted = %v", err)
	}
	if _, err := b.Get(ctx, "k"); err != nil {
		t.Errorf("Get, not targeted = %v", err)
	}
	// Faults change at run time: turned off, the same call succeeds.
	f.Clear()
	if err := b.Put(ctx, "k", nil); err != nil {
		t.Errorf("Put after Clear = %v", err)
	}
}

func TestLatencyDelaysRequestsAndHonoursCancellation(t *testing.T) {
	ctx := context.Background()
	f := NewFaults(nil)
	b := WithFaults(openMem(t), f)
	f.SetLatency(20*time.Millisecond, 5*time.Millisecond)
	start := time.Now()
	if _, err := b.Exists(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Errorf("request took %v, want at least the 20ms latency", d)
	}

	// A latency far longer than the test timeout: only cancellation ends these.
	f.SetLatency(time.Hour, 0)
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { _, err := b.Get(cctx, "k"); errc <- err }()
	eventually(t, "the request is in flight", func() bool { return f.InFlight() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Get during cancelled latency = %v, want context.Canceled", err)
	}
	short := WithFaults(openMem(t, WithOpTimeout(10*time.Millisecond)), f)
	if _, err := short.Get(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get past the op timeout = %v, want context.DeadlineExceeded", err)
	}
	if f.InFlight() != 0 {
		t.Errorf("InFlight = %d after cancelled requests, want 0", f.InFlight())
	}
}

func TestRulesFireTheChosenNumberOfTimes(t *testing.T) {
	ctx := context.Background()
	base := openMem(t)
	for _, k := range []string{"a/x", "b/x", "t/_versions/1.json"} {
		if err := base.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	f := NewFaults(nil)
	b := WithFaults(base, f)

	twice := f.AddRule(Rule{Ops: []Op{OpGet}, KeyPrefix: "a/", Times: 2})
	for i, wantErr := range []bool{true, true, false, false} {
		_, err := b.Get(ctx, "a/x")
		if got := errors.Is(err, ErrInjected); got != wantErr {
			t.Errorf("get a/x #%d: %v, want injected=%v", i, err, wantErr)
		}
	}
	if _, err := b.Get(ctx, "b/x"); err != nil {
		t.Errorf("get b/x (other prefix) = %v", err)
	}
	if _, err := b.Stat(ctx, "a/x"); err != nil {
		t.Errorf("stat a/x (other op) = %v", err)
	}
	if twice.Fired() != 2 {
		t.Errorf("Fired = %d, want 2", twice.Fired())
	}

	vanished := f.AddRule(Rule{KeyContains: "_versions/", Err: ErrNotFound})
	for range 3 {
		_, err := b.Get(ctx, "t/_versions/1.json")
		if !errors.Is(err, ErrNotFound) || !errors.Is(err, ErrInjected) {
			t.Errorf("get with an Err rule = %v, want ErrNotFound and ErrInjected", err)
		}
	}
	if _, err := b.List(ctx, "t/_versions/"); !errors.Is(err, ErrNotFound) {
		t.Errorf("list under a matching prefix = %v, want the rule's error", err)
	}
	if vanished.Fired() != 4 {
		t.Errorf("unlimited rule Fired = %d, want 4", vanished.Fired())
	}
	vanished.Remove()
	if _, err := b.Get(ctx, "t/_versions/1.json"); err != nil {
		t.Errorf("get after Remove = %v", err)
	}
}

// TestInjectedWriteErrorsLandBeforeOrAfterTheWrite covers the ambiguous commit: a
// put-if-absent whose response is lost has still created the object, and the retry
// then loses to itself. Commit code must recognise its own manifest.
func TestInjectedWriteErrorsLandBeforeOrAfterTheWrite(t *testing.T) {
	ctx := context.Background()
	base := openMem(t)
	f := NewFaults(rand.NewPCG(1, 1))
	b := WithFaults(base, f)

	f.AddRule(Rule{Ops: []Op{OpPutIfAbsent}, KeyPrefix: "before", Times: 1})
	if err := b.PutIfAbsent(ctx, "before", []byte("v")); !errors.Is(err, ErrInjected) {
		t.Fatalf("PutIfAbsent = %v, want ErrInjected", err)
	}
	if ok, _ := base.Exists(ctx, "before"); ok {
		t.Error("a before-write fault wrote the object")
	}

	f.AddRule(Rule{Ops: []Op{OpPutIfAbsent}, KeyPrefix: "after", Times: 1, AfterWrite: true})
	err := b.PutIfAbsent(ctx, "after", []byte("mine"))
	if !errors.Is(err, ErrInjected) || !strings.Contains(err.Error(), "after the write") {
		t.Fatalf("PutIfAbsent = %v, want an after-write ErrInjected", err)
	}
	if got, _ := base.Get(ctx, "after"); string(got) != "mine" {
		t.Errorf("after-write fault: stored %q, want the written bytes", got)
	}
	if err := b.PutIfAbsent(ctx, "after", []byte("mine")); !errors.Is(err, ErrExists) {
		t.Errorf("retry after an ambiguous commit = %v, want ErrExists", err)
	}

	f.Clear()
	f.SetErrorRate(1, OpPut)
	f.SetWritePhase(FailAfterWrite)
	if err := b.Put(ctx, "rate-after", []byte("x")); !errors.Is(err, ErrInjected) {
		t.Fatalf("Put = %v, want ErrInjected", err)
	}
	if ok, _ := base.Exists(ctx, "rate-after"); !ok {
		t.Error("FailAfterWrite: the object was not written")
	}

	f.SetWritePhase(FailBeforeOrAfterWrite)
	written := 0
	for i := range 100 {
		key := fmt.Sprintf("either/%d", i)
		if err := b.Put(ctx, key, []byte("x")); !errors.Is(err, ErrInjected) {
			t.Fatalf("Put = %v, want ErrInjected", err)
		}
		if ok, _ := base.Exists(ctx, key); ok {
			written++
		}
	}
	if written == 0 || written == 100 {
		t.Errorf("FailBeforeOrAfterWrite wrote %d of 100, want a mix", written)
	}
}

func TestRequestCountersCountEveryKind(t *testing.T) {
	ctx := context.Background()
	f := NewFaults(nil)
	b := WithFaults(openMem(t), f)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.Put(ctx, "d/k", []byte("0123456789")))
	must(b.PutIfAbsent(ctx, "d/k2", []byte("x")))
	_, err := b.Get(ctx, "d/k")
	must(err)
	_, err = b.GetRange(ctx, "d/k", 2, 3)
	must(err)
	_, err = b.Stat(ctx, "d/k")
	must(err)
	_, err = b.Exists(ctx, "missing")
	must(err)
	_, err = b.Stat(ctx, "d/k")
	must(err)
	for _, off := range []int64{0, 4, 8} { // three ranged reads
		_, err = b.GetRange(ctx, "d/k", off, 2)
		must(err)
	}
	_, err = b.List(ctx, "d/")
	must(err)
	_, err = b.ListDirs(ctx, "")
	must(err)
	must(b.Delete(ctx, "d/k2"))
	f.AddRule(Rule{Ops: []Op{OpDelete}})
	if err := b.Delete(ctx, "d/k"); err == nil {
		t.Fatal("delete under a rule succeeded")
	}

	want := map[Op]int64{OpPut: 1, OpPutIfAbsent: 1, OpGet: 1, OpGetRange: 4, OpStat: 3, OpList: 2, OpDelete: 2}
	if got := f.RequestCounts(); !maps.Equal(got, want) {
		t.Errorf("RequestCounts = %v, want %v", got, want)
	}
	if got := f.TotalRequests(); got != 14 {
		t.Errorf("TotalRequests = %d, want 14", got)
	}
	f.ResetCounters()
	if f.TotalRequests() != 0 || f.Injected() != 0 || f.Requests(OpGet) != 0 {
		t.Errorf("after ResetCounters: %v, injected %d", f.RequestCounts(), f.Injected())
	}
	if len(Ops()) != len(want) {
		t.Errorf("Ops() = %v, want every kind once", Ops())
	}
}

func TestWithFaultsSharesStorageButNotLifetime(t *testing.T) {
	ctx := context.Background()
	base := openMem(t, WithOpTimeout(time.Minute))
	var f Faults // the zero value is usable
	b := WithFaults(base, &f)
	if !strings.HasSuffix(b.String(), " (faults)") || b.opTimeout != time.Minute {
		t.Errorf("wrapper name %q timeout %v; want the base's with \" (faults)\" and 1m", b, b.opTimeout)
	}
	if err := b.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := base.Get(ctx, "k"); err != nil || string(got) != "v" {
		t.Errorf("base after closing the wrapper: %q, %v", got, err)
	}
	f.SetErrorRate(1)
	if _, err := b.Get(ctx, "k"); !errors.Is(err, ErrInjected) {
		t.Errorf("zero-value Faults with rate 1: %v", err)
	}
}

// TestWalkCallbackMayMakeRequestsUnderACapOfOne: table code lists versions and reads
// each one from inside the walk; the list must not hold its slot meanwhile.
func TestWalkCallbackMayMakeRequestsUnderACapOfOne(t *testing.T) {
	ctx := context.Background()
	f := NewFaults(nil)
	b := WithFaults(openMem(t, WithOpTimeout(10*time.Second)), f)
	for _, k := range []string{"v/1", "v/2"} {
		if err := b.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	f.SetMaxConcurrent(1, ThrottleWait)
	err := b.Walk(ctx, "v/", "", func(o Object) error {
		_, err := b.Get(ctx, o.Key)
		return err
	})
	if err != nil {
		t.Fatalf("Walk with nested Gets under a cap of 1: %v", err)
	}
}

// TestHangingRuleBlocksUntilTheContextEnds stands for a store that stops answering
// for some keys: the request must end with the caller's deadline (or the Bucket's
// operation timeout), wrap both ErrInjected and the context's error so a caller can
// tell a timeout from a refusal, and leave other keys and the counters working.
func TestHangingRuleBlocksUntilTheContextEnds(t *testing.T) {
	ctx := context.Background()
	base := openMem(t)
	for _, k := range []string{"stuck/a", "free/a"} {
		if err := base.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	f := NewFaults(nil)
	b := WithFaults(base, f)
	hang := f.AddRule(Rule{KeyContains: "stuck/", Hang: true})

	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { _, err := b.Get(cctx, "stuck/a"); errc <- err }()
	eventually(t, "the hanging request holds its slot", func() bool { return hang.Fired() == 1 && f.InFlight() == 1 })
	select {
	case err := <-errc:
		t.Fatalf("hanging Get returned before its context ended: %v", err)
	default:
	}
	if _, err := b.Get(ctx, "free/a"); err != nil {
		t.Errorf("get of a key the rule does not match = %v", err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) || !errors.Is(err, ErrInjected) {
		t.Errorf("hanging Get after cancel = %v, want context.Canceled and ErrInjected", err)
	}

	// The Bucket's operation timeout ends a hang the caller did not bound.
	shortBase := openMem(t, WithOpTimeout(20*time.Millisecond))
	short := WithFaults(shortBase, f)
	err := short.Put(ctx, "stuck/b", []byte("x"))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrInjected) {
		t.Errorf("hanging Put past the op timeout = %v, want context.DeadlineExceeded and ErrInjected", err)
	}
	if ok, err := shortBase.Exists(ctx, "stuck/b"); ok || err != nil {
		t.Error("a hung put wrote its object")
	}
	if f.InFlight() != 0 || f.Injected() != 2 {
		t.Errorf("InFlight = %d, Injected = %d after two hangs, want 0 and 2", f.InFlight(), f.Injected())
	}
	hang.Remove()
	if _, err := b.Get(ctx, "stuck/a"); err != nil {
		t.Errorf("get after the rule was removed = %v", err)
	}
}
