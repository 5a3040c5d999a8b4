package store

import (
	"context"
	"fmt"
	"time"
)

// Defaults of the backpressure's settings (Config), where a zero field takes them.
const (
	// DefaultWarnGenerations is Config.WarnGenerations: reads log, and adds
	// start to wait, from this many pending generations.
	DefaultWarnGenerations = 256
	// DefaultRefuseGenerations is Config.RefuseGenerations: reads and adds are
	// refused from this many.
	DefaultRefuseGenerations = 4096
	// DefaultMaxAddDelay is Config.MaxAddDelay: the wait of an add to a store one
	// generation short of RefuseGenerations.
	DefaultMaxAddDelay = 2 * time.Second
)

// AddAdmission is what the backpressure of a store asked of one add: the pending
// generations it was decided on and how long the add waits before it is written.
type AddAdmission struct {
	Pending int
	Delay   time.Duration
}

// addDelay is the backpressure rule, in one place: no wait below warn pending
// generations, a wait growing linearly from 0 at warn to maxDelay at refuse, and
// refused (ok false) at refuse and above. maxDelay <= 0 waits never.
func addDelay(pending, warn, refuse int, maxDelay time.Duration) (d time.Duration, ok bool) {
	switch {
	case pending >= refuse:
		return 0, false
	case pending < warn || maxDelay <= 0:
		return 0, true
	}
	// warn <= pending < refuse, so refuse > warn. In floating point: maxDelay times
	// a pending count may not fit an int64 of nanoseconds.
	return time.Duration(float64(maxDelay) * float64(pending-warn) / float64(refuse-warn)), true
}

// AdmitAdd applies the store's add backpressure to one add request: below
// WarnGenerations pending generations it returns at once; from there to
// RefuseGenerations it waits MaxAddDelay in proportion to how far past
// WarnGenerations the store is; at RefuseGenerations and above it fails with
// ErrOverloaded, naming the store, its pending count and the limit. Merges are the
// only way down, and a writer slowed in proportion settles at the rate they
// sustain instead of meeting a wall of refusals.
//
// The decision costs no I/O while the store is below WarnGenerations: it reads the
// current snapshot. Above, it refreshes the snapshot first (at most once per
// SnapshotTTL, as a read does): other workers' merges reach this handle's snapshot
// only through a refresh, and a worker that only writes would otherwise slow or
// refuse adds on a count merges brought down long ago. A failed refresh decides on
// the snapshot at hand.
//
// The count is the larger of the snapshot's and, when Config.StorePending is set,
// the workers' published entries': a worker that only writes holds a snapshot of
// its own shard's generations, not of the 19 others' that a read would fan out
// over.
//
// The wait runs on Config.Clock and ends with ctx: the error is then ctx's cause,
// and the add must not be written. The returned admission says what was decided
// (its Delay, also when the wait was cut short).
func (s *Store) AdmitAdd(ctx context.Context) (AddAdmission, error) {
	snap := s.Snapshot()
	if s.pendingForAdds(snap) >= s.cfg.WarnGenerations {
		fresh, err := s.Fresh(ctx)
		if err != nil {
			s.log.Warn("refreshing the snapshot for add backpressure failed; deciding on the one at hand", "err", err)
		} else {
			snap = fresh
		}
	}
	a := AddAdmission{Pending: s.pendingForAdds(snap)}
	d, ok := addDelay(a.Pending, s.cfg.WarnGenerations, s.cfg.RefuseGenerations, s.cfg.MaxAddDelay)
	if !ok {
		return a, fmt.Errorf("store %s: %w: %d pending, refusing adds at %d until merges catch up",
			s.Target(), ErrOverloaded, a.Pending, s.cfg.RefuseGenerations)
	}
	a.Delay = d
	if d <= 0 {
		return a, nil
	}
	t := s.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return a, nil
	case <-ctx.Done():
		return a, fmt.Errorf("store %s: add given up during its backpressure delay of %s: %w", s.Target(), d, context.Cause(ctx))
	}
}

// pendingForAdds is the pending count add backpressure decides on: the snapshot's,
// or the workers' published count of the store when that is higher.
func (s *Store) pendingForAdds(snap *Snapshot) int {
	n := snap.PendingCount()
	if s.cfg.StorePending != nil {
		n = max(n, s.cfg.StorePending(s.entry.Target()))
	}
	return n
}
