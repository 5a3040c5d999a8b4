package wal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// Group commit
//
// Append enqueues its batch and waits. One committer goroutine per Writer takes
// everything queued, lingers briefly for more (up to Options.Linger, until as many
// appends as in the previous entry are queued or MaxEntryBytes is reached) so that
// concurrent appenders share one object write, concatenates the
// batches into one record batch, stamps _seq, and writes ONE entry. Every caller in
// the batch is acknowledged after that write succeeds; if it fails, every caller gets
// the error and nothing of the batch is acknowledged. One writer per shard and one
// write in flight per writer is also what keeps positions dense (fence.go).
//
// The fencing protocol that makes a stale writer stop is described in fence.go.

// maxTakenPositions bounds how many taken positions one write walks over. A writer
// walks over at most its own one landed-but-failed write plus entries a stale writer
// raced in before this writer's fence, so a long walk means something else is wrong.
const maxTakenPositions = 1024

// pending is one Append waiting for the committer.
type pending struct {
	rec   arrow.RecordBatch
	bytes int64
	// after is the causal token the append must be ordered after (0: none); seq is
	// set by the committer, before done, to the highest _seq of the append's rows.
	after, seq uint64
	// done receives the outcome exactly once. Buffered, so the committer never waits
	// for a caller that stopped waiting (its context ended).
	done chan error
}

// Append durably appends rec (the input schema; every row gets a _seq) and returns
// after the entry holding it has been written. Concurrent appends are written
// together in one entry.
//
// A batch that does not fit the schema is rejected with ErrSchema, naming the
// column, before anything is queued. After Close it fails with ErrClosed, once the
// writer is fenced with ErrFenced. If ctx ends while the append waits it returns
// ctx's error, but the batch may still be written (durable but unacknowledged: it
// will appear after the next seal). Append does not keep rec after it returns nil;
// the caller keeps its own reference either way.
func (w *Writer) Append(ctx context.Context, rec arrow.RecordBatch) error {
	_, err := w.AppendAfter(ctx, rec, 0)
	return err
}

