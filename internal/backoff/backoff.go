// Package backoff is Tidemark's one retry-delay policy: every loop that waits
// before trying again (a throttled object-store request, a lost WAL manifest race,
// an etcd session, registration or claim round that etcd did not answer) takes
// its delays from a Policy instead of doubling a duration by hand.
//
// Invariants: the n-th delay of a Policy is Min doubled n-1 times, capped at Max,
// then jittered down by at most Jitter of itself, so it never exceeds Max and never
// falls below Min*(1-Jitter); Jitter spreads the retries of processes that failed
// together (workers that lost etcd at the same moment) so they do not retry in
// lockstep. Waiting is on an injected clock, so tests step time instead of
// sleeping.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"

	"k8s.io/utils/clock"
)

// Policy says how long to wait before each retry.
type Policy struct {
	// Min is the first delay, Max the largest; each delay doubles the previous.
	Min, Max time.Duration
	// Jitter, in [0, 1], is the fraction of each delay drawn at random: a delay d
	// becomes a uniform draw from [d*(1-Jitter), d]. 0 waits exactly d.
	Jitter float64
}

// Delay is the delay before retry n (n >= 1).
func (p Policy) Delay(n int) time.Duration {
	d := max(p.Min, 0)
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, max(p.Max, p.Min))
	if j := min(max(p.Jitter, 0), 1); j > 0 && d > 0 {
		span := time.Duration(float64(d) * j)
		d -= rand.N(span + 1)
	}
	return d
}

// Backoff is one retry loop's position in a Policy. Its zero value is not usable;
// get one from Policy.Start.
type Backoff struct {
	p Policy
	n int
}

// Start begins a retry loop.
func (p Policy) Start() *Backoff { return &Backoff{p: p} }

// Next returns the delay before the next retry and advances.
func (b *Backoff) Next() time.Duration {
	b.n++
	return b.p.Delay(b.n)
}

// Reset starts the loop over: the next delay is the Policy's first again. A loop
// resets after a success that lasted, so one failure after hours of health does
// not wait as long as the end of an outage.
func (b *Backoff) Reset() { b.n = 0 }

// Sleep waits d on clk. It returns ctx's error if ctx ends first.
func Sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
