package scanner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// releaseTimeout bounds the release of a coordination lock at shutdown.
const releaseTimeout = 5 * time.Second

// roundLock keeps one coordination lock between rounds. A replica that took the lock
// keeps it for as long as its lease lives, so the other replicas skip their rounds
// instead of repeating the work right after it; when the holder dies or stops, its
// key goes away with its lease (or by release) and the next replica to try takes it.
type roundLock struct {
	ts    *tasks.Queue
	name  string
	lease Lease
	log   *slog.Logger

	mu   sync.Mutex
	lock *tasks.CoordinationLock // nil when not held
}

// hold returns the lock if this replica holds it, taking it if it is free. When
// another holder has it, hold returns an error wrapping tasks.ErrCoordinationHeld:
// the caller skips its round.
//
// Holding the lock here proves nothing later: every write that needs ownership
// still goes through CoordinationLock.Do.
func (l *roundLock) hold(ctx context.Context) (*tasks.CoordinationLock, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lease, err := l.lease(ctx)
	if err != nil {
		return nil, fmt.Errorf("coordination lock %q: no lease: %w", l.name, err)
	}
	if l.lock != nil && l.lock.Lease() != lease {
		// A new session: the old acquisition lives (at most) as long as the old lease.
		l.releaseLocked(ctx)
	}
	if l.lock != nil {
		err := l.lock.Check(ctx)
		switch {
		case err == nil:
			return l.lock, nil
		case errors.Is(err, tasks.ErrCoordinationLost):
			l.log.Warn("coordination lock lost", "lock", l.name, "err", err)
			l.lock = nil
		default:
			return nil, err
		}
	}
	lock, err := l.ts.AcquireCoordination(ctx, l.name, lease)
	if err != nil {
		return nil, err
	}
	l.log.Info("coordination lock acquired", "lock", l.name, "revision", lock.Revision())
	l.lock = lock
	return lock, nil
}

// lost forgets lock after a guarded write found it lost.
func (l *roundLock) lost(lock *tasks.CoordinationLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lock == lock {
		l.lock = nil
	}
}

// release gives the lock up (at shutdown), so another replica need not wait for
// this replica's lease to expire.
func (l *roundLock) release(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked(ctx)
}

func (l *roundLock) releaseLocked(ctx context.Context) {
	if l.lock == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := l.lock.Release(ctx); err != nil {
		l.log.Warn("coordination lock not released; it ends with its lease", "lock", l.name, "err", err)
	}
	l.lock = nil
}
