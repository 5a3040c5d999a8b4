package wal

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// Fencing
//
// Entries live at positions 1, 2, 3, ...; every entry is created with put-if-absent
// and carries its writer's id and epoch. Three rules make a stale writer unable to
// lose or hide what it acknowledged:
//
//  1. Density. A writer's committer writes position p only after p-1 exists (it
//     wrote or adopted it), and after a failed write it retries the SAME position
//     with its next batch: it never skips one. So the positions a writer writes form
//     one contiguous run, each one above the last position it saw.
//  2. Opening. A new writer B first claims epoch e+1 in the manifest, then lists the
//     entries above replay_after (the stale writer A can no longer move
//     replay_after: its seal's manifest edit sees e+1). With M the highest position
//     listed, every position in (replay_after, M] exists, except holes inside a range
//     claimed by an earlier open that died half-way (rule 2's fences say where such a
//     range starts: gap_from); B reads them all. Then B claims the holes and the range
//     (M, M+k] at once: a fence entry (no rows) at each position, with put-if-absent,
//     in parallel. A position B loses holds someone else's entry: an older epoch's is
//     adopted (replayed), a newer epoch's means B itself is fenced. If B loses M+k
//     itself, A is still writing above B; B claims (M+k, M+3k] and so on, doubling k
//     (up to maxLeap): A writes one position per object write, B k positions per
//     round, so B overtakes it. A fixed range of 1 is not enough: against a busy
//     stale writer, reading each lost position before trying the next one loses
//     every race (seen against Azurite).
//  3. Taken positions. When a write finds its position taken, the entry there
//     decides: written by this writer (a write whose response was lost) - adopt its
//     rows and go on; written by an older epoch - adopt it too; written by a newer
//     epoch - this writer is fenced (ErrFenced, for this and every later call).
//
// So once B's open has finished, every position up to B's top fence F exists and B
// has read every entry below F that is not its own. A's run of positions (rule 1)
// cannot pass a B entry without adopting it, which rule 3 forbids: A's next write
// lands on an existing position, walks over its own entries and older ones, reaches
// one of B's fences and stops with ErrFenced. Every entry A wrote lies below that
// fence, so B replayed it: everything A acknowledged is in B's memtable. A's seal
// fails too: its manifest edit sees writer_epoch e+1.

// Deleting sealed entries
//
// A seal deletes the entries it sealed, and a deleted position is free again for
// put-if-absent: were a stale writer's next position deleted, its write there would
// succeed below replay_after, where no replay looks, and it would acknowledge rows
// that are lost. So an opening writer B records a range of positions in the manifest
// (kept_entries) before it accepts an append, and seals never delete recorded
// positions. The range must reach down to the next position of the one writer that
// may still acknowledge rows without being held by an earlier range:
//
//  4. Kept range. Let A be the last writer before B whose open completed (recorded
//     its range, or was the shard's first). An open between A and B died or lost
//     the shard before recording its range: it wrote no rows, but its fences may lie
//     above A's next position (its top was A's own write whose answer was lost and
//     that A retries, or it left a hole in its fence range), so A's next position can
//     be below B's top M. A writes densely (rule 1), so its next position is at
//     least that of every entry it wrote; every other entry with rows lies below A's
//     positions (writers before A are held below A's fences, by this rule at A's open;
//     openers write no rows). And A's next position is above replay_after (A's seals
//     never moved it past A's last position). So B keeps from the highest position
//     above replay_after that holds rows (if none does, from replay_after+1, or M if
//     that is lower) up to its highest fence F. Once B's open has finished every
//     position in that range exists, so A finds its next position taken, walks over
//     its own and older entries and stops with ErrFenced at a fence of a newer epoch,
//     at F at the latest. Each writer before A is held the same way by the range of
//     the first open after it that completed, so every stale epoch is stopped at once.
//
// Usually the highest entry with rows is M or just below it, and each open keeps a
// few positions; the first seal that covers them rewrites them as fence entries, so
// what stays is a few hundred bytes per open. No range can ever be dropped (a stale
// writer may be a paused process that wakes at any time), but once a seal has
// deleted everything else below them, later seals merge them into one range over
// the emptied gaps (mergeKept), so the manifest does not grow with every open.

const (
	// maxLeap caps the range one fence round claims. 256 empty entries are ~100 KiB
	// of requests, made only while a stale writer keeps winning races.
	maxLeap = 256
	// maxFenceRounds bounds the rounds of an open against a stale writer that keeps
	// writing above the range claimed (it cannot, once the range outgrows its rate).
	maxFenceRounds = 16
)

// found is an entry some other writer (or an earlier epoch) wrote that a new writer
// adopts.
type found struct {
	pos uint64
	e   *entry
}

func releaseFound(fs []found) {
	for _, f := range fs {
		f.e.release()
	}
}

