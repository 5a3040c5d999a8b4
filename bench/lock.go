package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/store"
	"github.com/tidemark-io/tidemark/pkg/table"
	"github.com/tidemark-io/tidemark/pkg/wal"
)

// LockShape is how a merge uses the store lock in the lock-across-read scenario.
type LockShape string

const (
	// OldShapeLockAcrossRead is the reference system's count-triggered merge, which
	// exists only in this package: it holds the store's exclusive lock while it
	// reads the shard manifest and the generations, stages the fragment and commits;
	// and, as in the reference system, every add and get takes the store's shared
	// lock for its whole duration. Production's store.Store cannot be driven this
	// way (its exclusive lock is taken only inside Store.Commit, around the manifest
	// write), so the old lock discipline is a sync.RWMutex of the scenario that
	// every add, get and merge of this shape goes through.
	OldShapeLockAcrossRead LockShape = "old: exclusive lock across the read"
	// NewShapePrepareCommit is merge.Merger: prepare (read, dedupe, stage) under no
	// lock, only Store.Commit under the exclusive lock; adds and gets go straight to
	// the store.
	NewShapePrepareCommit LockShape = "new: prepare/commit split"
)

// LockConfig sizes the lock-across-read scenario.
type LockConfig struct {
	// Each of Rounds seals Generations generations of RowsPerGeneration rows and
	// merges them (one pass at the default caps) while the clients run.
	Rounds, Generations, RowsPerGeneration int
	Row                                    RowShape
	// Latency (+ up to Jitter) is added to every object-store request.
	Latency, Jitter time.Duration
	// Adders and Getters are clients that each add one row (or get one sealed row
	// by id) and pause for Pause, in a loop.
	Adders, Getters int
	Pause           time.Duration
}

// DefaultLockConfig is one store with 8 pending generations on a bucket with 50 ms
// per request, and 4 adders and 4 getters.
func DefaultLockConfig() LockConfig {
	return LockConfig{Rounds: 5, Generations: 8, RowsPerGeneration: 500, Row: RealisticRow,
		Latency: 50 * time.Millisecond, Jitter: 10 * time.Millisecond, Adders: 4, Getters: 4, Pause: 5 * time.Millisecond}
}

// LockResult is one shape's outcome.
type LockResult struct {
	Shape LockShape
	// Adds and Gets are the latencies of the operations that overlapped a merge;
	// IdleAdds and IdleGets of those that did not (the same store and clients in
	// the same run: what the calls cost without a merge).
	Adds, Gets         Quantiles
	IdleAdds, IdleGets Quantiles
	// LongestHold is the longest time the exclusive lock was held: measured around
	// the lock for the old shape; for the new shape, whose lock is inside
	// Store.Commit, it is the longest wait of a probe that takes the store's shared
	// lock every 0.2 ms (it waits exactly while a commit holds or awaits the lock).
	LongestHold time.Duration
	// ProbeMax is that probe's longest wait, for both shapes.
	ProbeMax time.Duration
	// Merge is the mean merge duration.
	Merge time.Duration
	// Rows is the number of rows in the base table after the check (every
	// acknowledged add and every setup row present once).
	Rows int64
}

const lockStore = "locks"

// span is an operation's or a merge's time interval.
type span struct{ start, end time.Time }

func (s span) overlaps(o span) bool { return s.start.Before(o.end) && o.start.Before(s.end) }

