package wal

import (
	"context"
	"fmt"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// DrainResult says what Drain changed.
type DrainResult struct {
	// Generations and Rows count the generations removed from the manifest.
	Generations int
	Rows        int64
	// Due counts the files of earlier drains whose delete delay has passed, which
	// this drain took out of deferred_deletes. The drain deletes none of them: it
	// hands them to Options.Deletes (the worker's cleanup sweeper deletes them and
	// counts what it deleted), and Dropped of them found the queue full or no queue
	// at all; Cleanup collects those.
	Due, Dropped int
	// Manifest is the version written, or the latest one if nothing changed.
	Manifest *Manifest
}

// Drain removes the generations up to and including upTo from the shard manifest,
// after a merge committed them to the base table. It is a relative edit of the latest
// version: generations sealed meanwhile (above upTo) stay, and on a lost race it
// re-reads and edits again. It never claims an epoch; it fails with ErrFenced if the
// shard's writer_epoch is no longer preparedEpoch, the epoch the merge read the
// generations under. Draining what is already drained writes nothing.
//
// Drained files are not deleted at once: a reader holding a snapshot taken before the
// drain may still read them (the base manifest it pairs them with predates the merge).
// The manifest lists them under deferred_deletes, and a later drain takes out those
// that have been drained for at least Options.DeleteDelay. Drain deletes nothing
// itself, since it runs inside a merge's serialized commit: once the manifest that
// stops listing the due files is written, it hands them to Options.Deletes, whose
// deleter removes them later. Without a queue (or with a full one) they are garbage
// that Cleanup collects, as after a crash between the drain and the delete.
func Drain(ctx context.Context, bucket *objstore.Bucket, dir, shard string, upTo, preparedEpoch uint64, opts ...Option) (DrainResult, error) {
	o := buildOptions(opts)
	sh, err := newShard(bucket, dir, shard, o)
	if err != nil {
		return DrainResult{}, err
	}
	res, due, err := drain(ctx, sh, nil, upTo, preparedEpoch)
	if err == nil {
		res.Dropped = sh.queueDrained(due)
	}
	return res, err
}

// Drain is the package Drain for this writer's own shard and epoch, serialized with
// the writer's seals. A merge runs in the writer's process; were its drain to race
// the writer's own seals for the next manifest version, frequent seals could starve
// it (measured: a drain gave up after 32 lost races against back-to-back seals).
//
// Like Drain, it only queues the files that came due (after the seal lock is
// released): neither the writer's seals nor the next merge's commit of another
// worker wait for their deletes.
func (w *Writer) Drain(ctx context.Context, upTo uint64) (DrainResult, error) {
	res, due, err := w.drainLocked(ctx, upTo)
	if err == nil {
		res.Dropped = w.sh.queueDrained(due)
	}
	return res, err
}

func (w *Writer) drainLocked(ctx context.Context, upTo uint64) (DrainResult, []DeferredDelete, error) {
	w.sealMu.Lock()
	defer w.sealMu.Unlock()
	res, due, err := drain(ctx, w.sh, w.currentManifest(), upTo, w.epoch)
	if err == nil && res.Manifest != nil {
		w.mu.Lock()
		if w.manifest == nil || res.Manifest.Version > w.manifest.Version {
			w.manifest = res.Manifest
		}
		w.mu.Unlock()
	}
	return res, due, err
}

// drain writes the manifest without the generations up to upTo and returns the
// drained files whose DeleteDelay has passed, no longer listed by it, for the
// caller to queue (queueDrained).
func drain(ctx context.Context, sh *shard, known *Manifest, upTo, preparedEpoch uint64) (DrainResult, []DeferredDelete, error) {
	o := sh.opts
	var (
		res DrainResult
		due []DeferredDelete
	)
	m, err := sh.edit(ctx, known, "drain", func(cur *Manifest) (*Manifest, error) {
		res, due = DrainResult{}, nil
		switch {
		case cur == nil:
			return nil, fmt.Errorf("%s: %w", sh, ErrNoShard)
		case cur.WriterEpoch != preparedEpoch:
			return nil, fmt.Errorf("%s: %w: the drain was prepared under writer epoch %d, the manifest (version %d) has %d",
				sh, ErrFenced, preparedEpoch, cur.Version, cur.WriterEpoch)
		}
		now := o.Clock.Now().UTC()
		next := cur.clone()
		next.Generations = next.Generations[:0]
		var drained []DeferredDelete
		for _, g := range cur.Generations {
			if g.Generation <= upTo {
				res.Generations++
				res.Rows += g.Rows
				drained = append(drained, DeferredDelete{Path: g.Path, DrainedAt: now})
			} else {
				next.Generations = append(next.Generations, g)
			}
		}
		next.DeferredDeletes = next.DeferredDeletes[:0]
		for _, d := range cur.DeferredDeletes {
			if now.Sub(d.DrainedAt) >= o.DeleteDelay {
				due = append(due, d)
			} else {
				next.DeferredDeletes = append(next.DeferredDeletes, d)
			}
		}
		if len(drained) == 0 && len(due) == 0 {
			return nil, errNoChange
		}
		next.DeferredDeletes = append(next.DeferredDeletes, drained...)
		return next, nil
	})
	if err != nil {
		return DrainResult{}, nil, err
	}
	res.Manifest = m
	res.Due = len(due)
	return res, due, nil
}

// queueDrained hands the due files, which the manifest written no longer lists,
// to the shard's delete queue and returns how many it could not take (all of them
// without a queue): those are left for Cleanup.
func (s *shard) queueDrained(due []DeferredDelete) (dropped int) {
	if len(due) == 0 {
		return 0
	}
	keys := make([]string, len(due))
	for i, d := range due {
		keys[i] = s.dir + "/" + d.Path
	}
	q := s.opts.Deletes
	if q == nil {
		s.logger.Debug("wal: drained generation files left for cleanup: no delete queue", "files", len(due))
		return len(due)
	}
	if dropped = q.add(s.bucket, keys); dropped > 0 {
		s.logger.Warn("wal: drained generation files left for cleanup: the delete queue is full",
			"files", dropped, "queued", len(due)-dropped)
	}
	return dropped
}
