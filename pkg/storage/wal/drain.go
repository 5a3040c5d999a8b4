package wal

import (
	"context"
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// DrainResult says what Drain changed.
type DrainResult struct {
	// Generations and Rows count the generations removed from the manifest.
	Generations int
	Rows        int64
	// Deleted counts generation files of earlier drains deleted now.
	Deleted int
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
// The manifest lists them under deferred_deletes, and a later drain deletes those
// that have been drained for at least Options.DeleteDelay (best effort; a file whose
// delete fails is left as garbage and logged).
func Drain(ctx context.Context, bucket *objstore.Bucket, dir, shard string, upTo, preparedEpoch uint64, opts ...Option) (DrainResult, error) {
	o := buildOptions(opts)
	sh, err := newShard(bucket, dir, shard, o)
	if err != nil {
		return DrainResult{}, err
	}
	res, due, err := drain(ctx, sh, nil, upTo, preparedEpoch)
	if err == nil {
		res.Deleted = deleteDrained(ctx, sh, due)
	}
	return res, err
}

// Drain is the package Drain for this writer's own shard and epoch, serialized with
// the writer's seals. A merge runs in the writer's process; were its drain to race
// the writer's own seals for the next manifest version, frequent seals could starve
// it (measured: a drain gave up after 32 lost races against back-to-back seals).
//
// The files that came due are deleted after the seal lock is released: seals need
// not wait for them, and neither does the next merge's commit of another worker
// (a drain is inside a merge's serialized commit). A drain after DeleteDelay's
// first expiry deletes as many files as it drained; one after another, inside the
// lock, that stepped a 20-worker cluster's backlog up at about 5 minutes
// (BENCHMARKS.md, sustained ingest).
func (w *Writer) Drain(ctx context.Context, upTo uint64) (DrainResult, error) {
	res, due, err := w.drainLocked(ctx, upTo)
	if err == nil {
		res.Deleted = deleteDrained(ctx, w.sh, due)
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
// caller to delete (deleteDrained).
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
	return res, due, nil
}

// drainedDeletes bounds the deletes of drained files in flight at once.
const drainedDeletes = 8

// deleteDrained deletes files the manifest no longer lists (best effort: a file
// whose delete fails is logged and left as garbage) and returns how many it
// deleted. Only after the manifest that stops listing them has been written.
func deleteDrained(ctx context.Context, sh *shard, due []DeferredDelete) int {
	var deleted atomic.Int64
	g := errgroup.Group{}
	g.SetLimit(drainedDeletes)
	for _, d := range due {
		g.Go(func() error {
			if err := sh.bucket.Delete(ctx, sh.dir+"/"+d.Path); err != nil {
				sh.logger.Warn("wal: deleting a drained generation file failed; it is garbage now", "path", d.Path, "err", err)
				return nil
			}
			deleted.Add(1)
			return nil
		})
	}
	_ = g.Wait()
	return int(deleted.Load())
}
