package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

var (
	// ErrDeleted means the store was deleted while this handle was open.
	ErrDeleted = errclass.New(errclass.Gone, "store deleted")
	// ErrOverloaded means a read would fan out over more pending generations than
	// Config.RefuseGenerations, or an add would add to a store with that many
	// (AdmitAdd); merges must catch up first.
	ErrOverloaded = errclass.New(errclass.Overloaded, "too many pending WAL generations")
)

// Config is what every store handle of a worker shares.
type Config struct {
	Bucket *objstore.Bucket
	// Shard is this worker's shard name in every store (its instance id).
	Shard string
	// Generations caches decoded generations for reads and merges.
	Generations *wal.GenerationCache
	// WarnGenerations and RefuseGenerations bound a read's fan-out (256, 4096),
	// and are where adds start to wait and are refused (AdmitAdd).
	WarnGenerations, RefuseGenerations int
	// MaxAddDelay is the longest an add waits for the store's backpressure, at one
	// generation short of RefuseGenerations (DefaultMaxAddDelay; negative: adds
	// never wait, and are still refused at RefuseGenerations).
	MaxAddDelay time.Duration
	// SealAfterBytes seals a store's memtable as soon as it holds this many bytes
	// (64 MiB), so memory stays bounded between flush sweeps however fast rows come.
	SealAfterBytes int64
	// SnapshotTTL is how stale a read's view of other shards and of the base table
	// may be before the read refreshes it (1 s). Own seals and merges update the
	// snapshot at once.
	SnapshotTTL  time.Duration
	TableOptions []table.Option
	WALOptions   []wal.Option
	// ThrottleRetry is how long a request the store throttled (refused for its
	// rate, not performed) is resent before its error is returned (30 s; negative:
	// never resent).
	ThrottleRetry time.Duration
	Clock         clock.Clock
	Logger        *slog.Logger
	// OnSlowRead, if set, is told the pending-generation count of a read above
	// WarnGenerations (for a metric).
	OnSlowRead func(target registry.Target, pending int)
	// OnRead, if set, is told the pending-generation count of every read (for
	// the rollout_wal_pending_generations histogram).
	OnRead func(target registry.Target, pending int)
	// OnSnapshot, if set, is told of every new snapshot of a store (its open, a
	// seal, a merge, a refresh): what is pending may have changed. It runs under
	// the store's snapshot lock and must not block (the worker's pending record
	// only wakes its publisher).
	OnSnapshot func(target registry.Target)
	// Horizon, if set, registers every writer's shard for the change feed when it
	// opens and leaves it when it closes (nil without etcd: no feed).
	Horizon HorizonKeeper
	// StorePending, if set, counts a store's pending generations over every
	// worker's shard from the workers' published entries (pending.View.Generations),
	// for add backpressure: a worker that only writes refreshes no snapshot of the
	// other shards, and would otherwise slow adds only on its own shard's count.
	StorePending func(target registry.Target) int
}