// AppendAfter is Append for a caller that carries a causal token: every row gets a
// _seq above after (the token an earlier write answered, through any worker), and
// it returns the highest _seq it gave, the token for the caller's next request. So
// one client's writes, each carrying the last answer's token, are ordered by _seq
// as they were made, whatever the writers' clocks say (hlc.go). An empty batch
// returns after.
func (w *Writer) AppendAfter(ctx context.Context, rec arrow.RecordBatch, after uint64) (uint64, error) {
	if err := checkBatch(w.input, rec); err != nil {
		return 0, fmt.Errorf("%s: %w", w.sh, err)
	}
	if rec.NumRows() == 0 {
		w.qmu.Lock()
		defer w.qmu.Unlock()
		return after, w.refuseLocked()
	}
	p := &pending{rec: rec, bytes: recordBytes(rec), after: after, done: make(chan error, 1)}
	if err := w.enqueue(ctx, p); err != nil {
		return 0, err
	}
	select {
	case err := <-p.done:
		return p.seq, err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Observe makes every later _seq of this writer greater than seq: a worker tells
// its writer the highest _seq it has seen in other shards, which keeps writes made
// after a read ordered after what the read showed, within this worker.
func (w *Writer) Observe(seq uint64) {
	for {
		cur := w.observed.Load()
		if seq <= cur || w.observed.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// refuseLocked returns why no append may be queued now, if so. Fenced wins over
// closed: it is the more useful thing to know.
func (w *Writer) refuseLocked() error {
	switch {
	case w.fenced != nil:
		return w.fenced
	case w.closed:
		return fmt.Errorf("%s: %w", w.sh, ErrClosed)
	}
	return nil
}

// enqueue queues p, waiting while the queue holds MaxQueuedBytes (one append always
// fits into an empty queue, however large).
func (w *Writer) enqueue(ctx context.Context, p *pending) error {
	w.qmu.Lock()
	for {
		if err := w.refuseLocked(); err != nil {
			w.qmu.Unlock()
			return err
		}
		if w.queued == 0 || w.queued+p.bytes <= w.opts.MaxQueuedBytes {
			break
		}
		if w.spaceFreed == nil {
			w.spaceFreed = make(chan struct{})
		}
		freed := w.spaceFreed
		w.qmu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
		w.qmu.Lock()
	}
	p.rec.Retain() // released by the committer once the outcome is known
	w.queue = append(w.queue, p)
	w.queued += p.bytes
	w.qmu.Unlock()
	w.signal()
	return nil
}

// signal wakes the committer without blocking.
func (w *Writer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run is the committer goroutine.
func (w *Writer) run() {
	defer close(w.done)
	for {
		batch := w.take()
		if batch == nil {
			return
		}
		err := w.commit(batch)
		for _, p := range batch {
			p.done <- err
			p.rec.Release()
		}
	}
}

// take waits for queued appends, lingers for more, and dequeues at most
// MaxEntryBytes of them (at least one). It returns nil when the writer is closed and
// the queue is empty, or when the committer was stopped.
func (w *Writer) take() []*pending {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	for len(w.queue) == 0 {
		if w.closed || w.ctx.Err() != nil {
			return nil
		}
		w.waitLocked(nil)
	}
	// Linger while more appenders are likely to join: until as many appends are
	// queued as the previous entry held (appenders acknowledged by it tend to come
	// straight back), the entry is full, or Linger has passed. Waiting for the
	// previous batch size rather than always for Linger keeps a lone appender from
	// paying the linger on every append, and lets a full house of appenders go as
	// soon as the last one is back. Never linger when closing: flush now.
	if w.opts.Linger > 0 && !w.closed && w.lingerFor(w.lastBatch) {
		t := time.NewTimer(w.opts.Linger)
		for !w.closed && w.lingerFor(w.lastBatch) && w.waitLocked(t.C) {
		}
		t.Stop()
	}
	n, size := 0, int64(0)
	for n < len(w.queue) && (n == 0 || size+w.queue[n].bytes <= w.opts.MaxEntryBytes) {
		size += w.queue[n].bytes
		n++
	}
	w.lastBatch = n
	batch := slices.Clone(w.queue[:n])
	clear(w.queue[:n])
	w.queue = w.queue[n:]
	w.queued -= size
	if w.spaceFreed != nil {
		close(w.spaceFreed)
		w.spaceFreed = nil
	}
	return batch
}

// lingerFor reports whether the committer should wait for more appends: fewer than
// target are queued and the entry is not full.
func (w *Writer) lingerFor(target int) bool {
	return len(w.queue) < target && w.queued < w.opts.MaxEntryBytes
}

// waitLocked releases qmu until the queue changes (true), or timer fires or the
// committer is stopped (false).
func (w *Writer) waitLocked(timer <-chan time.Time) bool {
	w.qmu.Unlock()
	defer w.qmu.Lock()
	select {
	case <-w.wake:
		return true
	case <-timer:
		return false
	case <-w.ctx.Done():
		return false
	}
}

// commit writes one entry holding every batch of the group.
func (w *Writer) commit(batch []*pending) error {
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w: committer stopped before the write: %w", w.sh, ErrClosed, err)
	}
	w.qmu.Lock()
	fenced := w.fenced
	w.qmu.Unlock()
	if fenced != nil {
		return fenced
	}
	recs := make([]arrow.RecordBatch, len(batch))
	var after uint64
	for i, p := range batch {
		recs[i] = p.rec
		after = max(after, p.after)
	}
	his, err := w.writeEntry(w.ctx, recs, after)
	for i, p := range batch {
		if err == nil {
			p.seq = his[i]
		}
	}
	return err
}

// writeEntry writes recs as one entry at the next position, resolving positions
// taken by others as the fencing rules say (fence.go). On success the rows
// are in the memtable and lastPos is the entry's position. A failed write leaves
// lastPos alone, so the next write retries the same position. his[i] is the highest
// _seq given to recs[i].
func (w *Writer) writeEntry(ctx context.Context, recs []arrow.RecordBatch, after uint64) (his []uint64, err error) {
	for walked := 0; ; walked++ {
		var rec arrow.RecordBatch
		if len(recs) > 0 {
			// Built per attempt: after walking over a taken position the rows get
			// fresh sequence numbers, above anything adopted from that position.
			// Numbered under mu, so a Promise sees them as unsure until they are
			// in the memtable.
			w.mu.Lock()
			w.clock.observe(after)
			w.clock.observe(w.observed.Load())
			rec, his, err = buildBatch(w.schema, recs, &w.clock)
			if err == nil && rec.NumRows() > 0 {
				if lo, _, _ := seqRange([]arrow.RecordBatch{rec}); w.unsureLo == 0 || lo < w.unsureLo {
					w.unsureLo = lo
				}
			}
			w.mu.Unlock()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", w.sh, err)
			}
		}
		data, err := encodeEntry(w.schema, rec, w.sh.name, w.id, w.epoch, 0)
		if err != nil {
			if rec != nil {
				rec.Release()
			}
			return nil, fmt.Errorf("%s: %w", w.sh, err)
		}
		w.mu.Lock()
		pos := w.lastPos + 1
		w.mu.Unlock()
		err = w.sh.bucket.PutIfAbsent(ctx, entryKey(w.sh.dir, w.sh.name, pos), data)
		if err == nil {
			w.mu.Lock()
			if rec != nil {
				w.mem.add(pos, rec)
			}
			w.lastPos = pos
			// Every earlier attempt was at this position (a failed write leaves
			// lastPos alone): it did not land, or resolveTaken adopted it.
			w.unsureLo = 0
			w.mu.Unlock()
			return his, nil
		}
		if rec != nil {
			rec.Release()
		}
		if !errors.Is(err, objstore.ErrExists) {
			return nil, fmt.Errorf("%s: write entry %d: %w", w.sh, pos, err)
		}
		if walked >= maxTakenPositions {
			return nil, fmt.Errorf("%s: walked over %d taken entry positions up to %d without finding a free one", w.sh, walked, pos)
		}
		if err := w.resolveTaken(ctx, pos); err != nil {
			return nil, err
		}
	}
}

// resolveTaken handles a put-if-absent that found position pos taken (rule 3 in
// fence.go): adopt the entry there and return nil, or return ErrFenced.
func (w *Writer) resolveTaken(ctx context.Context, pos uint64) error {
	key := entryKey(w.sh.dir, w.sh.name, pos)
	data, err := w.sh.bucket.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		// Taken, then deleted: only the owning epoch's seal deletes entries, and never
		// one above its own last position, so the owner is someone else. Confirm with
		// the manifest rather than assume.
		m, merr := w.sh.loadLatest(ctx, w.currentManifest())
		if merr != nil {
			return fmt.Errorf("%s: entry %d is taken but unreadable (%v); checking the manifest: %w", w.sh, pos, err, merr)
		}
		if m.WriterEpoch != w.epoch {
			return w.setFenced(fmt.Errorf("%s: %w: entry %d was taken and the manifest has writer epoch %d, this writer %d",
				w.sh, ErrFenced, pos, m.WriterEpoch, w.epoch))
		}
		return fmt.Errorf("%s: entry %d is taken but unreadable: %w", w.sh, pos, err)
	}
	if err != nil {
		return fmt.Errorf("%s: read taken entry %d: %w", w.sh, pos, err)
	}
	e, err := decodeEntry(key, data, w.schema)
	if err != nil {
		return err
	}
	switch {
	case e.writerID == w.id:
		// An earlier write of ours whose response was lost. Its appenders were told it
		// failed, but the rows are durable and a later writer would replay them, so
		// the memtable must hold them for the next seal.
		w.adopt(pos, e)
		return nil
	case e.epoch > w.epoch:
		e.release()
		return w.setFenced(fmt.Errorf("%s: %w: entry %d was written by epoch %d, this writer has epoch %d",
			w.sh, ErrFenced, pos, e.epoch, w.epoch))
	case e.epoch < w.epoch:
		w.log.Warn("wal: adopted an entry of an older writer epoch", "position", pos, "entry_epoch", e.epoch, "rows", e.rows)
		w.adopt(pos, e)
		return nil
	default:
		e.release()
		return fmt.Errorf("%s: %w: entry %d has this writer's epoch %d but writer id %s, not %s",
			w.sh, ErrCorrupt, pos, e.epoch, e.writerID, w.id)
	}
}

func (w *Writer) currentManifest() *Manifest {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.manifest
}
