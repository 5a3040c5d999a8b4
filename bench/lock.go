package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// LockShape is how a merge uses the store lock in the lock-across-read scenario.
type LockShape string

const (
	// OldShapeLockAcrossRead is the reference system's count-triggered merge, which
	// exists only in this package: it holds its worker's exclusive store lock while
	// it reads the shard manifest and the generations, stages the fragment and
	// commits (rebases and retries included); and every add and get on that worker
	// takes the shared lock for its whole duration. Production's store.Store has no
	// such lock, so the old discipline is a sync.RWMutex per worker of the scenario
	// that every add, get and merge of this shape goes through.
	OldShapeLockAcrossRead LockShape = "old: exclusive lock across the read"
	// NewShapePrepareCommit is Tidemark's merge: prepare (read, dedupe, stage) and
	// Store.Commit (manifest write, rebase, retries) under no lock that readers take;
	// adds and gets go straight to the store.
	NewShapePrepareCommit LockShape = "new: prepare/commit split"
)

// LockConfig sizes the lock-across-read scenario.
type LockConfig struct {
	// Each of Rounds seals Generations generations of RowsPerGeneration rows on
	// every merging worker and merges them (one pass at the default caps) while the
	// clients run.
	Rounds, Generations, RowsPerGeneration int
	Row                                    RowShape
	// Latency (+ up to Jitter) is added to every object-store request.
	Latency, Jitter time.Duration
	// Adders and Getters are clients that each add one row (or get by id one row
	// their worker sealed) and pause for Pause, in a loop. They are spread over the
	// workers. Every other getter of a worker gets rows merged in an earlier round
	// (a read of the base table: one ranged request for the row group), the others
	// rows sealed this round (pending until the round's merge: read from memory),
	// so neither kind's latency depends on the mix the random choices drew.
	Adders, Getters int
	Pause           time.Duration
	// Mergers is the number of workers, each with its own shard and store handle,
	// whose merges start at the same moment every round (0 means 1). With 2 both
	// prepare against the same base version, so one commit always loses the race
	// for the next version and rebases.
	Mergers int
}

// DefaultLockConfig is one store with 8 pending generations on a bucket with 50 ms
// per request, one merging worker, and 4 adders and 4 getters.
func DefaultLockConfig() LockConfig {
	return LockConfig{Rounds: 5, Generations: 8, RowsPerGeneration: 500, Row: RealisticRow,
		Latency: 50 * time.Millisecond, Jitter: 10 * time.Millisecond, Adders: 4, Getters: 4, Pause: 5 * time.Millisecond,
		Mergers: 1}
}

// LockCalls are the latencies of one kind of client call, by what was running when
// the call started. By start, not by overlap: the longer a call, the likelier it
// overlaps any window, so overlap would file every slow call (one waiting for a
// snapshot refresh, say) under the busier column.
type LockCalls struct {
	// Held: calls started while their own worker's merge held the store: new
	// shape, during Store.Commit; old shape, from the moment the merge asked for
	// the exclusive lock (new readers queue behind it from then on) to its release
	// after the commit. Only the commit part of the old hold would hold no calls:
	// by then every client is already waiting.
	Held Quantiles
	// Merge: calls started while some merge ran, outside such a window.
	Merge Quantiles
	// Idle: calls started while no merge ran.
	Idle Quantiles
}

// LockResult is one shape's outcome.
type LockResult struct {
	Shape   LockShape
	Mergers int
	// Adds, Gets (rows merged in an earlier round) and PendingGets (rows sealed
	// this round) are the clients' latencies.
	Adds, Gets, PendingGets LockCalls
	// Commits are the durations of the commits (old: Txn.Commit inside the lock;
	// new: Store.Commit), rebases, backoff and retries included.
	Commits Quantiles
	// Conflicted counts commits that lost the race for their first version;
	// RebasedOver sums the base versions other workers committed between a commit's
	// prepare and its success. Here, where the only other writer commits once a
	// round and the bucket refuses nothing, each such version is one lost attempt
	// followed by one rebase: pkg/storage/table reports no attempt count for a commit that
	// succeeds.
	Conflicted, RebasedOver int
	// LongestHold is the longest time the old shape's exclusive lock was held. The
	// new shape has no lock readers take: 0.
	LongestHold time.Duration
	// Merge is the mean merge duration.
	Merge time.Duration
	// Rows is the number of rows in the base table after the check (every
	// acknowledged add and every setup row present once).
	Rows int64
}