// RunLock runs the scenario in the given shape.
func RunLock(ctx context.Context, env *Env, cfg LockConfig, shape LockShape) (LockResult, error) {
	res := LockResult{Shape: shape}
	if shape != OldShapeLockAcrossRead && shape != NewShapePrepareCommit {
		return res, fmt.Errorf("lock: unknown shape %q", shape)
	}
	raw, faulty, f, err := openMem(ctx, env.Seed+2)
	if err != nil {
		return res, err
	}
	wk := newWorker(faulty, "worker-00", store.Config{}, defaultMergeConfig())
	defer wk.close()
	e, err := wk.stores.Create(ctx, registry.Entry{Kind: registry.KindRollout, Name: lockStore})
	if err != nil {
		return res, err
	}
	s, rel, err := wk.stores.Open(ctx, registry.KindRollout, lockStore)
	if err != nil {
		return res, err
	}
	defer rel()
	f.SetLatency(cfg.Latency, cfg.Jitter)

	// shared is what an add or get holds while it runs, probeLock what the probe
	// takes.
	var oldLock sync.RWMutex
	shared := func() func() { return func() {} }
	probeLock := s.SharedLock
	if shape == OldShapeLockAcrossRead {
		shared = func() func() { oldLock.RLock(); return oldLock.RUnlock }
		probeLock = shared
	}

	var (
		mu          sync.Mutex
		want        = map[string]bool{}
		maybe       = map[string]bool{} // adds that failed (the stream's last, cancelled ones)
		visible     []string            // sealed ids, for gets
		adds, gets  []span
		probes      []span // probe waits over 1 ms
		windows     []span
		clientErr   error
		holds, runs durations
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
		wg.Go(func() {
			g := newRowGen(env.Seed+100+uint64(i), cfg.Row)
			for streamCtx.Err() == nil {
				rec, ids, err := g.batch(1)
				if err != nil {
					fail(err)
					return
				}
				t0 := time.Now()
				unlock := shared()
				err = s.Append(streamCtx, rec)
				unlock()
				sp := span{t0, time.Now()}
				rec.Release()
				if err != nil {
					mu.Lock()
					maybe[ids[0]] = true
					mu.Unlock()
					if streamCtx.Err() == nil {
						fail(fmt.Errorf("add: %w", err))
					}
					return
				}
				mu.Lock()
				adds = append(adds, sp)
				want[ids[0]] = true
				mu.Unlock()
				_ = sleepCtx(streamCtx, cfg.Pause)
			}
		})
	}
	for i := range cfg.Getters {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(env.Seed+200, uint64(i)))
			for streamCtx.Err() == nil {
				mu.Lock()
				var id string
				if len(visible) > 0 {
					id = visible[rng.IntN(len(visible))]
				}
				mu.Unlock()
				if id == "" {
					_ = sleepCtx(streamCtx, cfg.Pause)
					continue
				}
				t0 := time.Now()
				unlock := shared()
				rec, err := s.Get(streamCtx, id)
				unlock()
				sp := span{t0, time.Now()}
				if err != nil {
					if streamCtx.Err() == nil {
						fail(fmt.Errorf("get %s: %w", id, err))
					}
					return
				}
				if err := checkRow(rec, id); err != nil {
					fail(err)
					return
				}
				mu.Lock()
				gets = append(gets, sp)
				mu.Unlock()
				_ = sleepCtx(streamCtx, cfg.Pause)
			}
		})
	}
	wg.Go(func() {
		for streamCtx.Err() == nil {
			t0 := time.Now()
			probeLock()()
			if sp := (span{t0, time.Now()}); sp.end.Sub(sp.start) > time.Millisecond {
				mu.Lock()
				probes = append(probes, sp)
				mu.Unlock()
			}
			time.Sleep(200 * time.Microsecond)
		}
	})

	gen := newRowGen(env.Seed+3, cfg.Row)
	for round := range cfg.Rounds {
		for range cfg.Generations {
			rec, ids, err := gen.batch(cfg.RowsPerGeneration)
			if err != nil {
				return res, err
			}
			unlock := shared()
			err = s.Append(ctx, rec)
			if err == nil {
				_, err = s.Seal(ctx)
			}
			unlock()
			rec.Release()
			if err != nil {
				return res, fmt.Errorf("lock: round %d backlog: %w", round, err)
			}
			mu.Lock()
			visible = append(visible, ids...)
			for _, id := range ids {
				want[id] = true
			}
			mu.Unlock()
		}
		start := time.Now()
		switch shape {
		case OldShapeLockAcrossRead:
			var hold time.Duration
			hold, err = oldShapeMerge(ctx, s, &oldLock, defaultMergeConfig().MaxGenerations)
			holds = append(holds, hold)
		case NewShapePrepareCommit:
			_, err = wk.merger.Merge(ctx, s, true)
		}
		end := time.Now()
		if err != nil {
			return res, fmt.Errorf("lock: round %d merge: %w", round, err)
		}
		mu.Lock()
		windows = append(windows, span{start, end})
		mu.Unlock()
		runs = append(runs, end.Sub(start))
		env.log().Info("lock: merged", "shape", string(shape), "round", round, "took", end.Sub(start).Round(time.Millisecond))
	}
	stopStream()
	wg.Wait()
	if clientErr != nil {
		return res, fmt.Errorf("lock (%s): %w", shape, clientErr)
	}

	// split returns the durations of the ops that overlapped a merge, and of the
	// others.
	split := func(ops []span) (in, out durations) {
		for _, op := range ops {
			overlapped := false
			for _, w := range windows {
				if op.overlaps(w) {
					overlapped = true
					break
				}
			}
			if overlapped {
				in = append(in, op.end.Sub(op.start))
			} else {
				out = append(out, op.end.Sub(op.start))
			}
		}
		return in, out
	}
	addsIn, addsOut := split(adds)
	getsIn, getsOut := split(gets)
	probesIn, _ := split(probes)
	res.Adds, res.IdleAdds = addsIn.quantiles(), addsOut.quantiles()
	res.Gets, res.IdleGets = getsIn.quantiles(), getsOut.quantiles()
	res.ProbeMax = probesIn.quantiles().Max
	res.LongestHold = res.ProbeMax
	if shape == OldShapeLockAcrossRead {
		res.LongestHold = holds.quantiles().Max
	}
	var total time.Duration
	for _, r := range runs {
		total += r
	}
	res.Merge = total / time.Duration(max(len(runs), 1))

	f.Clear()
	if _, err := s.Seal(ctx); err != nil {
		return res, err
	}
	if _, err := wk.merger.Merge(ctx, s, true); err != nil {
		return res, err
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
	col := rec.Column(rec.Schema().FieldIndices(table.IDColumn)[0]).(*array.String)
	if rec.NumRows() != 1 || col.Value(0) != id {
		return fmt.Errorf("get %s: got %d rows, first id %q", id, rec.NumRows(), col.Value(0))
	}
	return nil
}