func (c *Config) setDefaults() {
	if c.WarnGenerations == 0 {
		c.WarnGenerations = DefaultWarnGenerations
	}
	if c.RefuseGenerations == 0 {
		c.RefuseGenerations = DefaultRefuseGenerations
	}
	if c.MaxAddDelay == 0 {
		c.MaxAddDelay = DefaultMaxAddDelay
	}
	if c.SealAfterBytes <= 0 {
		c.SealAfterBytes = 64 << 20
	}
	if c.SnapshotTTL == 0 {
		c.SnapshotTTL = time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Generations == nil {
		c.Generations = wal.NewGenerationCache(256 << 20)
	}
	if c.ThrottleRetry == 0 {
		c.ThrottleRetry = objstore.DefaultThrottleRetry
	}
	// Every request of the store's WAL, table and merges is resent while the store
	// throttles it, within the caller's deadline: one policy for all of them.
	if c.Bucket != nil {
		c.Bucket = objstore.WithRetry(c.Bucket, objstore.ThrottleBackoff, c.Clock, c.ThrottleRetry)
	}
}

// Snapshot is an immutable view of a store: one base version plus every shard's
// manifest. Reads merge the base with the generations above each shard's watermark.
type Snapshot struct {
	Base  *table.Manifest
	WAL   *wal.Snapshot
	taken time.Time
}

// Pending returns the generations a read over s must consult.
func (s *Snapshot) Pending() []wal.PendingGeneration { return s.WAL.Pending(s.Base.MergedGenerations) }

// PendingCount is the number of generations above the watermarks.
func (s *Snapshot) PendingCount() int { return s.WAL.PendingGenerations(s.Base.MergedGenerations) }

// Store is an open store on this worker. Use it through Stores.
type Store struct {
	cfg   *Config
	entry registry.Entry
	input *arrow.Schema
	blobs []string // BlobColumns
	table *table.Table
	log   *slog.Logger

	// snap is the current snapshot: readers load it, nothing else. Swaps compose the
	// next value under snapMu, held for nanoseconds and never across I/O, so no
	// reader ever waits for a seal, a refresh or a merge's commit.
	snap   atomic.Pointer[Snapshot]
	snapMu sync.Mutex

	refreshMu sync.Mutex // one snapshot refresh at a time

	// pinned is the manifest the last read at a version loaded (version.go), so
	// the pages of a list at one version read it once; one manifest per handle,
	// whatever versions clients ask for.
	pinned atomic.Pointer[table.Manifest]

	// maxSeq is the highest _seq this handle has seen: causal tokens of requests
	// and the shard manifests of its snapshots. The WAL writer is kept past it.
	maxSeq atomic.Uint64

	writerMu sync.Mutex // guards writer and deleted; held across OpenWriter only
	writer   *wal.Writer
	deleted  bool
	// adopting marks a handle of Stores.OpenShard: its writer, once fenced, stays
	// fenced. The shard's own worker came back and took it; reopening would take
	// it back, and the two would fence each other in turn.
	adopting bool

	// aliveUntil is when appends must next confirm the store is still registered:
	// another worker may have deleted it, and this handle would otherwise keep
	// writing WAL entries into a deleted directory.
	aliveMu    sync.Mutex
	aliveUntil time.Time
}

func newStore(ctx context.Context, cfg *Config, e registry.Entry, tb *table.Table) (*Store, error) {
	input, blobs, err := inputSchema(e)
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, entry: e, input: input, blobs: blobs, table: tb, log: cfg.Logger.With("store", e.Name, "kind", e.Kind)}
	ws, err := wal.LoadSnapshot(ctx, cfg.Bucket, e.URI)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", e.Target(), err)
	}
	s.snap.Store(&Snapshot{Base: tb.Latest(), WAL: ws, taken: cfg.Clock.Now()})
	s.snapshotChanged()
	return s, nil
}

// Entry is the store's registry entry.
func (s *Store) Entry() registry.Entry { return s.entry }

// BlobColumns are the store's blob columns: a rollout store's binary_payload, a
// generic store's binary columns declared "blob": true. Their bytes are stored
// in the row like any column's; lists leave them out, and a client reads them
// one row at a time. The caller must not modify the slice.
func (s *Store) BlobColumns() []string { return s.blobs }

// ColumnsExcept returns the store's columns, in schema order, but those omit
// names: what a read that leaves omit out of its answer asks the base table for
// (ListOptions.Columns, GetMany's cols), so that a blob it does not answer is not
// read from storage at all.
func (s *Store) ColumnsExcept(omit []string) []string {
	out := make([]string, 0, len(s.input.Fields()))
	for _, f := range s.input.Fields() {
		if !slices.Contains(omit, f.Name) {
			out = append(out, f.Name)
		}
	}
	return out
}

// Target is the store's target.
func (s *Store) Target() registry.Target { return s.entry.Target() }

// Table is the store's base table.
func (s *Store) Table() *table.Table { return s.table }

// Bucket is where the store lives.
func (s *Store) Bucket() *objstore.Bucket { return s.cfg.Bucket }

// Shard is this worker's shard of the store.
func (s *Store) Shard() string { return s.cfg.Shard }

// WALOptions are the options this worker opens WAL writers with.
func (s *Store) WALOptions() []wal.Option { return s.cfg.WALOptions }

// Generations is the worker's decoded-generation cache.
func (s *Store) Generations() *wal.GenerationCache { return s.cfg.Generations }

// Snapshot returns the current snapshot without I/O or locks.
func (s *Store) Snapshot() *Snapshot { return s.snap.Load() }

// swap replaces the snapshot with next(current) atomically with respect to other
// swaps. next must not do I/O.
func (s *Store) swap(next func(cur *Snapshot) *Snapshot) {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if n := next(s.snap.Load()); n != nil {
		s.snap.Store(n)
		s.snapshotChanged()
	}
}

