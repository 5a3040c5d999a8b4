package wal

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

var (
	// ErrFenced means a newer writer epoch owns the shard. The writer must stop:
	// every later Append and Seal fails with it too. What it acknowledged before is
	// safe (the newer writer replayed it).
	ErrFenced = errclass.New(errclass.Conflict, "WAL writer fenced: a newer writer owns the shard")
	// ErrClosed means Append was called after Close (or after the writer stopped).
	ErrClosed = errclass.New(errclass.Conflict, "WAL writer closed")
	// ErrEpochShared means the shard manifest changed in a way only this writer's
	// epoch may change it: another writer holds the same epoch. That is a writer of
	// a store deleted and created again under the same name (epochs restart with
	// the store). The seal did not land; the memtable is kept.
	ErrEpochShared = errclass.New(errclass.Conflict, "WAL writer epoch shared with another writer")
)

const (
	// replayConcurrency bounds parallel entry reads at open and parallel deletes
	// after a seal: object stores reward parallel requests, but a shard with
	// thousands of unsealed entries must not open thousands of connections.
	replayConcurrency = 16
	// fenceAttempts bounds the retries of one position's fence write at open on
	// errors other than "exists" (a position taken by others is resolved, not
	// retried).
	fenceAttempts = 5
)

// Writer appends to one shard of a store as the owner of one writer epoch. Create it
// with OpenWriter; it is safe for concurrent use.
type Writer struct {
	sh     *shard
	input  *arrow.Schema // what callers append: the store schema without _seq
	schema *arrow.Schema // entries and generations: input + _seq
	opts   Options
	log    *slog.Logger
	id     string // random per Writer: tells this writer's entries from any other's
	epoch  uint64

	// ctx bounds the committer's I/O; it is canceled when the committer must stop
	// without flushing (Close's context ended, or a test abandons the writer).
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the committer goroutine has returned

	qmu        sync.Mutex
	queue      []*pending
	queued     int64         // bytes in queue
	wake       chan struct{} // capacity 1: the queue or the closed flag changed
	spaceFreed chan struct{} // closed (and replaced) when queued bytes drop
	closed     bool
	fenced     error // sticky; wraps ErrFenced

	mu       sync.Mutex
	mem      memtable
	lastPos  uint64    // highest entry position written or replayed; next write: lastPos+1
	manifest *Manifest // newest manifest version this writer has seen

	sealMu sync.Mutex // one seal at a time
	// kept is this epoch's range of kept_entries (zero for a shard's first epoch);
	// keptRewritten reports that a seal rewrote it as fence entries. Both are
	// guarded by sealMu after OpenWriter.
	kept          EntryRange
	keptRewritten bool
	// cleanThrough is the highest position up to which a seal of this writer deleted
	// every entry outside the kept ranges (guarded by sealMu): the next seal may
	// merge the kept ranges below it (mergeKept).
	cleanThrough uint64

	// clock gives _seqs; guarded by mu, so a Promise is ordered with every batch
	// the committer numbers (seeded before the committer starts).
	clock hlc
	// unsureLo is the lowest _seq of rows numbered for an entry whose write has not
	// succeeded yet, 0 if none (guarded by mu). A write that failed may still have
	// landed, and the next write at its position adopts it (resolveTaken): its rows
	// stay possible until a write at that position succeeds.
	unsureLo uint64
	// observed is the highest _seq Observe was told of; the committer moves clock
	// past it before each entry.
	observed atomic.Uint64

	lastBatch int // appends in the previous entry; guarded by qmu, used by the committer
}

