package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/internal/backoff"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// stormBackoff is ThrottleBackoff scaled to a store of 5 ms requests.
var stormBackoff = backoff.Policy{Min: 5 * time.Millisecond, Max: 200 * time.Millisecond, Jitter: 0.5}

// sendCounter sits between a retrying Bucket and the store and counts the
// requests at the store's door, checking at each one that it holds a slot of the
// limiter: nothing reaches the store around the limit.
type sendCounter struct {
	backend
	lim *concurrencyLimit

	mu        sync.Mutex
	n, peak   int
	uncovered int // sends while more were at the door than the limiter had slots out
}

func (c *sendCounter) enter() {
	c.lim.mu.Lock()
	defer c.lim.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.peak = max(c.peak, c.n)
	if c.n > c.lim.inFlight {
		c.uncovered++
	}
}

func (c *sendCounter) leave() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n--
}

func (c *sendCounter) resetPeak() (uncovered int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.peak = c.n
	return c.uncovered
}

func (c *sendCounter) stats() (peak, uncovered int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak, c.uncovered
}

func (c *sendCounter) get(ctx context.Context, key string, limit int64) ([]byte, error) {
	c.enter()
	defer c.leave()
	return c.backend.get(ctx, key, limit)
}

func (c *sendCounter) put(ctx context.Context, key string, data []byte) error {
	c.enter()
	defer c.leave()
	return c.backend.put(ctx, key, data)
}

// throttledStore is a mem:// bucket behind a Faults that serves 8 requests at
// once, 5 ms (+ up to 1 ms) each, and refuses the rest at once with ErrThrottled,
// as S3 answers 503 SlowDown; and a retrying Bucket over it whose limiter never
// cuts below maxLimit (0: a retrying Bucket without the limiter, as before it).
func throttledStore(t *testing.T, maxLimit int) (*Bucket, *Faults, *sendCounter) {
	t.Helper()
	f := NewFaults(rand.NewPCG(3, 4))
	f.SetLatency(5*time.Millisecond, time.Millisecond)
	f.SetMaxConcurrent(8, ThrottleReject)
	lim := newConcurrencyLimit(maxLimit)
	c := &sendCounter{backend: WithFaults(openMem(t), f).be, lim: lim}
	b := &Bucket{name: "throttled", opTimeout: time.Minute,
		be: &retryBackend{inner: c, p: stormBackoff, clk: clock.RealClock{}, limit: time.Minute, lim: lim}}
	return b, f, c
}