func (s *Store) snapshotChanged() {
	if s.cfg.OnSnapshot != nil {
		s.cfg.OnSnapshot(s.Target())
	}
}

// Writer returns this worker's WAL writer for the store, opening it (claiming the
// next writer epoch and replaying) on first use. A worker that only reads a store
// never creates a shard in it.
//
// A writer fenced by a newer epoch (an adopter took the shard while this worker
// was thought gone) is replaced by a new one: its acknowledged rows are in entries
// the adopter replayed, so the new writer, which replays what the adopter left
// unsealed, loses nothing and repeats nothing. The call that found it fenced has
// failed already; later ones succeed.
func (s *Store) Writer(ctx context.Context) (*wal.Writer, error) {
	s.writerMu.Lock()
	defer s.writerMu.Unlock()
	if s.deleted {
		return nil, fmt.Errorf("store %s: %w", s.Target(), ErrDeleted)
	}
	if s.writer != nil && s.writer.Stats().Fenced && s.adopting {
		return nil, fmt.Errorf("store %s: shard %s: %w (its worker took it back)", s.Target(), s.cfg.Shard, wal.ErrFenced)
	}
	if s.writer != nil && s.writer.Stats().Fenced {
		s.log.Warn("the WAL writer of this shard was fenced by a newer epoch; opening it again", "shard", s.cfg.Shard)
		if err := s.writer.Close(ctx); err != nil {
			s.log.Warn("closing the fenced WAL writer", "err", err)
		}
		s.writer = nil
	}
	if s.writer != nil {
		return s.writer, nil
	}
	w, err := wal.OpenWriter(ctx, s.cfg.Bucket, s.entry.URI, s.cfg.Shard, s.input, s.cfg.WALOptions...)
	if err != nil {
		return nil, fmt.Errorf("store %s: open WAL shard %s: %w", s.Target(), s.cfg.Shard, err)
	}
	w.Observe(s.maxSeq.Load())
	if err := s.openHorizon(ctx, w); err != nil {
		if cerr := w.Close(ctx); cerr != nil {
			s.log.Warn("closing a WAL writer whose horizon was not registered", "err", cerr)
		}
		return nil, err
	}
	s.writer = w
	return w, nil
}

// residentWriter returns the writer if it is open, without opening it.
func (s *Store) residentWriter() *wal.Writer {
	s.writerMu.Lock()
	defer s.writerMu.Unlock()
	return s.writer
}

// WriterStats returns the stats of this worker's WAL writer of the store, and false
// if no writer is open (the worker has not written the store through this handle).
// It never opens a writer, so it never claims a writer epoch.
func (s *Store) WriterStats() (wal.Stats, bool) {
	w := s.residentWriter()
	if w == nil {
		return wal.Stats{}, false
	}
	return w.Stats(), true
}

// Append durably logs rec (input schema) in this worker's shard. It returns after
// the WAL entry holding the rows is written; the rows become visible to reads at the
// next seal.
func (s *Store) Append(ctx context.Context, rec arrow.RecordBatch) error {
	_, err := s.AppendAfter(ctx, rec, 0)
	return err
}

// AppendAfter is Append ordered after a causal token (wal.Writer.AppendAfter): the
// rows' _seq are above after and above every _seq this handle has seen. It returns
// the highest _seq given, the token of this write.
func (s *Store) AppendAfter(ctx context.Context, rec arrow.RecordBatch, after uint64) (uint64, error) {
	if err := s.ensureRegistered(ctx); err != nil {
		return 0, err
	}
	w, err := s.Writer(ctx)
	if err != nil {
		return 0, err
	}
	seq, err := w.AppendAfter(ctx, rec, after)
	if err != nil {
		return 0, fmt.Errorf("store %s: %w", s.Target(), err)
	}
	if s.entry.SealOnAdd || w.Stats().MemtableBytes >= s.cfg.SealAfterBytes {
		if _, err := s.Seal(ctx); err != nil {
			return 0, err
		}
	}
	return seq, nil
}

// observeSeq records that _seq seq exists: this worker's later writes get greater
// ones, so a write made after a read is ordered after what the read could show.
func (s *Store) observeSeq(seq uint64) {
	for {
		cur := s.maxSeq.Load()
		if seq <= cur {
			return
		}
		if s.maxSeq.CompareAndSwap(cur, seq) {
			break
		}
	}
	if w := s.residentWriter(); w != nil {
		w.Observe(seq)
	}
}

