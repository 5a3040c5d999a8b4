package wal

import (
	"context"
	"errors"
	"fmt"
)

// ErrNotDrained means a shard still holds rows, sealed or not, and cannot be
// retired: its generations must be merged and drained first.
var ErrNotDrained = errors.New("WAL shard not drained")

// Retire marks this writer's shard retired by the worker by: an adopter calls it
// after it replayed, sealed, merged and drained the shard of a worker that did not
// come back, so the shard needs no owner any more. The edit is fenced like a seal
// (a worker that returned and opened the shard meanwhile owns it, and Retire fails
// with ErrFenced), and it fails with ErrNotDrained while the memtable, the queue or
// the manifest's generations hold anything. Retiring a retired shard writes nothing.
//
// The drained files that still wait for their delete delay stay listed in
// deferred_deletes; a later Drain of the retired shard (package Drain, with the
// retired epoch) takes them out for its DeleteQueue without reopening it.
func (w *Writer) Retire(ctx context.Context, by string) (*Manifest, error) {
	w.sealMu.Lock()
	defer w.sealMu.Unlock()
	st := w.Stats()
	if st.Fenced {
		w.qmu.Lock()
		err := w.fenced
		w.qmu.Unlock()
		return nil, err
	}
	if st.MemtableRows > 0 || st.QueuedBytes > 0 {
		return nil, fmt.Errorf("%s: retire: %w: %d unsealed rows, %d queued bytes", w.sh, ErrNotDrained, st.MemtableRows, st.QueuedBytes)
	}
	m, err := w.sh.edit(ctx, w.currentManifest(), "retire-"+w.id, func(cur *Manifest) (*Manifest, error) {
		switch {
		case cur == nil:
			return nil, fmt.Errorf("%s: %w", w.sh, ErrNoShard)
		case cur.WriterEpoch != w.epoch:
			return nil, w.fencedByManifest(cur)
		case len(cur.Generations) > 0:
			return nil, fmt.Errorf("%s: retire: %w: %d generations not drained", w.sh, ErrNotDrained, len(cur.Generations))
		case cur.Retired != nil:
			return nil, errNoChange
		}
		next := cur.clone()
		next.Retired = &Retirement{By: by, At: w.opts.Clock.Now().UTC()}
		return next, nil
	})
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	if w.manifest == nil || m.Version > w.manifest.Version {
		w.manifest = m
	}
	w.mu.Unlock()
	return m, nil
}