// oldShapeMerge is one merge pass of OldShapeLockAcrossRead: the same steps as
// merge.Merger's pass (shard manifest, base version, the oldest pending generations
// up to maxGenerations, read, stage, commit, drain), with the exclusive lock held
// from the first read to the commit. The drain runs after the lock is released,
// which favours the old shape. It returns how long the lock was held.
func oldShapeMerge(ctx context.Context, s *store.Store, lock *sync.RWMutex, maxGenerations int) (time.Duration, error) {
	w, err := s.Writer(ctx)
	if err != nil {
		return 0, err
	}
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
		pending := sm.Pending(base.Watermark(s.Shard()))
		if maxGenerations > 0 && len(pending) > maxGenerations {
			pending = pending[:maxGenerations]
		}
		if len(pending) == 0 {
			return 0, nil
		}
		reads := wal.NewGenerationCache(0) // like the merger: no read cache
		var recs []arrow.RecordBatch
		for _, g := range pending {
			data, err := reads.Read(ctx, s.Bucket(), wal.GenerationKey(s.Entry().URI, g))
			if err != nil {
				return 0, err
			}
			recs = append(recs, data.Records...)
		}
		upTo := pending[len(pending)-1].Generation
		txn, err := s.Table().Prepare(ctx, base, table.Append{Records: recs, Shard: s.Shard(), Generation: upTo})
		if err != nil {
			return 0, err
		}
		m, err := txn.Commit(ctx)
		if err != nil {
			return 0, err
		}
		s.ObserveBase(m)
		return upTo, nil
	}()
	hold := time.Since(start)
	lock.Unlock()
	if err != nil || upTo == 0 {
		return hold, err
	}
	d, err := w.Drain(ctx, upTo)
	if err != nil {
		return hold, fmt.Errorf("old-shape merge: drain: %w", err)
	}
	s.ObserveShard(d.Manifest)
	return hold, nil
}