// Sync makes the reads that follow it see every generation sealed before Sync was
// called, through any worker (a refresh that started after the call, however fresh
// the snapshot is), and orders this worker's later writes after the causal token
// after (0: none). A client that passes the token of its last write gets
// read-your-writes across workers for writes acknowledged with ?flush=true.
func (s *Store) Sync(ctx context.Context, after uint64) error {
	s.observeSeq(after)
	_, err := s.freshSince(ctx, s.cfg.Clock.Now(), true)
	return err
}

// Seal turns this worker's memtable of the store into a generation and makes it
// visible to this worker's reads at once. It returns nil, nil when there was nothing
// to seal (or the shard was never written here).
func (s *Store) Seal(ctx context.Context) (*wal.Generation, error) {
	w := s.residentWriter()
	if w == nil {
		return nil, nil
	}
	g, err := w.Seal(ctx)
	if err != nil {
		return nil, fmt.Errorf("store %s: seal: %w", s.Target(), err)
	}
	if g != nil {
		s.observeShard(w.Stats().Manifest)
	}
	return g, nil
}

// observeShard puts a newer manifest of one shard into the snapshot.
func (s *Store) observeShard(m *wal.Manifest) {
	if m == nil {
		return
	}
	s.swap(func(cur *Snapshot) *Snapshot {
		if old := cur.WAL.Shards[m.Shard]; old != nil && old.Version >= m.Version {
			return nil
		}
		shards := make(map[string]*wal.Manifest, len(cur.WAL.Shards)+1)
		for k, v := range cur.WAL.Shards {
			shards[k] = v
		}
		shards[m.Shard] = m
		next := *cur
		next.WAL = &wal.Snapshot{Dir: cur.WAL.Dir, Shards: shards}
		return &next
	})
}

// Commit commits a prepared base-table transaction, rebasing and retrying as the
// table does, and then swaps the snapshot to the committed version. It holds no lock
// that readers take: they keep the previous snapshot until the swap, which is
// consistent because the shard's drain comes after it (see Fresh).
func (s *Store) Commit(ctx context.Context, x *table.Txn) (*table.Manifest, error) {
	m, err := x.Commit(ctx)
	if err != nil {
		return nil, err
	}
	s.ObserveBase(m)
	return m, nil
}

// ObserveBase puts a newer base manifest into the snapshot (a merge committed it, or
// found the work already committed).
func (s *Store) ObserveBase(m *table.Manifest) {
	if m == nil {
		return
	}
	s.swap(func(cur *Snapshot) *Snapshot {
		if m.Version <= cur.Base.Version {
			return nil
		}
		next := *cur
		next.Base = m
		return &next
	})
}

// ObserveShard is observeShard for the merge's drain.
func (s *Store) ObserveShard(m *wal.Manifest) { s.observeShard(m) }

// Fresh returns a snapshot no older than SnapshotTTL, refreshing the base version
// and every shard's manifest if needed. A read never waits for another read's
// refresh: while one runs, the others take the current snapshot (at most one
// refresh older than the TTL), so one slow refresh does not stall every read of the
// store. The I/O runs under no lock readers take.
func (s *Store) Fresh(ctx context.Context) (*Snapshot, error) {
	return s.freshSince(ctx, s.cfg.Clock.Now().Add(-s.cfg.SnapshotTTL), false)
}