// storm has 64 goroutines each put and read back 8 objects of their own through
// b, and fails the test if any request is not answered with its object.
func storm(t *testing.T, b *Bucket, round string) {
	t.Helper()
	var g errgroup.Group
	for w := range 64 {
		g.Go(func() error {
			for i := range 8 {
				key := fmt.Sprintf("%s/%02d/%d", round, w, i)
				want := []byte(key)
				if err := b.Put(context.Background(), key, want); err != nil {
					return err
				}
				got, err := b.Get(context.Background(), key)
				if err != nil {
					return err
				}
				if string(got) != string(want) {
					return fmt.Errorf("get %s: %q", key, got)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("%s: a request was not answered: %v", round, err)
	}
}

// Against a store that refuses what is over 8 in flight, 64 senders through one
// retrying Bucket get every answer; the limiter cuts the refusals (each costs the
// sender a backoff, during which the store's slots idle) to a fraction of what
// the same storm draws without it; and once the limit has settled, the process
// keeps about the store's 8 at its door, not 64.
func TestTheLimiterCutsRefusalsAndAnswersEveryRequest(t *testing.T) {
	plain, plainFaults, _ := throttledStore(t, 0)
	storm(t, plain, "plain")
	without := plainFaults.Throttled()

	b, f, c := throttledStore(t, maxConcurrencyLimit)
	storm(t, b, "limited")
	with := f.Throttled()
	t.Logf("refusals: %d without the limiter, %d with it; limit %d", without, with, b.ConcurrencyLimit())
	// The invariant: the limiter cuts refusals. Without it every sender over the
	// store's 8 is refused on each resend until its backoff outgrows the crowd;
	// with it, the refusals are the first burst's and about one per climb of the
	// limit past 8.
	if with*2 > without {
		t.Fatalf("%d refusals with the limiter, %d without: the limiter did not cut them", with, without)
	}

	// Settled: the limit sawtooths between about 4 and 9. Scheduling can lift it a
	// few past 9 without a refusal (a granted request not yet at the store), never
	// to the senders' 64.
	if c.resetPeak() != 0 {
		t.Fatal("a request reached the store without a slot of the limiter")
	}
	storm(t, b, "settled")
	peak, uncovered := c.stats()
	if uncovered != 0 {
		t.Fatal("a request reached the store without a slot of the limiter")
	}
	if l := b.ConcurrencyLimit(); l < 1 || l > 16 || peak > 16 {
		t.Fatalf("settled: limit %d, %d requests at the store's door at once; want both within twice the store's 8", l, peak)
	}
	t.Logf("settled: peak %d in flight, limit %d, %d refusals in all", peak, b.ConcurrencyLimit(), f.Throttled())
}

// A request waiting for a slot whose context ends returns at once with the
// context's error, unsent, and holds nothing: every slot of the limit is usable
// afterwards. (A waiter that leaked its slot would shrink the limit for the life
// of the process.)
func TestAWaitForASlotEndsWithTheContextAndLeaksNoSlot(t *testing.T) {
	f := NewFaults(nil)
	b := WithRetry(WithFaults(openMem(t), f), quick, clock.RealClock{}, time.Minute)
	lim := b.be.(*retryBackend).lim

	// One refusal with one request in flight sets the limit to 1; the resend's
	// answer raises it to 2.
	f.AddRule(Rule{Ops: []Op{OpGet}, Times: 1, Err: ErrThrottled})
	limit := throttleOnce(t, b, f)

	hold := holdSlots(t, b, f, limit)
	release := hold()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	before := f.Requests(OpPut)
	go func() { done <- b.Put(ctx, "waiting", []byte("x")) }()
	testwait.Until(t, 10*time.Second, "the put waiting for a slot", func() bool {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		return len(lim.queue) == 1
	})
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("put: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the put still waits for a slot after its context ended")
	}
	if f.Requests(OpPut) != before {
		t.Fatal("the put whose wait ended was sent all the same")
	}
	release()

	// Every slot is free again: limit requests reach the store at once.
	hold()()
	lim.mu.Lock()
	defer lim.mu.Unlock()
	if lim.inFlight != 0 || len(lim.queue) != 0 || lim.limit != limit {
		t.Fatalf("after the waits: %d slots held, %d waiting, limit %d; want 0, 0, %d", lim.inFlight, len(lim.queue), lim.limit, limit)
	}
}

// throttleOnce has the store refuse one request while it is the only one in
// flight, which cuts b's limit to 1, and the resend's answer raises it to 2.
func throttleOnce(t *testing.T, b *Bucket, f *Faults) int {
	t.Helper()
	f.AddRule(Rule{Ops: []Op{OpGet}, Times: 1, Err: ErrThrottled})
	if _, err := b.Get(context.Background(), "absent"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get: %v, want ErrNotFound after one resend", err)
	}
	limit := b.ConcurrencyLimit()
	if limit != 2 {
		t.Fatalf("limit %d after one refusal and one answer, want 2", limit)
	}
	return limit
}

// holdSlots returns hold, which sends n requests that the store keeps until
// release ends them, and returns once all n are at the store.
func holdSlots(t *testing.T, b *Bucket, f *Faults, n int) (hold func() (release func())) {
	t.Helper()
	f.AddRule(Rule{KeyPrefix: "hang/", Hang: true})
	return func() func() {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = b.Get(ctx, fmt.Sprintf("hang/%d", i)) }()
		}
		testwait.For(t, 10*time.Second, "every slot held at the store", func() (bool, string) {
			return f.InFlight() == n, fmt.Sprintf("%d of %d in flight", f.InFlight(), n)
		})
		return func() { cancel(); wg.Wait() }
	}
}

// A request that finds no slot within the resend time is answered as one the
// store refused for that long (ErrThrottled), unsent: a caller sees the error it
// saw before the limit, not its own deadline's.
func TestAWaitForASlotPastTheResendTimeIsAThrottledAnswer(t *testing.T) {
	f := NewFaults(nil)
	b := WithRetry(WithFaults(openMem(t), f), quick, clock.RealClock{}, 50*time.Millisecond)
	release := holdSlots(t, b, f, throttleOnce(t, b, f))()
	defer release()
	before := f.Requests(OpPut)
	if err := b.Put(context.Background(), "waiting", []byte("x")); !errors.Is(err, ErrThrottled) {
		t.Fatalf("put: %v, want ErrThrottled after 50 ms without a slot", err)
	}
	if f.Requests(OpPut) != before {
		t.Fatal("the put that found no slot was sent all the same")
	}
}

// Once the store stops refusing, the limit grows back by one per limit's worth of
// answers and, at its cap, is lifted: a burst of throttling does not slow the
// process for good.
func TestTheLimitGrowsBackAndIsLiftedOnceTheStoreStopsRefusing(t *testing.T) {
	b, f, _ := throttledStore(t, maxConcurrencyLimit)
	storm(t, b, "throttled")
	low := b.ConcurrencyLimit()
	if low == 0 || low > 16 {
		t.Fatalf("limit %d after a storm against 8 slots, want one near 8", low)
	}
	f.Clear()

	// About 33,000 answers take the limit from near 8 to the cap of 256.
	ctx := context.Background()
	if err := b.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var g errgroup.Group
	for range 32 {
		g.Go(func() error {
			for {
				select {
				case <-stop:
					return nil
				default:
				}
				if _, err := b.Get(ctx, "k"); err != nil {
					return err
				}
			}
		})
	}
	grew := false
	testwait.For(t, time.Minute, "the limit lifted", func() (bool, string) {
		l := b.ConcurrencyLimit()
		grew = grew || l > low
		return l == 0, fmt.Sprintf("limit %d", l)
	})
	close(stop)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if !grew {
		t.Fatal("the limit was lifted without growing first")
	}
}

// The rules on one limiter: the refusals of requests sent under one limit halve
// it once, from what was in flight, and a refusal of a request sent before that
// cut does not cut again but is told the limit fell (its resend may come sooner);
// the floor is 1, and a refusal there is no cut but keeps its slot; a limit's
// worth of answers adds one.
func TestTheRefusalsOfOneBurstHalveTheLimitOnce(t *testing.T) {
	ctx := context.Background()
	l := newConcurrencyLimit(maxConcurrencyLimit)
	acquire := func() *slot {
		t.Helper()
		s, err := l.acquire(ctx, clock.RealClock{}, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var burst []*slot
	for range 10 {
		burst = append(burst, acquire())
	}
	for i, s := range burst[:8] {
		if v := s.answer(ErrThrottled); v != resendSoon {
			t.Fatalf("refusal %d of the burst: verdict %d, want resendSoon (the limit fell)", i, v)
		}
		s.release()
	}
	if l.current() != 5 || l.cuts != 1 {
		t.Fatalf("after 8 refusals of 10 in flight: limit %d after %d cuts, want 5 after 1", l.current(), l.cuts)
	}
	for _, s := range burst[8:] {
		s.answer(nil)
		s.release()
	}

	// One request in flight, refused: halved from that 1 to the floor; refused
	// again at the floor, nothing is cut and the request keeps its slot.
	for i, want := range []verdict{resendSoon, resendInSlot} {
		s := acquire()
		v := s.answer(ErrThrottled)
		s.release()
		if l.current() != 1 || l.cuts != 2 || v != want {
			t.Fatalf("refusal %d of a lone request: limit %d after %d cuts, verdict %d; want 1 after 2, %d", i, l.current(), l.cuts, v, want)
		}
	}
	for _, want := range []int{2, 2, 3} {
		s := acquire()
		s.answer(nil)
		s.release()
		if l.current() != want {
			t.Fatalf("limit %d after an answer, want %d", l.current(), want)
		}
	}
}

// At the floor a refused request keeps its slot through its backoff: while one
// request is refused, the process sends no other (they all would be refused
// too), so a request behind it reaches the store only after the refused one's
// last attempt.
func TestARequestRefusedAtTheFloorKeepsItsSlotThroughItsBackoff(t *testing.T) {
	f := NewFaults(nil)
	b := WithRetry(WithFaults(openMem(t), f), quick, clock.RealClock{}, 300*time.Millisecond)
	f.AddRule(Rule{KeyPrefix: "refused", Err: ErrThrottled})
	var refusalsBeforeB int64 = -1
	f.AddRule(Rule{KeyPrefix: "b", Before: func(context.Context, Op, string) { refusalsBeforeB = f.Injected() }})

	done := make(chan error, 1)
	start := time.Now()
	go func() { _, err := b.Get(context.Background(), "refused"); done <- err }()
	// The first refusal cuts the limit to 1; the second is at the floor.
	testwait.Until(t, 10*time.Second, "two refusals", func() bool { return f.Injected() >= 2 })
	// b waits for the slot within its own 300 ms, so it is sent half way through
	// the refused request's: the refused one lets go of the slot 150 ms before b
	// would give up, however late a loaded machine runs its last attempt.
	time.Sleep(time.Until(start.Add(150 * time.Millisecond)))
	select {
	case err := <-done:
		t.Fatalf("the refused request ended (%v) before b was sent: nothing to wait behind", err)
	default:
	}
	if _, err := b.Get(context.Background(), "b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get b: %v, want ErrNotFound", err)
	}
	if err := <-done; !errors.Is(err, ErrThrottled) {
		t.Fatalf("get refused: %v, want ErrThrottled once its resends ran out", err)
	}
	if refusalsBeforeB != f.Injected() {
		t.Fatalf("b was sent after %d of the %d refusals: the refused request let go of its slot during a backoff", refusalsBeforeB, f.Injected())
	}
}

// A ranged read holds its slot until its body is closed: the body's transfer
// occupies the store as much as the request did.
func TestARangedReadHoldsItsSlotUntilItsBodyIsClosed(t *testing.T) {
	ctx := context.Background()
	b := WithRetry(openMem(t), quick, clock.RealClock{}, time.Minute)
	if err := b.Put(ctx, "k", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	r := b.be.(*retryBackend)
	rc, err := r.getRange(ctx, "k", 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	held := func() int { r.lim.mu.Lock(); defer r.lim.mu.Unlock(); return r.lim.inFlight }
	if n := held(); n != 1 {
		t.Fatalf("%d slots held while the body is open, want 1", n)
	}
	data, _ := io.ReadAll(rc)
	_ = rc.Close()
	_ = rc.Close()
	if n := held(); n != 0 || string(data) != "234" {
		t.Fatalf("%d slots held after the body closed (read %q), want 0", n, data)
	}
}