// replay lists and reads every entry above the claimed manifest's replay_after. It
// returns them in position order, the holes a fence's claimed range explains (to be
// claimed by this writer's fence), and the highest position found (replay_after if
// none). Any other hole is lost data: ErrCorrupt, because sealing around it would
// hide that acknowledged rows are gone.
func (w *Writer) replay(ctx context.Context) (entries []found, holes []uint64, top uint64, err error) {
	after := w.manifest.ReplayAfter
	var positions []uint64
	err = w.sh.bucket.Walk(ctx, entriesPrefix(w.sh.dir, w.sh.name), "", func(o objstore.Object) error {
		if pos, ok := parseEntryPos(o.Key); ok && pos > after {
			positions = append(positions, pos)
		}
		return nil
	})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%s: list entries: %w", w.sh, err)
	}
	slices.Sort(positions)
	read := make([]found, len(positions))
	defer func() {
		if err != nil {
			for _, f := range read {
				if f.e != nil {
					f.e.release()
				}
			}
		}
	}()
	err = forEach(ctx, len(positions), replayConcurrency, func(ctx context.Context, i int) error {
		key := entryKey(w.sh.dir, w.sh.name, positions[i])
		data, err := w.sh.bucket.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("%s: replay: %w", w.sh, err)
		}
		e, err := decodeEntry(key, data, w.schema)
		read[i] = found{pos: positions[i], e: e}
		return err
	})
	if err != nil {
		return nil, nil, 0, err
	}
	entries = read
	top = after
	if len(positions) > 0 {
		top = positions[len(positions)-1]
	}
	// Walk down from the top: a hole at p is explained if some entry above it claimed
	// a range starting at or below p.
	gapFrom := top + 1
	next := len(entries) - 1
	for p := top; p > after; p-- {
		if next >= 0 && entries[next].pos == p {
			if e := entries[next].e; e.epoch > w.epoch {
				// A newer writer has already written here: we lost the shard between
				// claiming our epoch and replaying.
				return nil, nil, 0, w.setFenced(fmt.Errorf("%s: %w: entry %d was written by epoch %d, this writer has epoch %d",
					w.sh, ErrFenced, p, e.epoch, w.epoch))
			} else if e.gapFrom > 0 {
				gapFrom = min(gapFrom, e.gapFrom)
			}
			next--
			continue
		}
		if p < gapFrom {
			return nil, nil, 0, fmt.Errorf("%s: %w: entry %d is missing but entry %d exists (entries above replay_after %d must be dense)",
				w.sh, ErrCorrupt, p, top, after)
		}
		holes = append(holes, p)
	}
	slices.Reverse(holes)
	return entries, holes, top, nil
}

// fence claims the holes and a range of positions above top (rule 2), adopts every
// entry found in order, and leaves lastPos at this writer's highest fence.
func (w *Writer) fence(ctx context.Context, adopted []found, holes []uint64, top uint64) (err error) {
	defer func() {
		if err != nil {
			releaseFound(adopted)
			err = fmt.Errorf("%s: fence: %w", w.sh, err)
		}
	}()
	claim := holes
	leap := uint64(1)
	for round := 1; ; round++ {
		gapFrom := top + 1
		if len(claim) > 0 {
			gapFrom = claim[0]
		}
		fence := top + leap
		for p := top + 1; p <= fence; p++ {
			claim = append(claim, p)
		}
		lost, err := w.claim(ctx, claim, gapFrom)
		if err != nil {
			return err
		}
		adopted = append(adopted, lost...)
		top = fence
		if len(lost) == 0 || lost[len(lost)-1].pos != fence {
			break // our fence holds the top position
		}
		if round == maxFenceRounds {
			return fmt.Errorf("an older writer kept writing above %d fence rounds, the last one up to position %d", round, fence)
		}
		claim, leap = nil, min(2*leap, maxLeap)
	}
	slices.SortFunc(adopted, func(a, b found) int {
		switch {
		case a.pos < b.pos:
			return -1
		case a.pos > b.pos:
			return 1
		}
		return 0
	})
	rows := 0
	for _, f := range adopted {
		if f.e.epoch < w.epoch && f.e.rows > 0 {
			rows += int(f.e.rows)
		}
		w.adopt(f.pos, f.e)
	}
	w.lastPos = top
	w.log.Debug("wal: opened", "replayed_entries", len(adopted), "rows", rows, "last_position", top)
	return nil
}

