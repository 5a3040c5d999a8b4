package faultproxy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/testutil/faultproxy"
)

// server is a real store the proxy fronts, and how to open a bucket on it
// through an endpoint of the test's choosing.
type server struct {
	name   string
	flavor faultproxy.Flavor
	addr   func(testing.TB) string
	open   func(t testing.TB, endpoint string) *objstore.Bucket
}

var servers = []server{
	{name: "minio", flavor: faultproxy.S3, addr: objstoretest.MinIOAddr, open: objstoretest.OpenS3},
	{name: "gcs", flavor: faultproxy.GCS, addr: objstoretest.GCSAddr, open: objstoretest.OpenGCS},
}

// forEachServer runs fn per server with a proxy in front of it.
func forEachServer(t *testing.T, fn func(t *testing.T, s server, p *faultproxy.Proxy)) {
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			p := startProxy(t, s)
			fn(t, s, p)
		})
	}
}

func startProxy(t testing.TB, s server) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(faultproxy.Config{Flavor: s.flavor, Target: s.addr(t), Seed: 1, S3SecretKey: objstoretest.MinIOPassword})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// The production failure: the incidents were made of S3 503 SlowDown and GCS 429
// answers, and of connections that died under requests; until now only injected
// Go errors stood for them. Through the real SDKs and objstore.WithRetry every
// request completes, and nothing is read back changed: a dropped connection is
// resent by the SDK (on GCS, plain writes too: objstore sets its client's
// policy), a throttle that outlasts the SDK's attempts by WithRetry. Drops hit
// first attempts only: three in a row exhaust the S3 SDK's attempts, and the
// request fails, as ErrUnavailable (TestPutIfAbsentUnderDroppedAnswersHasOneWriter
// takes that case).
func TestRequestsCompleteThroughThrottlesAndDroppedConnections(t *testing.T) {
	forEachServer(t, func(t *testing.T, s server, p *faultproxy.Proxy) {
		ctx := context.Background()
		b := objstore.WithRetry(s.open(t, p.URL()), objstore.ThrottleBackoff, clock.RealClock{}, objstore.DefaultThrottleRetry)
		p.Set(faultproxy.Faults{Throttle: 0.25, DropBefore: 0.1, DropAfter: 0.1, DropFirstAttemptOnly: true})
		const n = 10
		want := map[string][]byte{}
		for i := range n {
			key := fmt.Sprintf("obj/%03d", i)
			want[key] = bytes.Repeat([]byte{byte(i)}, 100+i)
			if err := b.Put(ctx, key, want[key]); err != nil {
				t.Fatalf("put %s: %v", key, err)
			}
		}
		for key, data := range want {
			got, err := b.Get(ctx, key)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("get %s: %d bytes, %v; want %d bytes", key, len(got), err, len(data))
			}
			part, err := b.GetRange(ctx, key, 10, 20)
			if err != nil || !bytes.Equal(part, data[10:30]) {
				t.Fatalf("get range of %s: %v, %v", key, part, err)
			}
			if o, err := b.Stat(ctx, key); err != nil || o.Size != int64(len(data)) {
				t.Fatalf("stat %s: %+v, %v", key, o, err)
			}
		}
		for range 2 {
			objs, err := b.List(ctx, "obj/")
			if err != nil || len(objs) != n {
				t.Fatalf("list: %d objects, %v; want %d", len(objs), err, n)
			}
		}
		for key := range want {
			if err := b.Delete(ctx, key); err != nil {
				t.Fatalf("delete %s: %v", key, err)
			}
		}
		if objs, err := b.List(ctx, "obj/"); err != nil || len(objs) != 0 {
			t.Fatalf("after the deletes: %d objects, %v", len(objs), err)
		}
		c := p.Counts()
		t.Logf("%+v", c)
		// The fractions must have fired, or the test proved nothing.
		if c.Throttled == 0 || c.DroppedBefore == 0 || c.DroppedAfter == 0 {
			t.Fatalf("faults did not fire: %+v", c)
		}
		if sum := c.Forwarded + c.Throttled + c.DroppedBefore + c.DroppedAfter + c.Failed; sum != c.Requests {
			t.Fatalf("counts do not add up to the %d requests: %+v", c.Requests, c)
		}
	})
}

