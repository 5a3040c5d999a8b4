package merge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/tidemark-io/tidemark/pkg/errclass"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// ErrBusy means every merge slot (or the memory budget) was taken and the caller
// asked not to wait: a sweeper skips the store this round.
var ErrBusy = errclass.New(errclass.Busy, "merge slots busy")

// Config bounds merges. Zero caps mean no cap, as MERGE_MAX_GENERATIONS=0 and
// MERGE_MAX_BYTES=0 do; the worker's flags default them to DefaultMaxGenerations and
// DefaultMaxBytes. Other zero fields mean their defaults.
type Config struct {
	// MaxGenerations caps the generations one pass reads; 0 means no cap.
	MaxGenerations int
	// MaxBytes caps the generation bytes one pass reads; 0 means no cap. A
	// generation is never split: the first one is taken whatever its size.
	MaxBytes int64
	// Concurrency is the number of merge slots of the worker (4).
	Concurrency int
	// BudgetBytes is the worker-wide memory budget for merges (2 GiB). A pass is
	// charged PassCostFactor times its generation bytes, and takes no more
	// generations than the budget pays for (but always at least one; a pass whose
	// charge exceeds the budget is charged the whole budget).
	BudgetBytes int64
	Logger      *slog.Logger
	// OnPhase, if set, is told how long each phase of a pass took and how it
	// ended (err nil: it succeeded), for the worker's per-phase metrics.
	OnPhase func(phase Phase, took time.Duration, err error)
}

// Phase names a step of a merge pass, in the reference system's words where it
// has the step (rollout_wal_merge_duration_seconds{phase}).
type Phase string

const (
	PhaseRead   Phase = "read"   // reading the pass's generation objects
	PhaseAppend Phase = "append" // writing the fragment the rows go into (staged)
	PhaseCommit Phase = "commit" // the manifest commit that publishes it (Tidemark's own)
	PhaseDrain  Phase = "drain"  // dropping the merged generations from the shard manifest (no deletes: the cleanup sweeper's)
)

// Phases lists every Phase, for metrics that show each from the start.
func Phases() []Phase { return []Phase{PhaseRead, PhaseAppend, PhaseCommit, PhaseDrain} }

// timed runs fn as phase p and tells OnPhase.
func (m *Merger) timed(p Phase, fn func() error) error {
	start := time.Now()
	err := fn()
	if m.cfg.OnPhase != nil {
		m.cfg.OnPhase(p, time.Since(start), err)
	}
	return err
}

// PassCostFactor is a pass's peak memory per byte of the generations it reads:
// its live heap peaks near twice those bytes, and the collector (GOGC=100) lets the
// heap grow to twice that. BENCHMARKS.md ("Merge memory: what a pass really costs")
// has the measurement.
const PassCostFactor = 4

// GenerationReads bounds the generation objects one pass reads at once: a
// prepare's share of the store's requests in flight (the commit-storm bench sizes
// the two-phase fan-out's prepares to the store by it).
const GenerationReads = 4

// Defaults of the merge caps (MERGE_MAX_GENERATIONS, MERGE_MAX_BYTES). Bytes bound
// a pass (with the memory budget); the generation cap is high so that a backlog of
// tiny generations (tens of rows each) is a few passes, each one commit, not one
// pass per 8 of them.
const (
	DefaultMaxGenerations = 256
	DefaultMaxBytes       = 1 << 30
)