// OpenWriter opens shard of the store in dir for writing rows of the input schema
// (the store's columns without _seq; it must have a non-null utf8 "id").
//
// It claims the next writer epoch (a new manifest version with writer_epoch+1,
// retried on a lost race), replays every entry after replay_after into the memtable,
// and writes fence entries above the highest entry any writer wrote: from then on
// the previous writer's next entry write finds a fence and fails with ErrFenced
// (fence.go).
// The returned Writer owns a committer goroutine; call Close to stop it.
func OpenWriter(ctx context.Context, bucket *objstore.Bucket, dir, shard string, input *arrow.Schema, opts ...Option) (*Writer, error) {
	o := buildOptions(opts)
	sh, err := newShard(bucket, dir, shard, o)
	if err != nil {
		return nil, err
	}
	schema, err := storeSchema(input)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sh, err)
	}
	w := &Writer{
		sh:     sh,
		input:  input,
		schema: schema,
		opts:   o,
		id:     randomHex(16),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		clock:  hlc{clock: o.Clock},
	}
	m, err := sh.edit(ctx, nil, "open-"+w.id, func(latest *Manifest) (*Manifest, error) {
		if latest == nil {
			return &Manifest{WriterEpoch: 1}, nil
		}
		next := latest.clone()
		next.WriterEpoch++
		next.Retired = nil // a shard someone writes again is live again
		return next, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: claim writer epoch: %w", sh, err)
	}
	w.epoch, w.manifest = m.WriterEpoch, m
	w.log = sh.logger.With("writer", w.id, "epoch", w.epoch)
	w.clock.observe(m.MaxSeq)

	replayed, holes, top, err := w.replay(ctx)
	if err != nil {
		return nil, err
	}
	keep := keepFrom(replayed, top, m.ReplayAfter) // from what the listing found (rule 4)
	if o.beforeFence != nil {
		o.beforeFence()
	}
	if err := w.fence(ctx, replayed, holes, top); err != nil {
		w.mem.release()
		return nil, err
	}
	if err := w.keepFence(ctx, keep); err != nil {
		w.mem.release()
		return nil, err
	}
	w.ctx, w.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go w.run()
	return w, nil
}

// adopt puts a durable entry's rows into the memtable and moves lastPos to it. It
// takes ownership of e's batches.
func (w *Writer) adopt(pos uint64, e *entry) {
	_, hi, _ := seqRange(e.recs)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clock.observe(hi)
	for _, r := range e.recs {
		w.mem.add(pos, r)
	}
	e.recs = nil
	w.lastPos = pos
}

// setFenced records err (which wraps ErrFenced) so that every later call fails with
// it, and returns it.
func (w *Writer) setFenced(err error) error {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	if w.fenced == nil {
		w.fenced = err
		if w.log != nil {
			w.log.Warn("wal: writer fenced", "err", err)
		}
	}
	return w.fenced
}

// Close stops accepting appends, waits until every queued append has been written
// (or has failed), and stops the committer. It does not seal: unsealed rows stay
// durable in entries and the next writer replays them; Seal may still be called
// after Close. If ctx ends first, queued appends fail, the committer is stopped
// anyway, and ctx's error is returned. Close is idempotent.
func (w *Writer) Close(ctx context.Context) error {
	w.qmu.Lock()
	w.closed = true
	w.qmu.Unlock()
	w.signal()
	select {
	case <-w.done:
		w.cancel()
		return nil
	case <-ctx.Done():
		w.cancel()
		<-w.done
		return ctx.Err()
	}
}

// Stats describes a Writer's state.
type Stats struct {
	Shard    string
	WriterID string
	Epoch    uint64
	// LastEntryPosition is the highest entry position written or replayed.
	LastEntryPosition uint64
	// MemtableRows and MemtableBytes are the unsealed rows (durable in entries).
	MemtableRows  int64
	MemtableBytes int64
	// QueuedBytes are appends waiting for the committer (not yet durable).
	QueuedBytes int64
	// Manifest is the newest shard manifest version this writer has seen.
	Manifest *Manifest
	// Fenced is set once the writer knows a newer epoch owns the shard.
	Fenced bool
}

// Stats returns a snapshot of the writer's state.
func (w *Writer) Stats() Stats {
	w.qmu.Lock()
	queued, fenced := w.queued, w.fenced != nil
	w.qmu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	return Stats{
		Shard:             w.sh.name,
		WriterID:          w.id,
		Epoch:             w.epoch,
		LastEntryPosition: w.lastPos,
		MemtableRows:      w.mem.rows,
		MemtableBytes:     w.mem.bytes,
		QueuedBytes:       queued,
		Manifest:          w.manifest,
		Fenced:            fenced,
	}
}

// Schema returns the schema of the rows this writer stores: the input schema followed
// by _seq.
func (w *Writer) Schema() *arrow.Schema { return w.schema }

// forEach calls fn(ctx, i) for every i in [0, n) with at most limit calls running at
// once, and returns the first error (after every started call has returned; calls
// not yet started when an error occurs are skipped).
func forEach(ctx context.Context, n, limit int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		sem      = make(chan struct{}, limit)
		skipped  error
	)
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if skipped = ctx.Err(); skipped != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = skipped
	}
	return firstErr
}