const lockStore = "locks"

// span is an operation's or a merge's time interval.
type span struct{ start, end time.Time }

func (s span) contains(t time.Time) bool { return !t.Before(s.start) && t.Before(s.end) }

func startedIn(c span, ws []span) bool {
	for _, w := range ws {
		if w.contains(c.start) {
			return true
		}
	}
	return false
}

// lockWorker is one worker of the scenario. Its slices are guarded by the run's
// mutex.
type lockWorker struct {
	*benchWorker
	s   *store.Store
	gen *rowGen
	// lock is the old shape's store lock; a process has its own, so two workers'
	// merges block only their own clients.
	lock        sync.RWMutex
	visible     []string // ids this worker sealed, for its getters
	merged      int      // visible[:merged] were merged in earlier rounds
	pendingGets []span
	adds, gets  []span
	merges      []span
	// held are the windows its merges held the store (see LockCalls.Held).
	held []span
}

// passTimes is what one merge pass reports besides its error.
type passTimes struct {
	held        span          // old shape: from asking for the exclusive lock to its release
	hold        time.Duration // old shape: how long the lock was held
	commit      span
	rebasedOver int
}

// RunLock runs the scenario in the given shape.
func RunLock(ctx context.Context, env *Env, cfg LockConfig, shape LockShape) (LockResult, error) {
	n := max(cfg.Mergers, 1)
	res := LockResult{Shape: shape, Mergers: n}
	if shape != OldShapeLockAcrossRead && shape != NewShapePrepareCommit {
		return res, fmt.Errorf("lock: unknown shape %q", shape)
	}
	raw, faulty, f, err := openMem(ctx, env.Seed+2)
	if err != nil {
		return res, err
	}
	workers := make([]*lockWorker, n)
	for k := range workers {
		wk := newWorker(faulty, fmt.Sprintf("worker-%02d", k), store.Config{}, defaultMergeConfig())
		defer wk.close()
		workers[k] = &lockWorker{benchWorker: wk, gen: newRowGen(env.Seed+3+uint64(k)*1000, cfg.Row)}
	}
	e, err := workers[0].stores.Create(ctx, registry.Entry{Kind: registry.KindRollout, Name: lockStore})
	if err != nil {
		return res, err
	}
	for _, w := range workers {
		s, rel, err := w.stores.Open(ctx, registry.KindRollout, lockStore)
		if err != nil {
			return res, err
		}
		defer rel()
		w.s = s
	}
	f.SetLatency(cfg.Latency, cfg.Jitter)

	// shared is what an add, get or seal on w holds while it runs.
	shared := func(w *lockWorker) func() { return func() {} }
	if shape == OldShapeLockAcrossRead {
		shared = func(w *lockWorker) func() { w.lock.RLock(); return w.lock.RUnlock }
	}

	var (
		mu         sync.Mutex
		want       = map[string]bool{}
		maybe      = map[string]bool{} // adds that failed (the stream's last, cancelled ones)
		clientErr  error
		holds      durations
		runs       durations
		commitTime durations
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if clientErr == nil {
			clientErr = err
		}
	}
	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	var wg sync.WaitGroup
	for i := range cfg.Adders {
		w := workers[i%n]
		wg.Go(func() {
			g := newRowGen(env.Seed+100+uint64(i), cfg.Row)
			for streamCtx.Err() == nil {
				rec, ids, err := g.batch(1)
				if err != nil {
					fail(err)
					return
				}
				t0 := time.Now()
				unlock := shared(w)
				err = w.s.Append(streamCtx, rec)
				unlock()
				sp := span{t0, time.Now()}
				rec.Release()
				if err != nil {
					mu.Lock()
					maybe[ids[0]] = true
					mu.Unlock()
					if streamCtx.Err() == nil {
						fail(fmt.Errorf("add on %s: %w", w.id, err))
					}
					return
				}
				mu.Lock()
				w.adds = append(w.adds, sp)
				want[ids[0]] = true
				mu.Unlock()
				_ = sleepCtx(streamCtx, cfg.Pause)
			}
		})
	}
	for i := range cfg.Getters {
		w := workers[i%n]
		pending := (i/n)%2 == 0
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(env.Seed+200, uint64(i)))
			for streamCtx.Err() == nil {
				mu.Lock()
				var id string
				lo, hi := 0, w.merged
				if pending {
					lo, hi = w.merged, len(w.visible)
				}
				if hi > lo {
					id = w.visible[lo+rng.IntN(hi-lo)]
				}
				mu.Unlock()
				if id == "" {
					_ = sleepCtx(streamCtx, cfg.Pause)
					continue
				}
				t0 := time.Now()
				unlock := shared(w)
				rec, err := w.s.Get(streamCtx, id)
				unlock()
				sp := span{t0, time.Now()}
				if err != nil {
					if streamCtx.Err() == nil {
						fail(fmt.Errorf("get %s on %s: %w", id, w.id, err))
					}
					return
				}
				if err := checkRow(rec, id); err != nil {
					fail(fmt.Errorf("on %s: %w", w.id, err))
					return
				}
				mu.Lock()
				if pending {
					w.pendingGets = append(w.pendingGets, sp)
				} else {
					w.gets = append(w.gets, sp)
				}
				mu.Unlock()
				_ = sleepCtx(streamCtx, cfg.Pause)
			}
		})
	}

	maxGenerations := defaultMergeConfig().MaxGenerations
	for round := range cfg.Rounds {
		g, gctx := errgroup.WithContext(ctx)
		for _, w := range workers {
			g.Go(func() error {
				for range cfg.Generations {
					rec, ids, err := w.gen.batch(cfg.RowsPerGeneration)
					if err != nil {
						return err
					}
					unlock := shared(w)
					err = w.s.Append(gctx, rec)
					if err == nil {
						_, err = w.s.Seal(gctx)
					}
					unlock()
					rec.Release()
					if err != nil {
						return fmt.Errorf("lock: round %d backlog of %s: %w", round, w.id, err)
					}
					mu.Lock()
					w.visible = append(w.visible, ids...)
					for _, id := range ids {
						want[id] = true
					}
					mu.Unlock()
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return res, err
		}

		// Every merge waits, once it has read the base, until the others have read
		// it too: they then prepare against the same version, and with two mergers
		// one of the commits loses the race whatever the latencies drew.
		var bases sync.WaitGroup
		bases.Add(n)
		g = &errgroup.Group{}
		for _, w := range workers {
			arrive := sync.OnceFunc(bases.Done)
			baseRead := func() { arrive(); bases.Wait() }
			g.Go(func() error {
				defer arrive() // a pass that fails before the base must not hold the others
				start := time.Now()
				var p passTimes
				var err error
				switch shape {
				case OldShapeLockAcrossRead:
					p, err = oldShapeMerge(ctx, w.s, &w.lock, maxGenerations, baseRead)
				case NewShapePrepareCommit:
					p, err = newShapeMerge(ctx, w.s, maxGenerations, baseRead)
				}
				end := time.Now()
				if err != nil {
					return fmt.Errorf("lock: round %d merge of %s: %w", round, w.id, err)
				}
				mu.Lock()
				defer mu.Unlock()
				w.merged = len(w.visible) // this round's seals all came before the merge
				w.merges = append(w.merges, span{start, end})
				runs = append(runs, end.Sub(start))
				if shape == OldShapeLockAcrossRead {
					holds = append(holds, p.hold)
					w.held = append(w.held, p.held)
				} else {
					w.held = append(w.held, p.commit)
				}
				if !p.commit.start.IsZero() {
					commitTime = append(commitTime, p.commit.end.Sub(p.commit.start))
					res.RebasedOver += p.rebasedOver
					if p.rebasedOver > 0 {
						res.Conflicted++
					}
				}
				env.log().Info("lock: merged", "shape", string(shape), "mergers", n, "worker", w.id, "round", round,
					"took", end.Sub(start).Round(time.Millisecond), "commit", p.commit.end.Sub(p.commit.start).Round(time.Millisecond),
					"rebased_over", p.rebasedOver)
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return res, err
		}
	}
	stopStream()
	wg.Wait()
	if clientErr != nil {
		return res, fmt.Errorf("lock (%s): %w", shape, clientErr)
	}

	var allMerges []span
	for _, w := range workers {
		allMerges = append(allMerges, w.merges...)
	}
	// split classifies each call by what was running when it started: its own
	// worker's merge holding the store (the only one that could make it wait in
	// either shape), else any merge.
	split := func(calls func(w *lockWorker) []span) LockCalls {
		var held, merge, idle durations
		for _, w := range workers {
			for _, c := range calls(w) {
				d := c.end.Sub(c.start)
				switch {
				case startedIn(c, w.held):
					held = append(held, d)
				case startedIn(c, allMerges):
					merge = append(merge, d)
				default:
					idle = append(idle, d)
				}
			}
		}
		return LockCalls{Held: held.quantiles(), Merge: merge.quantiles(), Idle: idle.quantiles()}
	}
	res.Adds = split(func(w *lockWorker) []span { return w.adds })
	res.Gets = split(func(w *lockWorker) []span { return w.gets })
	res.PendingGets = split(func(w *lockWorker) []span { return w.pendingGets })
	res.Commits = commitTime.quantiles()
	res.LongestHold = holds.quantiles().Max
	var total time.Duration
	for _, r := range runs {
		total += r
	}
	res.Merge = total / time.Duration(max(len(runs), 1))

	f.Clear()
	for _, w := range workers {
		if _, err := w.s.Seal(ctx); err != nil {
			return res, err
		}
		if _, err := w.merger.Merge(ctx, w.s, true); err != nil {
			return res, err
		}
	}
	if res.Rows, err = verifyBase(ctx, raw, e.URI, want, maybe); err != nil {
		return res, fmt.Errorf("lock (%s): %w", shape, err)
	}
	return res, nil
}

// checkRow checks that a get returned the row it asked for, and releases it.
func checkRow(rec arrow.RecordBatch, id string) error {
	if rec == nil {
		return fmt.Errorf("get %s: sealed row not found", id)
	}
	defer rec.Release()
	col := rec.Column(rec.Schema().FieldIndices(rowkey.IDColumn)[0]).(*array.String)
	if rec.NumRows() != 1 || col.Value(0) != id {
		return fmt.Errorf("get %s: got %d rows, first id %q", id, rec.NumRows(), col.Value(0))
	}
	return nil
}

// oldShapeMerge is one merge pass of OldShapeLockAcrossRead: the steps of
// merge.Merger's pass (shard manifest, base version, the oldest pending
// generations up to maxGenerations, read, stage, commit, drain), with the exclusive
// lock held from the first read to the end of the commit. The drain runs after the
// lock is released, which favours the old shape. baseRead is called once the base
// has been read.
func oldShapeMerge(ctx context.Context, s *store.Store, lock *sync.RWMutex, maxGenerations int, baseRead func()) (passTimes, error) {
	var p passTimes
	w, err := s.Writer(ctx)
	if err != nil {
		return p, err
	}
	p.held.start = time.Now()
	lock.Lock()
	start := time.Now()
	upTo, err := func() (uint64, error) {
		sm, err := wal.LoadShard(ctx, s.Bucket(), s.Entry().URI, s.Shard())
		if err != nil {
			return 0, err
		}
		base, err := s.Table().Refresh(ctx)
		if err != nil {
			return 0, err
		}
		baseRead()
		pending := sm.Pending(base.Watermark(s.Shard()))
		if maxGenerations > 0 && len(pending) > maxGenerations {
			pending = pending[:maxGenerations]
		}
		if len(pending) == 0 {
			return 0, nil
		}
		txn, err := prepareGenerations(ctx, s, base, pending, 1)
		if err != nil {
			return 0, err
		}
		p.commit.start = time.Now()
		m, err := txn.Commit(ctx)
		if err == nil {
			s.ObserveBase(m)
		}
		p.commit.end = time.Now()
		if err != nil {
			return 0, err
		}
		p.rebasedOver = int(m.Version - base.Version - 1)
		return pending[len(pending)-1].Generation, nil
	}()
	p.held.end = time.Now()
	p.hold = p.held.end.Sub(start)
	lock.Unlock()
	if err != nil || upTo == 0 {
		return p, err
	}
	d, err := w.Drain(ctx, upTo)
	if err != nil {
		return p, fmt.Errorf("old-shape merge: drain: %w", err)
	}
	s.ObserveShard(d.Manifest)
	return p, nil
}

// mergeGenerationReads is how many generations merge.Merger reads at once.
const mergeGenerationReads = 4

// newShapeMerge is one pass of merge.Merger (the shard manifest and the base read
// at once, the generations 4 at a time, table.Prepare, Store.Commit, the drain),
// run here because the scenario must time Store.Commit, which the merger does not
// report. Nothing in it takes a lock. baseRead is called once the base has been
// read.
func newShapeMerge(ctx context.Context, s *store.Store, maxGenerations int, baseRead func()) (passTimes, error) {
	var p passTimes
	var (
		sm   *wal.Manifest
		base *table.Manifest
	)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		sm, err = wal.LoadShard(gctx, s.Bucket(), s.Entry().URI, s.Shard())
		return err
	})
	g.Go(func() (err error) {
		base, err = s.Table().Refresh(gctx)
		return err
	})
	if err := g.Wait(); err != nil {
		return p, err
	}
	baseRead()
	w, err := s.Writer(ctx)
	if err != nil {
		return p, err
	}
	s.ObserveBase(base)
	pending := sm.Pending(base.Watermark(s.Shard()))
	if maxGenerations > 0 && len(pending) > maxGenerations {
		pending = pending[:maxGenerations]
	}
	if len(pending) == 0 {
		return p, nil
	}
	txn, err := prepareGenerations(ctx, s, base, pending, mergeGenerationReads)
	if err != nil {
		return p, err
	}
	p.commit.start = time.Now()
	m, err := s.Commit(ctx, txn)
	p.commit.end = time.Now()
	if err != nil {
		return p, err
	}
	p.rebasedOver = int(m.Version - base.Version - 1)
	upTo := pending[len(pending)-1].Generation
	d, err := w.Drain(ctx, upTo)
	if err != nil {
		return p, fmt.Errorf("merge: drain: %w", err)
	}
	s.ObserveShard(d.Manifest)
	return p, nil
}

// prepareGenerations reads the generations, reads at a time, bypassing the read
// cache as merge.Merger does, and prepares their commit against base up to the
// last one.
func prepareGenerations(ctx context.Context, s *store.Store, base *table.Manifest, pending []wal.Generation, reads int) (*table.Txn, error) {
	cache := wal.NewGenerationCache(0)
	parts := make([][]arrow.RecordBatch, len(pending))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(reads)
	for i, gen := range pending {
		g.Go(func() error {
			data, err := cache.Read(gctx, s.Bucket(), wal.GenerationKey(s.Entry().URI, gen))
			if err != nil {
				return err
			}
			parts[i] = data.Records
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var recs []arrow.RecordBatch
	for _, p := range parts {
		recs = append(recs, p...)
	}
	upTo := pending[len(pending)-1].Generation
	return s.Table().Prepare(ctx, base, table.Append{Records: recs, Shard: s.Shard(), Generation: upTo})
}