func (c *Config) setDefaults() {
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.BudgetBytes <= 0 {
		c.BudgetBytes = 2 << 30
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Merger runs the merges of one worker.
type Merger struct {
	cfg    Config
	slots  *semaphore.Weighted
	budget *semaphore.Weighted
	// merging counts the merges holding a slot (not the compactions that
	// reserve one): compactions yield to them (Merging).
	merging atomic.Int64
	// reads bypass the worker's read cache: merged generations stop being read right
	// after, and the budget, not the cache, accounts for the memory.
	reads *wal.GenerationCache
}

// New returns a Merger.
func New(cfg Config) *Merger {
	cfg.setDefaults()
	return &Merger{
		cfg:    cfg,
		slots:  semaphore.NewWeighted(int64(cfg.Concurrency)),
		budget: semaphore.NewWeighted(cfg.BudgetBytes),
		reads:  wal.NewGenerationCache(0),
	}
}

// Result says what a merge did.
type Result struct {
	// Generations and Rows count what was merged into the base table.
	Generations int
	Rows        int64
	// Reclaimed counts generations drained from the shard manifest (merged now or by
	// an earlier merge whose drain did not happen).
	Reclaimed int
	// Version is the base version after the merge (0 if no commit was made).
	Version uint64
	// Passes is the number of prepare/commit passes.
	Passes int
}

func (r *Result) add(o Result) {
	r.Generations += o.Generations
	r.Rows += o.Rows
	r.Reclaimed += o.Reclaimed
	r.Passes += o.Passes
	if o.Version > r.Version {
		r.Version = o.Version
	}
}

// Merge merges this worker's shard of s until nothing is pending (each pass within
// the caps). With wait it waits for a merge slot; without, it returns ErrBusy when
// none is free. It prepares the first pass, then commits it and the passes after.
func (m *Merger) Merge(ctx context.Context, s *store.Store, wait bool) (Result, error) {
	p, err := m.prepare(ctx, s, wait)
	if err != nil {
		return Result{}, err
	}
	return p.commit(ctx)
}

// MergeOnce runs a single pass (for the count trigger: one bounded step per sweep).
func (m *Merger) MergeOnce(ctx context.Context, s *store.Store, wait bool) (Result, error) {
	if err := m.acquireSlot(ctx, wait); err != nil {
		return Result{}, err
	}
	defer m.releaseSlot()
	pp, err := m.preparePass(ctx, s, wait, 0, nil)
	if err != nil {
		return Result{Passes: pp.res.Passes}, err
	}
	r, _, err := pp.commit(ctx)
	return r, err
}

// prepared is a merge of this worker's shard whose first pass is prepared and not
// committed: the pass's generations are read and deduplicated, its fragment, bloom
// filter and deletion vectors staged under new names, and nothing any reader or
// other merge sees has changed. It holds a merge slot and the pass's memory charge
// until commit or Abort, one of which must be called, once; it is not safe for
// concurrent use. A commit that lost a race to another merge's is the table's
// optimistic commit's to settle, as for any race.
type prepared struct {
	m       *Merger
	s       *store.Store
	limit   uint64 // the shard's current generation when prepared: later seals wait
	wait    bool   // later passes wait for their memory charge (else ErrBusy)
	first   *preparedPass
	ended   bool // Commit or Abort was called
	once    sync.Once
	release func()
}

// errEnded means commit was called on a prepared merge already committed or
// aborted.
var errEnded = errors.New("prepared merge already committed or aborted")

// prepare reads this worker's shard of s and prepares the first pass of its merge
// (see prepared). With wait it waits for a merge slot and the pass's memory charge;
// without, it returns ErrBusy when either is taken.
func (m *Merger) prepare(ctx context.Context, s *store.Store, wait bool) (*prepared, error) {
	if err := m.acquireSlot(ctx, wait); err != nil {
		return nil, err
	}
	p := &prepared{m: m, s: s, wait: wait, release: m.releaseSlot}
	// Merge what is pending now, not what appenders seal while we work: against a
	// steady stream of seals "until nothing is pending" might never end.
	sm, err := wal.LoadShard(ctx, s.Bucket(), s.Entry().URI, s.Shard())
	if err == nil {
		p.limit = sm.CurrentGeneration
	} else if !errors.Is(err, wal.ErrNoShard) {
		p.Abort(ctx)
		return nil, fmt.Errorf("merge %s: %w", s.Target(), err)
	}
	p.first, err = m.preparePass(ctx, s, wait, p.limit, sm)
	if err != nil {
		p.Abort(ctx)
		return nil, err
	}
	return p, nil
}

// commit commits the prepared pass, drains its generations from the shard, and
// merges what else was pending when it was prepared in further passes, one after
// another. It releases the slot, also on error.
func (p *prepared) commit(ctx context.Context) (Result, error) {
	if p.ended {
		return Result{}, fmt.Errorf("merge %s: %w", p.s.Target(), errEnded)
	}
	defer p.Abort(ctx) // gives the slot back
	total, more, err := p.first.commit(ctx)
	for err == nil && more {
		var r Result
		var pp *preparedPass
		pp, err = p.m.preparePass(ctx, p.s, p.wait, p.limit, nil)
		if err != nil {
			total.Passes += pp.res.Passes
			break
		}
		r, more, err = pp.commit(ctx)
		total.add(r)
	}
	return total, err
}

// Abort gives up a merge not committed: the pass's staged files are deleted, its
// charge and slot given back. After Commit it does nothing.
func (p *prepared) Abort(ctx context.Context) {
	p.ended = true
	p.once.Do(func() {
		if p.first != nil {
			p.first.abort(ctx)
		}
		p.release()
	})
}

// PendingOwn counts this worker's generations of s above the merged watermark, from
// the store's current snapshot (no I/O).
func PendingOwn(s *store.Store) int { return len(s.OwnPending()) }

// AcquireSlot takes a merge slot, waiting for one, for work that must not overlap
// this worker's merges (maintenance, tests). Call release when done.
func (m *Merger) AcquireSlot(ctx context.Context) (release func(), err error) {
	if err := m.slots.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { m.slots.Release(1) }) }, nil
}

