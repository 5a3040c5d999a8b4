package store

import (
	"context"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/pkg/coord/horizon"
	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// HorizonKeeper is where a store's writer registers its shard for the change
// feed and leaves it (pkg/coord/horizon.Keeper). Open returns the floor the writer
// numbers its rows above; Close marks the shard closed when nothing is unsealed.
type HorizonKeeper interface {
	Open(ctx context.Context, target registry.Target, shard string, epoch uint64) (floor uint64, err error)
	Close(ctx context.Context, target registry.Target, shard string, epoch, promise uint64, idle bool) error
	DeleteStore(ctx context.Context, target registry.Target) error
}

// ErrHorizon means a writer could not register its shard for the change feed
// (etcd unreachable): it numbers no row until it has, or a feed could pass rows
// it writes. Retry later.
var ErrHorizon = errclass.New(errclass.Unavailable, "the shard's change-feed horizon could not be registered")

// horizonTimeout bounds the registration of a writer opening (etcd away: the add
// fails with ErrHorizon instead of waiting).
const horizonTimeout = 10 * time.Second

// openHorizon registers w, which has claimed its epoch and numbered nothing, and
// makes it number above the store's largest promise (package horizon's doc).
func (s *Store) openHorizon(ctx context.Context, w *wal.Writer) error {
	if s.cfg.Horizon == nil {
		return nil
	}
	hctx, cancel := context.WithTimeout(ctx, horizonTimeout)
	defer cancel()
	floor, err := s.cfg.Horizon.Open(hctx, s.Target(), s.cfg.Shard, w.Stats().Epoch)
	if err != nil {
		return fmt.Errorf("store %s: shard %s: %w: %w", s.Target(), s.cfg.Shard, ErrHorizon, err)
	}
	w.Observe(floor)
	return nil
}

// closeHorizon leaves w's shard after w closed: closed at its last promise when
// nothing is unsealed, else open at it (the next writer seals the rest).
func (s *Store) closeHorizon(ctx context.Context, w *wal.Writer) {
	if s.cfg.Horizon == nil {
		return
	}
	p, ok := w.Promise()
	if !ok {
		return // fenced: the newer writer holds the record
	}
	st := w.Stats()
	idle := st.MemtableRows == 0 && st.QueuedBytes == 0
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), horizonTimeout)
	defer cancel()
	if err := s.cfg.Horizon.Close(hctx, s.Target(), s.cfg.Shard, st.Epoch, p, idle); err != nil {
		s.log.Warn("the shard's change-feed horizon was not left: it holds the store's feed at its last promise until the shard is opened again",
			"shard", s.cfg.Shard, "err", err)
	}
}

// promise is the change-feed promise of this worker's writer of s, if one is open.
func (s *Store) promise() (horizon.Promise, bool) {
	w := s.residentWriter()
	if w == nil {
		return horizon.Promise{}, false
	}
	p, ok := w.Promise()
	if !ok {
		return horizon.Promise{}, false
	}
	return horizon.Promise{Target: s.Target(), Shard: s.cfg.Shard, Epoch: w.Stats().Epoch, Seq: p}, true
}

// Promises is the change-feed promise of every writer this worker holds open: the
// source of its horizon.Keeper's publishing.
func (ss *Stores) Promises() []horizon.Promise {
	resident, releases := ss.Resident()
	defer func() {
		for _, release := range releases {
			release()
		}
	}()
	var out []horizon.Promise
	for _, s := range resident {
		if p, ok := s.promise(); ok {
			out = append(out, p)
		}
	}
	return out
}