// claim writes a fence entry at each position with put-if-absent, in parallel, and
// returns the entries of older epochs found at positions it lost, in position order.
func (w *Writer) claim(ctx context.Context, positions []uint64, gapFrom uint64) ([]found, error) {
	data, err := encodeEntry(w.schema, nil, w.sh.name, w.id, w.epoch, gapFrom)
	if err != nil {
		return nil, err
	}
	got := make([]*entry, len(positions))
	err = forEach(ctx, len(positions), replayConcurrency, func(ctx context.Context, i int) error {
		e, err := w.claimOne(ctx, positions[i], data)
		got[i] = e
		return err
	})
	var lost []found
	for i, e := range got {
		if e != nil {
			lost = append(lost, found{pos: positions[i], e: e})
		}
	}
	if err != nil {
		releaseFound(lost)
		return nil, err
	}
	return lost, nil
}

// claimOne writes the fence entry data at pos. It returns nil if the position is
// this writer's (now, or from an earlier attempt whose response was lost), or the
// older epoch's entry that holds it.
func (w *Writer) claimOne(ctx context.Context, pos uint64, data []byte) (*entry, error) {
	key := entryKey(w.sh.dir, w.sh.name, pos)
	var err error
	for attempt := 1; attempt <= fenceAttempts; attempt++ {
		if attempt > 1 {
			if serr := sleepCtx(ctx, raceRetry.Delay(attempt)); serr != nil {
				return nil, serr
			}
		}
		err = w.sh.bucket.PutIfAbsent(ctx, key, data)
		if err == nil {
			return nil, nil
		}
		if !errors.Is(err, objstore.ErrExists) {
			continue
		}
		var raw []byte
		if raw, err = w.sh.bucket.Get(ctx, key); err != nil {
			continue
		}
		e, err := decodeEntry(key, raw, w.schema)
		if err != nil {
			return nil, err
		}
		switch {
		case e.writerID == w.id:
			e.release()
			return nil, nil
		case e.epoch < w.epoch:
			return e, nil
		case e.epoch > w.epoch:
			e.release()
			return nil, w.setFenced(fmt.Errorf("%s: %w: entry %d was written by epoch %d, this writer has epoch %d",
				w.sh, ErrFenced, pos, e.epoch, w.epoch))
		default:
			e.release()
			return nil, fmt.Errorf("%s: %w: entry %d has this writer's epoch %d but writer id %s, not %s",
				w.sh, ErrCorrupt, pos, e.epoch, e.writerID, w.id)
		}
	}
	return nil, fmt.Errorf("claim entry position %d: %w", pos, err)
}

// keepFrom returns where this open's kept range starts (rule 4): the highest replayed
// position that holds rows, or replay_after+1 if none does, but never above top (the
// highest position found). No writer of an older epoch that may still acknowledge
// rows writes its next entry below it.
func keepFrom(replayed []found, top, replayAfter uint64) uint64 {
	from := min(top, replayAfter+1)
	for _, f := range replayed { // in position order
		if f.e.rows > 0 {
			from = f.pos
		}
	}
	return max(from, 1)
}

// keepFence records [from, w.lastPos] (keepFrom through this open's highest fence)
// in the manifest's kept_entries, so no seal deletes it. The first epoch of a
// shard has no predecessor to stop and records nothing.
func (w *Writer) keepFence(ctx context.Context, from uint64) error {
	if w.epoch <= 1 {
		return nil
	}
	r := EntryRange{Epoch: w.epoch, From: from, To: w.lastPos}
	m, err := w.sh.edit(ctx, w.manifest, "keep-"+w.id, func(cur *Manifest) (*Manifest, error) {
		switch {
		case cur == nil:
			return nil, fmt.Errorf("%s: %w", w.sh, ErrNoShard)
		case cur.WriterEpoch != w.epoch:
			return nil, w.fencedByManifest(cur)
		}
		next := cur.clone()
		next.KeptEntries = append(next.KeptEntries, r)
		return next, nil
	})
	if err != nil {
		return fmt.Errorf("%s: record the fence range: %w", w.sh, err)
	}
	w.manifest = m
	w.kept = r
	return nil
}

// tombstoneKept rewrites this epoch's kept range as fence entries once a seal has
// covered it (best effort: a position that keeps an older writer's entry instead
// stops a stale writer just as well, it only takes more space).
func (w *Writer) tombstoneKept(ctx context.Context, upTo uint64) {
	if w.kept.To == 0 || w.kept.To > upTo || w.keptRewritten {
		return
	}
	data, err := encodeEntry(w.schema, nil, w.sh.name, w.id, w.epoch, 0)
	if err == nil {
		err = forEach(ctx, int(w.kept.To-w.kept.From+1), replayConcurrency, func(ctx context.Context, i int) error {
			return w.sh.bucket.Put(ctx, entryKey(w.sh.dir, w.sh.name, w.kept.From+uint64(i)), data)
		})
	}
	if err != nil {
		w.log.Warn("wal: rewriting the kept entries as fences failed; they keep their rows until a later seal", "err", err)
		return
	}
	w.keptRewritten = true
}
