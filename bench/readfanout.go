package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// FanoutConfig sizes the read fan-out scenario.
type FanoutConfig struct {
	// Pending are the pending-generation counts measured (0 is the baseline).
	Pending []int
	// BaseRows are merged into the base table first; every pending generation then
	// adds RowsPerGeneration new rows.
	BaseRows, RowsPerGeneration int
	Row                         RowShape
	// ListRows is the list's limit.
	ListRows int
	// Latency (+ up to Jitter) is added to every object-store request while lists
	// are measured (building and merging run without it).
	Latency, Jitter time.Duration
	// Repeats is the number of measured lists per point (after one warm-up list);
	// the median is reported.
	Repeats int
}

// DefaultFanoutConfig lists 200 rows over 0, 50, 200 and 1000 pending generations
// of 2 rows on a bucket with 20 ms per request.
func DefaultFanoutConfig() FanoutConfig {
	return FanoutConfig{Pending: []int{0, 50, 200, 1000}, BaseRows: 200, RowsPerGeneration: 2, Row: RealisticRow,
		ListRows: 200, Latency: 20 * time.Millisecond, Jitter: 4 * time.Millisecond, Repeats: 3}
}

// FanoutPoint is one pending-generation count's measurements: median list times
// over the pending generations and after they were merged, by a reader with the
// worker's generation cache (256 MiB) and one without (wal.NewGenerationCache(0)).
type FanoutPoint struct {
	Pending                      int
	Cached, Uncached             time.Duration
	MergedCached, MergedUncached time.Duration
	// Requests* are object-store requests per list, over the pending generations
	// and after the merge.
	RequestsCached, RequestsUncached     float64
	MergedRequestsCached, MergedRequests float64
}

// PenaltyCached is the list time over pending generations divided by the time
// after the merge, with the generation cache.
func (p FanoutPoint) PenaltyCached() float64 { return ratio(p.Cached, p.MergedCached) }

// PenaltyUncached is PenaltyCached without the cache.
func (p FanoutPoint) PenaltyUncached() float64 { return ratio(p.Uncached, p.MergedUncached) }

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

const fanoutStore = "fanout"

// RunFanout measures every point of cfg.Pending.
func RunFanout(ctx context.Context, env *Env, cfg FanoutConfig) ([]FanoutPoint, error) {
	var out []FanoutPoint
	for _, n := range cfg.Pending {
		p, err := runFanoutPoint(ctx, env, cfg, n)
		if err != nil {
			return out, fmt.Errorf("read fan-out over %d pending generations: %w", n, err)
		}
		env.log().Info("fanout: measured", "pending", n, "cached", p.Cached, "uncached", p.Uncached,
			"merged_cached", p.MergedCached, "merged_uncached", p.MergedUncached)
		out = append(out, p)
	}
	return out, nil
}

func runFanoutPoint(ctx context.Context, env *Env, cfg FanoutConfig, n int) (FanoutPoint, error) {
	p := FanoutPoint{Pending: n}
	raw, faulty, f, err := openMem(ctx, env.Seed+4+uint64(n))
	if err != nil {
		return p, err
	}
	writer := newWorker(faulty, "worker-00", store.Config{}, defaultMergeConfig())
	defer writer.close()
	cached := newWorker(faulty, "reader-cache", store.Config{}, defaultMergeConfig())
	defer cached.close()
	uncached := newWorker(faulty, "reader-nocache", store.Config{Generations: wal.NewGenerationCache(0)}, defaultMergeConfig())
	defer uncached.close()

	e, err := writer.stores.Create(ctx, registry.Entry{Kind: registry.KindRollout, Name: fanoutStore})
	if err != nil {
		return p, err
	}
	s, rel, err := writer.stores.Open(ctx, registry.KindRollout, fanoutStore)
	if err != nil {
		return p, err
	}
	defer rel()
	gen := newRowGen(env.Seed+5, cfg.Row)
	want := map[string]bool{}
	add := func(rows int) error {
		rec, ids, err := gen.batch(rows)
		if err != nil {
			return err
		}
		defer rec.Release()
		if err := s.Append(ctx, rec); err != nil {
			return err
		}
		for _, id := range ids {
			want[id] = true
		}
		_, err = s.Seal(ctx)
		return err
	}
	if err := add(cfg.BaseRows); err != nil {
		return p, err
	}
	if _, err := writer.merger.Merge(ctx, s, true); err != nil {
		return p, err
	}
	for range n {
		if err := add(cfg.RowsPerGeneration); err != nil {
			return p, err
		}
	}
	if got := s.Snapshot().PendingCount(); got != n {
		return p, fmt.Errorf("%d pending generations after the build, want %d", got, n)
	}

	wantRows := min(cfg.ListRows, len(want))
	measure := func(r *benchWorker) (time.Duration, float64, error) {
		rs, rel, err := r.stores.Open(ctx, registry.KindRollout, fanoutStore)
		if err != nil {
			return 0, 0, err
		}
		defer rel()
		list := func() (time.Duration, error) {
			start := time.Now()
			recs, err := rs.List(ctx, store.ListOptions{Limit: cfg.ListRows})
			d := time.Since(start)
			if err != nil {
				return d, err
			}
			defer func() {
				for _, r := range recs {
					r.Release()
				}
			}()
			if len(recs) != wantRows {
				return d, fmt.Errorf("list returned %d rows, want %d", len(recs), wantRows)
			}
			return d, nil
		}
		if _, err := list(); err != nil { // warm-up: caches, snapshot
			return 0, 0, err
		}
		before := f.TotalRequests()
		var ds durations
		for range cfg.Repeats {
			d, err := list()
			if err != nil {
				return 0, 0, err
			}
			ds = append(ds, d)
		}
		return ds.median(), float64(f.TotalRequests()-before) / float64(cfg.Repeats), nil
	}
	both := func(c, u *time.Duration, creqs, ureqs *float64) error {
		f.SetLatency(cfg.Latency, cfg.Jitter)
		defer f.Clear()
		var err error
		if *c, *creqs, err = measure(cached); err != nil {
			return err
		}
		*u, *ureqs, err = measure(uncached)
		return err
	}
	if err := both(&p.Cached, &p.Uncached, &p.RequestsCached, &p.RequestsUncached); err != nil {
		return p, err
	}
	if _, err := writer.merger.Merge(ctx, s, true); err != nil {
		return p, err
	}
	if _, err := verifyBase(ctx, raw, e.URI, want, nil); err != nil {
		return p, err
	}
	// The readers see the merge once their snapshots are older than SnapshotTTL
	// (1 s, the default).
	if err := sleepCtx(ctx, 1100*time.Millisecond); err != nil {
		return p, err
	}
	if err := both(&p.MergedCached, &p.MergedUncached, &p.MergedRequestsCached, &p.MergedRequests); err != nil {
		return p, err
	}
	return p, nil
}