// A store that throttles for longer than the SDK's and WithRetry's resends is
// answered with ErrThrottled (class Busy: the worker's 503 OVERLOADED), never an
// unclassified error, whatever request it was. The GCS client resends a 429
// until its context ends: a read then still reports the 429, but a write
// reports only the deadline (class Timeout, which the worker answers 503
// OVERLOADED too).
func TestThrottlingThatOutlastsTheRetriesIsErrThrottled(t *testing.T) {
	forEachServer(t, func(t *testing.T, s server, p *faultproxy.Proxy) {
		ctx := context.Background()
		raw := s.open(t, p.URL())
		if err := raw.Put(ctx, "there", []byte("x")); err != nil {
			t.Fatal(err)
		}
		b := objstore.WithRetry(raw, objstore.ThrottleBackoff, clock.RealClock{}, 500*time.Millisecond)
		p.Set(faultproxy.Faults{Throttle: 1})
		writes := map[string]bool{"put": true, "put-if-absent": true, "delete": true}
		ops := map[string]func(context.Context) error{
			"get":           func(ctx context.Context) error { _, err := b.Get(ctx, "there"); return err },
			"get range":     func(ctx context.Context) error { _, err := b.GetRange(ctx, "there", 0, 1); return err },
			"stat":          func(ctx context.Context) error { _, err := b.Stat(ctx, "there"); return err },
			"put":           func(ctx context.Context) error { return b.Put(ctx, "new", []byte("y")) },
			"put-if-absent": func(ctx context.Context) error { return b.PutIfAbsent(ctx, "new2", []byte("y")) },
			"delete":        func(ctx context.Context) error { return b.Delete(ctx, "there") },
			"list":          func(ctx context.Context) error { _, err := b.List(ctx, ""); return err },
		}
		var wg sync.WaitGroup
		for name, op := range ops {
			wg.Go(func() {
				// The S3 SDK gives up after its 3 attempts (a few seconds of
				// backoff), the GCS client at the caller's deadline.
				limit := time.Minute
				if s.flavor == faultproxy.GCS {
					limit = 4 * time.Second
				}
				ctx, cancel := context.WithTimeout(ctx, limit)
				defer cancel()
				err := op(ctx)
				if s.flavor == faultproxy.GCS && writes[name] && errclass.Of(err) == errclass.Timeout {
					return
				}
				if !errors.Is(err, objstore.ErrThrottled) || errclass.Of(err) != errclass.Busy {
					t.Errorf("%s: got %v (class %v), want ErrThrottled, class Busy", name, err, errclass.Of(err))
				}
			})
		}
		wg.Wait()
		if c := p.Counts(); c.Forwarded > 1 || c.Throttled < int64(len(ops)) {
			t.Fatalf("%+v: every request after the first put should have been throttled", c)
		}
	})
}