// freshSince returns a snapshot whose refresh started at t or later, refreshing if
// the current one is older. With wait it waits for a refresh in flight (and may
// then run its own); without, it returns the current snapshot while another
// refresh runs.
func (s *Store) freshSince(ctx context.Context, t time.Time, wait bool) (*Snapshot, error) {
	snap := s.Snapshot()
	if !snap.taken.Before(t) {
		return snap, nil
	}
	if wait {
		s.refreshMu.Lock()
	} else if !s.refreshMu.TryLock() {
		return snap, nil
	}
	defer s.refreshMu.Unlock()
	snap = s.Snapshot()
	if !snap.taken.Before(t) {
		return snap, nil // another reader refreshed it while we waited
	}
	start := s.cfg.Clock.Now()
	// Shard manifests first, base second (the monotonic-read rule in the package
	// comment): a merge commits its base version before it drains its shard, so a
	// generation missing from the shard manifests read here is covered by the
	// watermark of any base read after them. The other order lost the rows of a merge
	// that committed and drained between the two reads.
	ws, err := snap.WAL.Refresh(ctx, s.cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("store %s: refresh WAL: %w", s.Target(), err)
	}
	base, err := s.table.Refresh(ctx)
	if errors.Is(err, table.ErrNotFound) {
		s.markDeleted()
		return nil, fmt.Errorf("store %s: %w", s.Target(), ErrDeleted)
	}
	if err != nil {
		return nil, fmt.Errorf("store %s: refresh base: %w", s.Target(), err)
	}
	var out *Snapshot
	s.swap(func(cur *Snapshot) *Snapshot {
		out = &Snapshot{Base: cur.Base, WAL: ws, taken: start}
		if base.Version > out.Base.Version {
			out.Base = base
		}
		// A seal or drain of ours may have landed after the refresh read that shard.
		var shards map[string]*wal.Manifest
		for name, m := range cur.WAL.Shards {
			if r := ws.Shards[name]; r != nil && r.Version < m.Version {
				if shards == nil {
					shards = make(map[string]*wal.Manifest, len(ws.Shards))
					for k, v := range ws.Shards {
						shards[k] = v
					}
				}
				shards[name] = m
			}
		}
		if shards != nil {
			out.WAL = &wal.Snapshot{Dir: ws.Dir, Shards: shards}
		}
		return out
	})
	var seen uint64
	for _, m := range out.WAL.Shards {
		seen = max(seen, m.MaxSeq)
	}
	s.observeSeq(seen)
	return out, nil
}

// ensureRegistered checks, at most once per SnapshotTTL, that the store's registry
// object still exists and is of this handle's store (not of one created again under
// the name). A delete by another worker is then noticed within the TTL; appends in
// that window land in the deleted store's own directory (registry.IncarnationDir),
// which is garbage, never in a store created again.
func (s *Store) ensureRegistered(ctx context.Context) error {
	s.aliveMu.Lock()
	defer s.aliveMu.Unlock()
	now := s.cfg.Clock.Now()
	if now.Before(s.aliveUntil) && !s.isDeleted() {
		return nil
	}
	if s.isDeleted() {
		return fmt.Errorf("store %s: %w", s.Target(), ErrDeleted)
	}
	cur, err := registry.New(s.cfg.Bucket).Get(ctx, s.entry.Kind, s.entry.Name)
	if errors.Is(err, registry.ErrNotFound) {
		s.markDeleted()
		return fmt.Errorf("store %s: %w", s.Target(), ErrDeleted)
	}
	if err != nil {
		return fmt.Errorf("store %s: %w", s.Target(), err)
	}
	if !cur.CreatedAt.Equal(s.entry.CreatedAt) {
		// Deleted and created again: this handle is of the store that is gone, and
		// its appends would land in the new store's directory.
		s.markDeleted()
		return fmt.Errorf("store %s: %w (created again at %s)", s.Target(), ErrDeleted, cur.CreatedAt.Format(time.RFC3339Nano))
	}
	s.aliveUntil = now.Add(s.cfg.SnapshotTTL)
	return nil
}

func (s *Store) isDeleted() bool {
	s.writerMu.Lock()
	defer s.writerMu.Unlock()
	return s.deleted
}

// markDeleted fences the handle: later appends fail with ErrDeleted.
func (s *Store) markDeleted() {
	s.writerMu.Lock()
	defer s.writerMu.Unlock()
	s.deleted = true
}

// Close stops the WAL writer of a handle from Stores.OpenShard, without sealing.
func (s *Store) Close(ctx context.Context) error { return s.close(ctx, false) }

// close stops the WAL writer (sealing first if seal is set). It does not delete.
func (s *Store) close(ctx context.Context, seal bool) error {
	s.writerMu.Lock()
	w := s.writer
	s.writer = nil
	s.writerMu.Unlock()
	if w == nil {
		return nil
	}
	var errs []error
	if seal {
		if _, err := w.Seal(ctx); err != nil && !errors.Is(err, wal.ErrFenced) {
			errs = append(errs, fmt.Errorf("store %s: seal on close: %w", s.Target(), err))
		}
	}
	if err := w.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("store %s: close WAL: %w", s.Target(), err))
	}
	s.closeHorizon(ctx, w)
	return errors.Join(errs...)
}
