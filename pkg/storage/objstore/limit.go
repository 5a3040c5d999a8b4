package objstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// The concurrency limit of a retrying Bucket (WithRetry): how many of its requests
// may be at the store at once, found the way TCP finds its window and the AWS SDK's
// "adaptive" retry mode its rate, from the store's own refusals. The rules:
//
//  1. Unlimited until the store first throttles: a process whose store never
//     refuses counts its requests and never waits for a slot.
//  2. A request takes a slot before it is sent and gives it back when its answer is
//     in: a ranged read when its body is closed, a listing when the walk ends. Over
//     the limit it waits, first come first served, until a slot frees, its context
//     ends, or the resend time passes (WithRetry then answers ErrThrottled); a wait
//     that ends unserved holds nothing afterwards.
//  3. Multiplicative decrease: a throttled answer sets the limit to half of what was
//     in flight (never above the limit, never below 1), if its request was sent
//     under the limit in force. A request sent before the last cut was part of the
//     load that cut already answered, so the refusals of one burst cut once.
//  4. At the floor, a refused request keeps its slot through its backoff and is
//     resent in it: one request in flight is already too many for the store (other
//     processes fill it), so the process sends nothing until that backoff ends, as
//     TCP at a window of one waits out its retransmission timer.
//  5. Additive increase: each limit's worth of answers (an object or a verdict on
//     it: not found, exists, too large) raises the limit by one; grown back to
//     maxConcurrencyLimit, it is lifted (rule 1 again).
//
// So a request is sent only while fewer than the limit are in flight: once the
// limit stops falling, the process holds at most the limit at the store, and
// against a store that refuses above N the limit settles in a sawtooth between
// about N/2 and N+1, one refusal per climb instead of one per excess request.

// maxConcurrencyLimit caps the limit after the store has throttled; a limit grown
// back to it is lifted (rule 5). It is far above what one process's merges and
// reads ask for at once (tens), so it only ends the limiter's part once the store
// has answered several thousand requests without refusing one.
const maxConcurrencyLimit = 256

// concurrencyLimit is one Bucket's limit and the requests holding or awaiting its
// slots. It is safe for concurrent use.
type concurrencyLimit struct {
	// max is the cap of rule 5: maxConcurrencyLimit but in tests; 0 never limits
	// (the comparison tests draw without the limiter).
	max int

	mu       sync.Mutex
	limit    int    // 0: unlimited
	inFlight int    // slots held
	cuts     uint64 // how many times the limit was cut: the window a request was sent in
	answers  int    // answered requests since the limit last changed
	queue    []*slotWaiter
}

type slotWaiter struct {
	ready chan struct{} // closed when the slot is granted
	s     *slot
}

// slot is one request's place under the limit.
type slot struct {
	l      *concurrencyLimit
	window uint64 // l.cuts when the slot was granted
	kept   bool   // the caller releases it later (a ranged read's body)
	freed  bool   // guarded by l.mu
}

func newConcurrencyLimit(maxLimit int) *concurrencyLimit {
	return &concurrencyLimit{max: maxLimit}
}

// current returns the limit in force, 0 when there is none.
func (l *concurrencyLimit) current() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

// errNoSlot is acquire's answer to a wait that outlasted its patience.
var errNoSlot = errors.New("no slot under the concurrency limit")

// acquire waits for a slot under the limit, first come first served, for at most
// patience on clk (then errNoSlot) or until ctx ends (then ctx's error); a wait
// that fails holds nothing.
func (l *concurrencyLimit) acquire(ctx context.Context, clk clock.Clock, patience time.Duration) (*slot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if len(l.queue) == 0 && l.freeLocked() {
		s := l.grantLocked()
		l.mu.Unlock()
		return s, nil
	}
	if patience <= 0 {
		l.mu.Unlock()
		return nil, errNoSlot
	}
	w := &slotWaiter{ready: make(chan struct{})}
	l.queue = append(l.queue, w)
	l.mu.Unlock()

	t := clk.NewTimer(patience)
	defer t.Stop()
	select {
	case <-w.ready:
		return w.s, nil
	case <-ctx.Done():
	case <-t.C():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-w.ready:
		// Granted as the wait ended: pass the slot on.
		l.releaseLocked(w.s)
	default:
		for i, q := range l.queue {
			if q == w {
				l.queue = append(l.queue[:i:i], l.queue[i+1:]...)
				break
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errNoSlot
}

func (l *concurrencyLimit) freeLocked() bool { return l.limit == 0 || l.inFlight < l.limit }

func (l *concurrencyLimit) grantLocked() *slot {
	l.inFlight++
	return &slot{l: l, window: l.cuts}
}

// wakeLocked grants the slots the limit allows to the waiters in their order.
func (l *concurrencyLimit) wakeLocked() {
	for len(l.queue) > 0 && l.freeLocked() {
		w := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		w.s = l.grantLocked()
		close(w.ready)
	}
}

func (l *concurrencyLimit) releaseLocked(s *slot) {
	if s.freed {
		return
	}
	s.freed = true
	l.inFlight--
	l.wakeLocked()
}

// verdict is what a throttled answer means for its request's resend.
type verdict int

const (
	// resendLater: back off as the policy says, without the slot.
	resendLater verdict = iota
	// resendSoon: the limit fell since the request was sent, so the store's
	// refusal has been met by fewer requests in flight; the resend need not wait
	// longer than the policy's first delay.
	resendSoon
	// resendInSlot: refused at the floor (rule 4); keep the slot through the
	// backoff and resend in it.
	resendInSlot
)

// answer adjusts the limit to the answer err to the request s was granted for
// (rules 3 to 5) and says what a throttled answer means for the resend.
func (s *slot) answer(err error) verdict {
	l := s.l
	if l.max <= 0 {
		return resendLater
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case errors.Is(err, ErrThrottled):
		if s.window != l.cuts {
			return resendSoon
		}
		n := l.inFlight
		if l.limit > 0 {
			n = min(n, l.limit)
		}
		if next := min(max(n/2, 1), l.max); l.limit == 0 || next < l.limit {
			l.limit, l.answers = next, 0
			l.cuts++
			return resendSoon
		}
		return resendInSlot
	case err == nil, errors.Is(err, ErrNotFound), errors.Is(err, ErrExists), errors.Is(err, ErrTooLarge):
		if l.limit == 0 {
			return resendLater
		}
		if l.answers++; l.answers >= l.limit {
			l.limit, l.answers = l.limit+1, 0
			if l.limit >= l.max {
				l.limit = 0
			}
			l.wakeLocked()
		}
	}
	return resendLater
}

// renew makes a slot kept through a backoff (rule 4) count as sent now, under
// the limit in force.
func (s *slot) renew() {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	s.window = s.l.cuts
}

// release gives the slot back; a second release does nothing.
func (s *slot) release() {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	s.l.releaseLocked(s)
}

// keep hands the slot to whoever calls the returned func, once the request's
// answer is fully read (a ranged read's body).
func (s *slot) keep() func() {
	s.kept = true
	return s.release
}

// ConcurrencyLimit returns how many requests b lets be at the store at once, 0
// when no limit is in force: the store has not throttled b's requests, or has
// answered enough since for the limit to be lifted, or b does not retry (see
// WithRetry).
func (b *Bucket) ConcurrencyLimit() int {
	if r, ok := b.be.(*retryBackend); ok {
		return r.lim.current()
	}
	return 0
}
