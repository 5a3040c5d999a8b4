package objstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/internal/backoff"
)

// quick is a policy short enough for tests on the real clock.
var quick = backoff.Policy{Min: time.Millisecond, Max: 4 * time.Millisecond}

// Every kind of request the store throttles a few times is resent until it is
// answered, and each one is then answered exactly as without throttling.
func TestWithRetryResendsEveryKindOfThrottledRequest(t *testing.T) {
	ctx := context.Background()
	f := NewFaults(rand.NewPCG(1, 2))
	b := WithRetry(WithFaults(openMem(t), f), quick, clock.RealClock{}, time.Minute)
	for _, op := range Ops() {
		f.AddRule(Rule{Ops: []Op{op}, Times: 3, Err: ErrThrottled})
	}
	if err := b.Put(ctx, "d/a", []byte("a")); err != nil {
		t.Fatalf("put: %v", err)
	}
	if err := b.PutIfAbsent(ctx, "d/b", []byte("b")); err != nil {
		t.Fatalf("put-if-absent: %v", err)
	}
	if err := b.PutIfAbsent(ctx, "d/b", []byte("again")); !errors.Is(err, ErrExists) {
		t.Fatalf("a second put-if-absent: %v, want ErrExists (a lost race is an answer, not resent)", err)
	}
	if data, err := b.Get(ctx, "d/a"); err != nil || string(data) != "a" {
		t.Fatalf("get: %q %v", data, err)
	}
	if data, err := b.GetRange(ctx, "d/b", 0, 1); err != nil || string(data) != "b" {
		t.Fatalf("get range: %q %v", data, err)
	}
	if o, err := b.Stat(ctx, "d/a"); err != nil || o.Size != 1 {
		t.Fatalf("stat: %+v %v", o, err)
	}
	if objs, err := b.List(ctx, "d/"); err != nil || len(objs) != 2 {
		t.Fatalf("list: %v %v", objs, err)
	}
	if err := b.Delete(ctx, "d/a"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if want := int64(3 * len(Ops())); f.Injected() != want {
		t.Fatalf("%d requests were refused, want %d: some kind was not throttled or not resent", f.Injected(), want)
	}
}

// A store that keeps throttling gets resends for the limit and no longer: the
// caller then sees the throttling error, and a request the caller gave up on is
// not resent at all.
func TestWithRetryGivesUpAfterItsLimitAndWithTheCaller(t *testing.T) {
	f := NewFaults(nil)
	f.AddRule(Rule{Ops: []Op{OpGet}, Err: ErrThrottled})
	b := WithRetry(WithFaults(openMem(t), f), quick, clock.RealClock{}, 30*time.Millisecond)
	start := time.Now()
	_, err := b.Get(context.Background(), "k")
	if !errors.Is(err, ErrThrottled) {
		t.Fatalf("got %v, want the store's ErrThrottled once the resends end", err)
	}
	if f.Injected() < 3 {
		t.Fatalf("only %d attempts in 30 ms of 1-4 ms delays: not resent", f.Injected())
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("took %s: the 30 ms limit did not end the resends", el)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.ResetCounters()
	if _, err := WithRetry(WithFaults(openMem(t), f), quick, clock.RealClock{}, time.Hour).Get(ctx, "k"); err == nil {
		t.Fatal("a get with an ended context succeeded")
	}
	if f.Injected() > 1 {
		t.Fatalf("%d attempts after the caller gave up", f.Injected())
	}
}

// Other errors are the store's answer (or its SDK already retried them): returned
// at once.
func TestWithRetryReturnsOtherErrorsAtOnce(t *testing.T) {
	f := NewFaults(nil)
	f.AddRule(Rule{Ops: []Op{OpGet}, Times: 1, Err: fmt.Errorf("connection reset")})
	b := WithRetry(WithFaults(openMem(t), f), quick, clock.RealClock{}, time.Minute)
	if _, err := b.Get(context.Background(), "k"); err == nil || errors.Is(err, ErrThrottled) {
		t.Fatalf("got %v, want the injected failure", err)
	}
	if _, err := b.Get(context.Background(), "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	if got := f.TotalRequests(); got != 2 {
		t.Fatalf("%d requests for two gets: an error other than throttling was resent", got)
	}
}

// pagingBackend throttles a listing once, after it delivered its first objects:
// like a store that refuses the second page of a listing.
type pagingBackend struct {
	backend
	after     int // objects delivered before the refusal
	throttled bool
}

func (p *pagingBackend) list(ctx context.Context, prefix, delim string, fn func(Object) error) error {
	n := 0
	return p.backend.list(ctx, prefix, delim, func(o Object) error {
		if !p.throttled && n == p.after {
			p.throttled = true
			return fmt.Errorf("page 2: %w", ErrThrottled)
		}
		n++
		return fn(o)
	})
}

// A listing throttled part way is resent and the caller sees every object once,
// in key order; the caller's own error stops a walk even if it wraps ErrThrottled
// (a request the callback made was throttled: not the listing's to resend).
func TestWithRetryResendsAListingWithoutRepeatingObjects(t *testing.T) {
	ctx := context.Background()
	mem := openMem(t)
	for _, k := range []string{"p/a", "p/b", "p/c/x", "p/d", "p/e"} {
		if err := mem.Put(ctx, k, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, delim := range []string{"", "/"} {
		pb := &pagingBackend{backend: mem.be, after: 2}
		b := WithRetry(&Bucket{be: pb, name: "paging"}, quick, clock.RealClock{}, time.Minute)
		var got []string
		if err := b.Walk(ctx, "p/", delim, func(o Object) error { got = append(got, o.Key); return nil }); err != nil {
			t.Fatalf("walk %q: %v", delim, err)
		}
		want := "p/a p/b p/c/x p/d p/e"
		if delim == "/" {
			want = "p/a p/b p/c/ p/d p/e"
		}
		if !pb.throttled || strings.Join(got, " ") != want {
			t.Fatalf("walk %q: throttled %v, got %v, want %s once each", delim, pb.throttled, got, want)
		}
	}

	calls := 0
	mine := fmt.Errorf("my own request: %w", ErrThrottled)
	err := WithRetry(mem, quick, clock.RealClock{}, time.Minute).Walk(ctx, "p/", "", func(Object) error { calls++; return mine })
	if !errors.Is(err, mine) || calls != 1 {
		t.Fatalf("got %v after %d calls, want the callback's error after one", err, calls)
	}
}

// Wrapping twice does not multiply the resends: a table asks for them on the
// bucket of a store that already resends.
func TestWithRetryOnARetryingBucketKeepsIt(t *testing.T) {
	b := WithRetry(openMem(t), quick, clock.RealClock{}, time.Minute)
	if again := WithRetry(b, backoff.Policy{Min: time.Hour}, clock.RealClock{}, time.Hour); again != b {
		t.Fatal("a second WithRetry wrapped a bucket that already resends")
	}
}