// Reserve takes one merge slot and charge bytes (at most the whole budget) of the
// merge memory budget, waiting for both, for work other than a merge that must
// not run beside more merges than the worker is sized for (a compaction). The
// returned func gives both back.
func (m *Merger) Reserve(ctx context.Context, charge int64) (release func(), err error) {
	if err := m.slots.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	charge = min(max(charge, 0), m.cfg.BudgetBytes)
	if err := m.budget.Acquire(ctx, charge); err != nil {
		m.slots.Release(1)
		return nil, err
	}
	return func() { m.budget.Release(charge); m.slots.Release(1) }, nil
}

// acquireSlot takes a merge slot for a merge (releaseSlot gives it back).
func (m *Merger) acquireSlot(ctx context.Context, wait bool) error {
	if wait {
		if err := m.slots.Acquire(ctx, 1); err != nil {
			return err
		}
	} else if !m.slots.TryAcquire(1) {
		return ErrBusy
	}
	m.merging.Add(1)
	return nil
}

func (m *Merger) releaseSlot() {
	m.merging.Add(-1)
	m.slots.Release(1)
}

// Merging is how many merges of this worker hold a slot now. A compaction
// yields to them (maintain): it is the worker's background work, they are what
// keeps its stores fresh.
func (m *Merger) Merging() int { return int(m.merging.Load()) }

// preparedPass is one pass's prepare, waiting for its commit and drain.
type preparedPass struct {
	m    *Merger
	s    *store.Store
	w    *wal.Writer
	log  *slog.Logger
	res  Result
	pick []wal.Generation
	rows int64
	// upTo is the last generation picked; drainTo what the commit drains up to
	// (the watermark when only a drain is left).
	upTo, drainTo uint64
	more          bool       // generations up to the limit remain after this pass
	txn           *table.Txn // nil: nothing to commit
	done          error      // set when preparing found the pass committed already
	release       func()     // gives back the pass's memory charge
}

// preparePass prepares one pass over generations up to limit (0: any). sm, if not
// nil, is the shard manifest the caller has just read. The returned pass is never
// nil, so that a caller can count its Passes on error.
func (m *Merger) preparePass(ctx context.Context, s *store.Store, wait bool, limit uint64, sm *wal.Manifest) (*preparedPass, error) {
	pp := &preparedPass{m: m, s: s, release: func() {},
		log: m.cfg.Logger.With("store", s.Entry().Name, "kind", s.Entry().Kind, "shard", s.Shard())}
	// Only this worker's shard and the base matter here: no full snapshot refresh
	// (every shard's manifest) per pass. The two are read at once (each is a few
	// round trips); either order of the two reads is already possible against a
	// concurrent merge of the shard, and a stale pair only makes the commit find its
	// generations already committed.
	var base *table.Manifest
	g, gctx := errgroup.WithContext(ctx)
	if sm == nil {
		g.Go(func() (err error) {
			sm, err = wal.LoadShard(gctx, s.Bucket(), s.Entry().URI, s.Shard())
			return err
		})
	}
	g.Go(func() (err error) {
		base, err = s.Table().Refresh(gctx)
		return err
	})
	err := g.Wait()
	if errors.Is(err, wal.ErrNoShard) {
		return pp, nil // this worker never wrote the store: nothing of ours to merge
	}
	if err != nil {
		return pp, err
	}
	if pp.w, err = s.Writer(ctx); err != nil {
		return pp, err
	}
	s.ObserveBase(base)
	pp.res.Passes = 1
	wm := base.Watermark(s.Shard())
	pending := sm.Pending(wm)
	if limit > 0 {
		n := 0
		for n < len(pending) && pending[n].Generation <= limit {
			n++
		}
		pending = pending[:n]
	}
	if len(pending) == 0 {
		if len(sm.Generations) > 0 { // merged earlier, never drained
			pp.drainTo = wm
		}
		return pp, nil
	}
	pick := m.choose(pending)
	release, err := m.charge(ctx, pick, wait)
	if err != nil {
		return pp, err
	}
	pp.release = release
	pp.pick, pp.more = pick, len(pending) > len(pick)
	pp.upTo = pick[len(pick)-1].Generation
	pp.drainTo = pp.upTo

	// The generations are read GenerationReads at a time: one after another, a pass
	// of 8 would wait 8 round trips for them.
	parts := make([][]arrow.RecordBatch, len(pick))
	err = m.timed(PhaseRead, func() error {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(GenerationReads)
		for i, gen := range pick {
			g.Go(func() error {
				data, err := m.reads.Read(gctx, s.Bucket(), wal.GenerationKey(s.Entry().URI, gen))
				if err != nil {
					return err
				}
				parts[i] = data.Records
				return nil
			})
		}
		return g.Wait()
	})
	if err != nil {
		pp.abort(ctx)
		return pp, fmt.Errorf("merge %s: %w", s.Target(), err)
	}
	var recs []arrow.RecordBatch
	for i, gen := range pick {
		recs = append(recs, parts[i]...)
		pp.rows += gen.Rows
	}
	err = m.timed(PhaseAppend, func() error {
		var err error
		pp.txn, err = s.Table().Prepare(ctx, base, table.Append{Records: recs, Shard: s.Shard(), Generation: pp.upTo})
		if errors.Is(err, table.ErrAlreadyCommitted) {
			// Found, not failed: the phase did its job, and commit drains them.
			pp.done = err
			return nil
		}
		return err
	})
	if err != nil {
		pp.abort(ctx)
		return pp, fmt.Errorf("merge %s: %w", s.Target(), err)
	}
	return pp, nil
}

