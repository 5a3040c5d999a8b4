package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/internal/backoff"
)

// ThrottleBackoff spaces the resends of a throttled request as object-store SDKs
// do: 50 ms doubling to 2 s, with jitter so the processes a store throttled at one
// moment do not come back in lockstep.
var ThrottleBackoff = backoff.Policy{Min: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: 0.5}

// DefaultThrottleRetry is how long a throttled request is resent (WithRetry's
// limit) by a process that sets no other: the stores' and the master's bucket.
const DefaultThrottleRetry = 30 * time.Second

// WithRetry returns a Bucket that sends a request the store throttled
// (ErrThrottled: refused for its rate, so not performed) again after the delays of
// p, waiting on clk, until it is answered otherwise, the caller's context (or the
// per-operation timeout) ends, or the next resend would start more than limit after
// the first attempt; it then returns the last error, still wrapping ErrThrottled.
// Any other error is returned at once: the store's own failures were already
// retried by its SDK, and a lost put-if-absent is an answer.
//
// The Bucket also keeps a concurrency limit shared by all its requests (see
// limit.go): none until the store first throttles, then halved on a throttled
// answer (once per window of requests) and raised by one per limit's worth of
// answers. A request waits for a slot under it before each attempt; a ranged read
// holds its slot until its body is closed, and a listing one slot for the whole
// walk (the backend delivers objects, not pages, so its page requests are one
// stream; fn should not wait on requests of the same Bucket, and none in Tidemark
// does). Under throttling the process therefore keeps at most the limit in flight,
// so a store that refuses above N requests settles it near N without losing a
// request or an answer. Callers see no error they did not see before: a wait for a
// slot ends with the caller's context, or after limit with ErrThrottled, as a
// request refused for that long would. A resend whose refusal the limit has
// already answered with a cut waits the first delay of p rather than the next; a
// request refused at the limit's floor of 1 keeps its slot through its backoff, so
// the process sends nothing else meanwhile. ConcurrencyLimit reports the limit.
//
// What is resent is the request, never a part of an answer: a ranged read resends
// the open, not a read of its body, and a listing throttled part way (one of its
// pages) is resent from the start with the objects already delivered skipped, so
// the caller sees every object once.
//
// A Bucket that already retries is returned as it is, so a layer that needs resends
// (a table, a merger) can ask for them on whatever Bucket it is given without
// multiplying its caller's, and every layer of a process over one opened bucket
// shares its limit. Both Buckets share b's storage; closing the result closes b.
func WithRetry(b *Bucket, p backoff.Policy, clk clock.Clock, limit time.Duration) *Bucket {
	if _, ok := b.be.(*retryBackend); ok {
		return b
	}
	return &Bucket{
		be:        &retryBackend{inner: b.be, p: p, clk: clk, limit: limit, lim: newConcurrencyLimit(maxConcurrencyLimit)},
		name:      b.name,
		opTimeout: b.opTimeout,
	}
}

type retryBackend struct {
	inner backend
	p     backoff.Policy
	clk   clock.Clock
	limit time.Duration
	lim   *concurrencyLimit
}

// do runs op, each attempt in a slot under the concurrency limit, until it
// returns anything but a throttling error or the resends end (see WithRetry). op
// may keep its slot past its return (s.keep) for an answer still being read.
func (r *retryBackend) do(ctx context.Context, op func(s *slot) error) error {
	// Before the first attempt, the wait for a slot has the resends' time: a
	// request that finds none in it is answered as one refused that long.
	deadline := r.clk.Now().Add(r.limit)
	var last error // the last throttled answer, once there is one
	var s *slot    // held across a backoff at the floor (resendInSlot)
	b := r.p.Start()
	for {
		if s == nil {
			var err error
			s, err = r.lim.acquire(ctx, r.clk, deadline.Sub(r.clk.Now()))
			switch {
			case err != nil && last != nil:
				return last // the resend found no slot in time, or the caller gave up: as in its backoff
			case errors.Is(err, errNoSlot):
				return fmt.Errorf("%w: %w in %s", ErrThrottled, err, r.limit)
			case err != nil:
				return err
			}
		}
		switch {
		case last == nil:
			deadline = r.clk.Now().Add(r.limit)
		case r.clk.Now().After(deadline):
			s.release() // the wait for a slot ran past the resends' time
			return last
		}
		err := op(s)
		v := s.answer(err)
		if !errors.Is(err, ErrThrottled) {
			if !s.kept {
				s.release()
			}
			return err
		}
		last = err
		if v == resendSoon {
			b.Reset()
		}
		if v != resendInSlot {
			s.release()
			s = nil
		}
		wait := b.Next()
		if r.clk.Now().Add(wait).After(deadline) || backoff.Sleep(ctx, r.clk, wait) != nil {
			if s != nil {
				s.release()
			}
			return err
		}
		if s != nil {
			s.renew()
		}
	}
}

func (r *retryBackend) get(ctx context.Context, key string, limit int64) (data []byte, err error) {
	err = r.do(ctx, func(*slot) error { data, err = r.inner.get(ctx, key, limit); return err })
	return data, err
}

func (r *retryBackend) getRange(ctx context.Context, key string, offset, length int64) (rc io.ReadCloser, err error) {
	err = r.do(ctx, func(s *slot) error {
		rc, err = r.inner.getRange(ctx, key, offset, length)
		if err == nil {
			rc = &releasingReader{ReadCloser: rc, release: s.keep()}
		}
		return err
	})
	return rc, err
}

func (r *retryBackend) getRanges(ctx context.Context, key string, rs []ByteRange) (out [][]byte, err error) {
	err = r.do(ctx, func(*slot) error { out, err = r.inner.getRanges(ctx, key, rs); return err })
	return out, err
}

func (r *retryBackend) local() bool { return r.inner.local() }

func (r *retryBackend) stat(ctx context.Context, key string) (o Object, err error) {
	err = r.do(ctx, func(*slot) error { o, err = r.inner.stat(ctx, key); return err })
	return o, err
}

func (r *retryBackend) put(ctx context.Context, key string, data []byte) error {
	return r.do(ctx, func(*slot) error { return r.inner.put(ctx, key, data) })
}

func (r *retryBackend) putIfAbsent(ctx context.Context, key string, data []byte) error {
	return r.do(ctx, func(*slot) error { return r.inner.putIfAbsent(ctx, key, data) })
}

func (r *retryBackend) delete(ctx context.Context, key string) error {
	return r.do(ctx, func(*slot) error { return r.inner.delete(ctx, key) })
}

// list resends a throttled listing from the start and skips what it already
// delivered: listings come in key order, so everything up to the last key handed
// to fn was seen.
func (r *retryBackend) list(ctx context.Context, prefix, delimiter string, fn func(Object) error) error {
	var last string
	delivered := false
	var fnErr error
	err := r.do(ctx, func(*slot) error {
		err := r.inner.list(ctx, prefix, delimiter, func(o Object) error {
			if delivered && o.Key <= last {
				return nil
			}
			last, delivered = o.Key, true
			fnErr = fn(o)
			return fnErr
		})
		if fnErr != nil {
			return nil // the caller stopped the walk: nothing to resend
		}
		return err
	})
	if fnErr != nil {
		return fnErr // the caller's own error, even one wrapping ErrThrottled
	}
	return err
}

func (r *retryBackend) close() error { return r.inner.close() }