// The production hazard: a put-if-absent whose answer is lost after the store
// performed it is resent by the SDK, and the store answers the resend "exists".
// Racing writers through such a store still leave one object with one writer's
// bytes; a writer told it won finds its own bytes there (nobody is silently
// overwritten), and the others learn "exists", or, when every attempt lost its
// answer, ErrUnavailable: whether a writer told either wrote the object is for it
// to find out by reading it back (the table's commit, the WAL's fences and
// manifest edits do).
func TestPutIfAbsentUnderDroppedAnswersHasOneWriter(t *testing.T) {
	forEachServer(t, func(t *testing.T, s server, p *faultproxy.Proxy) {
		ctx := context.Background()
		p.Set(faultproxy.Faults{DropAfter: 0.5, Only: s.flavor.IsConditionalWrite})
		const writers, keys = 6, 6
		b := s.open(t, p.URL())
		lostAnswers := 0
		for k := range keys {
			key := fmt.Sprintf("race/%02d", k)
			errs := make([]error, writers)
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					errs[w] = b.PutIfAbsent(ctx, key, []byte(fmt.Sprintf("writer %d", w)))
				})
			}
			wg.Wait()
			got, err := b.Get(ctx, key)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			winners := 0
			for w, err := range errs {
				switch {
				case err == nil:
					winners++
					if string(got) != fmt.Sprintf("writer %d", w) {
						t.Fatalf("%s: writer %d was told it won, but the object holds %q", key, w, got)
					}
				case errors.Is(err, objstore.ErrExists), errors.Is(err, objstore.ErrUnavailable):
					if string(got) == fmt.Sprintf("writer %d", w) {
						lostAnswers++ // its own write, whose answer it never heard
					}
				default:
					t.Fatalf("%s: writer %d: unclassified %v", key, w, err)
				}
			}
			if winners > 1 {
				t.Fatalf("%s: %d writers were told they won", key, winners)
			}
		}
		c := p.Counts()
		t.Logf("%+v; %d writers did not hear that they won", c, lostAnswers)
		if c.DroppedAfter == 0 {
			t.Fatalf("no answer was dropped: %+v", c)
		}
	})
}

// Stripping the precondition makes the store overwrite: the bucket without
// conditional writes that the start-up probe must refuse.
func TestStrippedPreconditionsOverwrite(t *testing.T) {
	forEachServer(t, func(t *testing.T, s server, p *faultproxy.Proxy) {
		ctx := context.Background()
		b := s.open(t, p.URL())
		p.Set(faultproxy.Faults{StripConditional: true})
		if err := b.PutIfAbsent(ctx, "k", []byte("one")); err != nil {
			t.Fatal(err)
		}
		if err := b.PutIfAbsent(ctx, "k", []byte("two")); err != nil {
			t.Fatalf("second put-if-absent without its precondition: %v, want a silent overwrite", err)
		}
		if got, err := b.Get(ctx, "k"); err != nil || string(got) != "two" {
			t.Fatalf("got %q, %v", got, err)
		}
		if c := p.Counts(); c.Stripped != 2 || c.ConditionalWrites != 2 {
			t.Fatalf("%+v: want 2 conditional writes stripped", c)
		}
		// And without stripping, the same store refuses the second write.
		p.Set(faultproxy.Faults{})
		if err := b.PutIfAbsent(ctx, "k", []byte("three")); !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("put-if-absent through the plain proxy: %v, want ErrExists", err)
		}
	})
}

// The throttle answers are the stores' own, down to what the SDKs parse.
func TestThrottleAnswersAreTheStoresOwn(t *testing.T) {
	for _, tc := range []struct {
		flavor faultproxy.Flavor
		status int
		body   string
	}{
		{faultproxy.S3, http.StatusServiceUnavailable, "<Code>SlowDown</Code>"},
		{faultproxy.GCS, http.StatusTooManyRequests, `"reason":"rateLimitExceeded"`},
	} {
		t.Run(tc.flavor.String(), func(t *testing.T) {
			// The target is never reached: every request is throttled.
			p, err := faultproxy.Start(faultproxy.Config{Flavor: tc.flavor, Target: "127.0.0.1:1", Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			p.Set(faultproxy.Faults{Throttle: 1})
			resp, err := http.Get(p.URL() + "/b/o")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(resp.Body)
			if resp.StatusCode != tc.status || !bytes.Contains(buf.Bytes(), []byte(tc.body)) {
				t.Fatalf("%d %s", resp.StatusCode, buf.String())
			}
			if c := p.Counts(); c.Requests != 1 || c.Throttled != 1 {
				t.Fatalf("%+v", c)
			}
		})
	}
}
