package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/coord/consumers"
	"github.com/tidemark-io/tidemark/pkg/registry"
)

// ErrConsumerLag refuses an add to a store with max_consumer_lag while one of its
// named consumers lags behind the store's horizon by more; the error's text names
// the consumer, its lag and the limit. Nothing was written.
var ErrConsumerLag = errors.New("a consumer lags beyond the store's max_consumer_lag")

// lagError is a refusal: its text is the message a client reads, and it is
// ErrConsumerLag.
type lagError struct{ msg string }

func (e *lagError) Error() string        { return e.msg }
func (e *lagError) Is(target error) bool { return target == ErrConsumerLag }

// Bounds of the consumer-lag verdicts (Backpressure): a store's verdict
// is at most lagVerdictTTL old when an add reads it (plus one refresh), a refresh
// gives up after lagVerdictTimeout, and it reads at most lagMaxConsumers
// consumers of the store (the lag metric's bound; one beyond it is not judged).
const (
	lagVerdictTTL     = time.Second
	lagVerdictTimeout = time.Second
	// lagVerdictIdle is how long a store's verdict outlives its last add: a
	// store that stopped taking adds on this worker is forgotten.
	lagVerdictIdle = 10 * time.Minute
)

// ConsumerLister is the part of consumers.Cursors the verdicts read.
type ConsumerLister interface {
	List(ctx context.Context, target registry.Target, limit int) ([]consumers.Record, bool, error)
}

// Backpressure refuses adds to a store with max_consumer_lag while one of
// its named consumers lags behind the store's horizon by more than that limit
// (consumers.Record.Lag). An add reads a cached per-store verdict, the worst
// consumer's lag, and never waits for etcd except for a store's first add on
// this worker: the verdict is refreshed in the background, at most once per
// lagVerdictTTL, by one refresh at a time, bounded by lagVerdictTimeout.
//
// A refresh that cannot read the consumers (etcd away or slow) or the horizon
// (none known yet, the view not synced) admits: max_consumer_lag protects a
// consumer's chance to keep up, not the store's data, and refusing every add
// because the coordination plane is away would turn an etcd outage into a write
// outage for every store that set it. The refusal comes back with the next
// refresh that reads etcd again.
type Backpressure struct {
	cursors  ConsumerLister
	horizons horizonReader
	clock    clock.PassiveClock
	log      *slog.Logger

	mu       sync.Mutex
	verdicts map[registry.Target]*lagVerdict // by target
}

// lagVerdict is one store's cached verdict. Its fields are guarded by
// Backpressure.mu.
type lagVerdict struct {
	decided    chan struct{} // closed once the first refresh is done
	decidedAt  time.Time
	usedAt     time.Time
	refreshing bool
	// worst is the consumer that lags the most, and its lag, as of decidedAt;
	// worst.Consumer is "" when no consumer's lag is known.
	worst    consumers.Record
	worstLag time.Duration
}

// NewBackpressure returns the backpressure reading cursors (consumers.Cursors)
// and horizons; clk nil is the real clock.
func NewBackpressure(cursors ConsumerLister, horizons Horizons, clk clock.PassiveClock, log *slog.Logger) *Backpressure {
	return newBackpressure(cursors, horizons, clk, log)
}

func newBackpressure(cursors ConsumerLister, horizons horizonReader, clk clock.PassiveClock, log *slog.Logger) *Backpressure {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Backpressure{cursors: cursors, horizons: horizons, clock: clk, log: log,
		verdicts: map[registry.Target]*lagVerdict{}}
}

// Admit answers nil, or a refusal (ErrConsumerLag) when a consumer of target
// lags behind by more than limit (limit <= 0: off, nothing read). It waits only
// for the store's first verdict, and no longer than ctx (its cause is returned
// then). A nil Backpressure admits everything.
func (b *Backpressure) Admit(ctx context.Context, target registry.Target, limit time.Duration) error {
	if b == nil || limit <= 0 {
		return nil
	}
	now := b.clock.Now()
	b.mu.Lock()
	v := b.verdicts[target]
	if v == nil {
		b.forgetIdleLocked(now)
		v = &lagVerdict{decided: make(chan struct{})}
		b.verdicts[target] = v
	}
	v.usedAt = now
	if !v.refreshing && (v.decidedAt.IsZero() || now.Sub(v.decidedAt) >= lagVerdictTTL) {
		v.refreshing = true
		go b.refresh(target, v)
	}
	decided := v.decided
	b.mu.Unlock()

	select {
	case <-decided:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	b.mu.Lock()
	worst, lag := v.worst, v.worstLag
	b.mu.Unlock()
	if worst.Consumer == "" || lag <= limit {
		return nil
	}
	return &lagError{msg: fmt.Sprintf(
		"store %s: consumer %q lags %s behind the store's horizon, more than its max_consumer_lag of %s; adds are refused until it commits a later cursor",
		target, worst.Consumer, lag.Round(time.Millisecond), limit)}
}

// refresh decides v anew: the worst lag among target's consumers.
func (b *Backpressure) refresh(target registry.Target, v *lagVerdict) {
	ctx, cancel := context.WithTimeout(context.Background(), lagVerdictTimeout)
	defer cancel()
	worst, lag, err := b.worstLag(ctx, target)
	if err != nil {
		b.log.Warn("consumer lag not read; adds admitted until it is", "target", target, "err", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v.worst, v.worstLag = worst, lag
	v.refreshing = false
	if v.decidedAt.IsZero() {
		close(v.decided)
	}
	v.decidedAt = b.clock.Now()
}

// worstLag reads target's horizon (the View's copy, no round trip) and, if one
// is known, its consumers (one etcd read), and returns the one that lags the
// most; a zero Record when none does, or nothing is known.
func (b *Backpressure) worstLag(ctx context.Context, target registry.Target) (consumers.Record, time.Duration, error) {
	h, ok, err := b.horizons.Horizon(ctx, target)
	if err != nil || !ok {
		return consumers.Record{}, 0, err
	}
	recs, _, err := b.cursors.List(ctx, target, lagMaxConsumers)
	if err != nil {
		return consumers.Record{}, 0, err
	}
	var worst consumers.Record
	var worstLag time.Duration
	for _, r := range recs {
		if lag, ok := r.Lag(h); ok && (worst.Consumer == "" || lag > worstLag) {
			worst, worstLag = r, lag
		}
	}
	return worst, worstLag, nil
}

// Forget drops target's verdict: the store was deleted, and one created again
// under its name starts with none.
func (b *Backpressure) Forget(target registry.Target) {
	if b == nil {
		return
	}
	b.mu.Lock()
	delete(b.verdicts, target)
	b.mu.Unlock()
}

// forgetIdleLocked drops the verdicts of stores no add asked about for
// lagVerdictIdle, so the map holds the stores this worker takes adds for.
func (b *Backpressure) forgetIdleLocked(now time.Time) {
	for t, v := range b.verdicts {
		if !v.refreshing && now.Sub(v.usedAt) >= lagVerdictIdle {
			delete(b.verdicts, t)
		}
	}
}