// commit commits the pass, drains its generations and gives back its
// charge. more reports whether generations up to the pass's limit remain.
func (pp *preparedPass) commit(ctx context.Context) (res Result, more bool, err error) {
	// From here on the pass is never aborted: a commit whose outcome is unknown
	// leaves its staged files, which the manifest may reference (table.Txn.Commit).
	txn := pp.txn
	pp.txn = nil
	defer pp.abort(ctx)
	res = pp.res
	if pp.drainTo == 0 {
		return res, false, nil // nothing pending, nothing to drain
	}
	if pp.pick == nil { // only a drain left
		res.Reclaimed, err = pp.m.drain(ctx, pp.w, pp.s, pp.drainTo)
		return res, false, err
	}
	err = pp.done
	if err == nil {
		err = pp.m.timed(PhaseCommit, func() error {
			committed, err := pp.s.Commit(ctx, txn)
			if err == nil {
				res.Version = committed.Version
			}
			return err
		})
	}
	res.Rows = pp.rows
	switch {
	case errors.Is(err, table.ErrAlreadyCommitted):
		pp.log.Info("merge found its generations already committed; draining", "up_to", pp.upTo)
		res.Rows = 0
	case err != nil:
		return Result{Passes: 1}, false, fmt.Errorf("merge %s: %w", pp.s.Target(), err)
	default:
		res.Generations = len(pp.pick)
	}
	if res.Reclaimed, err = pp.m.drain(ctx, pp.w, pp.s, pp.upTo); err != nil {
		return res, false, err
	}
	pp.log.Info("merged WAL generations", "generations", res.Generations, "rows", res.Rows, "up_to", pp.upTo, "version", res.Version)
	return res, pp.more, nil
}

// abort deletes the staged files of a pass not committed and gives back its
// charge; after commit only the charge is left to give back, once.
func (pp *preparedPass) abort(ctx context.Context) {
	if pp.txn != nil {
		pp.txn.Abort(context.WithoutCancel(ctx))
		pp.txn = nil
	}
	pp.release()
	pp.release = func() {}
}

func (m *Merger) drain(ctx context.Context, w *wal.Writer, s *store.Store, upTo uint64) (int, error) {
	var d wal.DrainResult
	err := m.timed(PhaseDrain, func() (err error) { d, err = w.Drain(ctx, upTo); return err })
	if err != nil {
		return 0, fmt.Errorf("merge %s: drain: %w", s.Target(), err)
	}
	s.ObserveShard(d.Manifest)
	return d.Generations, nil
}

// charge takes a pass's memory charge for reading gens from the worker-wide
// budget (PassCostFactor per byte, at most the whole budget), waiting for it with
// wait, else ErrBusy when it is taken; release gives it back.
func (m *Merger) charge(ctx context.Context, gens []wal.Generation, wait bool) (release func(), err error) {
	need := min(PassCostFactor*sumBytes(gens), m.cfg.BudgetBytes)
	if wait {
		if err := m.budget.Acquire(ctx, need); err != nil {
			return nil, err
		}
	} else if !m.budget.TryAcquire(need) {
		return nil, ErrBusy
	}
	return func() { m.budget.Release(need) }, nil
}

// choose takes the oldest pending generations within the caps and what the memory
// budget pays for, at least one.
func (m *Merger) choose(pending []wal.Generation) []wal.Generation {
	maxBytes := m.cfg.BudgetBytes / PassCostFactor
	if m.cfg.MaxBytes > 0 {
		maxBytes = min(maxBytes, m.cfg.MaxBytes)
	}
	var bytes int64
	n := 0
	for _, g := range pending {
		if n > 0 && (m.cfg.MaxGenerations > 0 && n >= m.cfg.MaxGenerations || bytes+g.Bytes > maxBytes) {
			break
		}
		bytes += g.Bytes
		n++
	}
	return pending[:n]
}

func sumBytes(gs []wal.Generation) int64 {
	var n int64
	for _, g := range gs {
		n += g.Bytes
	}
	return n
}
