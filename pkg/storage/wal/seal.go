package wal

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// Seal turns the memtable, up to the last entry written when it starts, into a new
// generation: it deduplicates the rows (rowkey.NewestPerID), writes the generation
// file under a fresh name, then writes the next manifest version as a relative edit
// of the latest one (generation appended, current_generation advanced,
// replay_after_wal_entry_position moved to that entry, max_seq raised), and only
// then deletes the sealed entries (best effort). Appends keep flowing meanwhile;
// rows appended after the snapshot stay in the memtable for the next seal.
//
// It returns the new generation, or nil when there was nothing to seal. It fails
// with ErrFenced if a newer writer owns the shard. On any failure the memtable is
// kept and the next Seal tries again under a new file name. The failed attempt's file
// is deleted, unless the manifest write's outcome is unknown (a manifest may
// reference it then).
func (w *Writer) Seal(ctx context.Context) (*Generation, error) {
	w.sealMu.Lock()
	defer w.sealMu.Unlock()
	w.qmu.Lock()
	fenced := w.fenced
	w.qmu.Unlock()
	if fenced != nil {
		return nil, fenced
	}
	w.mu.Lock()
	empty := w.mem.rows == 0
	w.mu.Unlock()
	if empty {
		// Free for idle shards: a flush sweeper seals every resident store.
		return nil, nil
	}

	known := w.currentManifest()
	latest, err := w.sh.loadLatest(ctx, known)
	if err != nil {
		return nil, err
	}
	if latest.WriterEpoch != w.epoch {
		return nil, w.fencedByManifest(latest)
	}
	if latest == known {
		// loadLatest trusts a version it holds when nothing newer exists. Manifests
		// are deleted only with their store, and a store created again under the
		// same name starts its versions afresh: without this check the seal would
		// write its generation and version known+1 into the new store, rows of the
		// deleted one.
		key := w.sh.log.Key(known.Version)
		ok, err := w.sh.bucket.Exists(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("%s: seal: %w", w.sh, err)
		}
		if !ok {
			return nil, fmt.Errorf("%s: seal: %w: manifest %s is gone (the store was deleted)", w.sh, ErrNoShard, key)
		}
	}
	w.mu.Lock()
	w.manifest = latest
	// Only this epoch moves replay_after. If it is past rows we hold, an earlier seal
	// whose manifest write reported an error did land: those rows are sealed.
	w.mem.dropThrough(latest.ReplayAfter)
	upTo := w.lastPos
	recs := w.mem.snapshot(upTo)
	w.mu.Unlock()
	defer releaseAll(recs)
	if len(recs) == 0 {
		return nil, nil
	}

	kept, err := rowkey.NewestPerID(ctx, recs)
	if err != nil {
		return nil, fmt.Errorf("%s: seal: %w", w.sh, err)
	}
	defer releaseAll(kept)
	_, maxSeq, _ := seqRange(recs)
	seqMin, seqMax, rows := seqRange(kept)
	n := latest.CurrentGeneration + 1
	data, err := encodeGeneration(w.schema, kept, w.sh.name, n)
	if err != nil {
		return nil, fmt.Errorf("%s: seal: %w", w.sh, err)
	}
	gen := Generation{
		Generation:        n,
		Path:              generationPath(w.sh.name, randomHex(8), n),
		Rows:              rows,
		Bytes:             int64(len(data)),
		SeqMin:            seqMin,
		SeqMax:            seqMax,
		LastEntryPosition: upTo,
		SealedAt:          w.opts.Clock.Now().UTC(),
	}
	key := GenerationKey(w.sh.dir, gen)
	// The name is fresh, so a plain put is enough: nobody else writes this key.
	if err := w.sh.bucket.Put(ctx, key, data); err != nil {
		return nil, fmt.Errorf("%s: seal generation %d: %w", w.sh, n, err)
	}
	clean := w.cleanThrough
	m, err := w.sh.edit(ctx, latest, "seal", func(cur *Manifest) (*Manifest, error) {
		switch {
		case cur == nil:
			// Manifests are deleted only with the store.
			return nil, fmt.Errorf("%w: the manifest disappeared under the writer", ErrNoShard)
		case cur.WriterEpoch != w.epoch:
			return nil, w.fencedByManifest(cur)
		case cur.CurrentGeneration != n-1:
			// Only this epoch seals, and seals are serialized, so this means the
			// manifest was edited behind our back; retrying under a new number is
			// the next Seal's job.
			return nil, fmt.Errorf("%w: current_generation moved from %d to %d during the seal", ErrEpochShared, n-1, cur.CurrentGeneration)
		}
		next := cur.clone()
		next.Generations = append(next.Generations, gen)
		next.CurrentGeneration = n
		next.ReplayAfter = upTo
		next.MaxSeq = max(next.MaxSeq, maxSeq)
		next.KeptEntries = mergeKept(next.KeptEntries, clean)
		return next, nil
	})
	if err != nil {
		if errors.Is(err, errMaybeLanded) {
			w.log.Warn("wal: seal failed with an unknown outcome; keeping its generation file",
				"generation", n, "path", gen.Path, "err", err)
		} else if derr := w.sh.bucket.Delete(ctx, key); derr != nil {
			w.log.Warn("wal: seal failed; its generation file is garbage", "generation", n, "path", gen.Path, "err", derr)
		}
		if errors.Is(err, ErrFenced) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: seal generation %d: %w", w.sh, n, err)
	}
	w.mu.Lock()
	w.manifest = m
	w.mem.dropThrough(upTo)
	w.mu.Unlock()
	w.tombstoneKept(ctx, upTo)
	if w.deleteEntries(ctx, m, upTo) {
		w.cleanThrough = upTo
	}
	w.log.Debug("wal: sealed", "generation", n, "rows", rows, "bytes", gen.Bytes, "replay_after", upTo)
	return &gen, nil
}

// fencedByManifest records and returns the ErrFenced error for a manifest whose
// writer epoch is not ours.
func (w *Writer) fencedByManifest(m *Manifest) error {
	return w.setFenced(fmt.Errorf("%s: %w: manifest version %d has writer epoch %d, this writer %d",
		w.sh, ErrFenced, m.Version, m.WriterEpoch, w.epoch))
}

// deleteEntries deletes every entry at a position <= upTo, including leftovers of
// earlier seals whose deletes failed, but none that m keeps (kept_entries: see
// "Deleting sealed entries" in fence.go). Best effort: the manifest already says
// these entries are sealed, so a failure only costs storage until the next seal (or
// Cleanup). It reports whether every such entry is gone.
func (w *Writer) deleteEntries(ctx context.Context, m *Manifest, upTo uint64) bool {
	var keys []string
	err := w.sh.bucket.Walk(ctx, entriesPrefix(w.sh.dir, w.sh.name), "", func(o objstore.Object) error {
		if pos, ok := parseEntryPos(o.Key); ok && pos <= upTo && !m.keeps(pos) {
			keys = append(keys, o.Key)
		}
		return nil
	})
	if err == nil {
		err = forEach(ctx, len(keys), replayConcurrency, func(ctx context.Context, i int) error {
			return w.sh.bucket.Delete(ctx, keys[i])
		})
	}
	if err != nil {
		w.log.Warn("wal: deleting sealed entries failed; the next seal retries", "up_to", upTo, "err", err)
		return false
	}
	return true
}

func releaseAll(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}
