package scanner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// writeBatch is the number of row writes per etcd transaction. Each is a nested
// transaction of one compare and one op, and etcd's default --max-txn-ops (128)
// bounds the top level and the nested ops together.
const writeBatch = 64

// Summary says what one scan round did.
type Summary struct {
	// Skipped is set when another replica holds the scanner lock; SkipReason
	// names the holder. Nothing else is set then.
	Skipped    bool   `json:"skipped"`
	SkipReason string `json:"skip_reason,omitempty"`
	// Stores is the number of registered stores (both kinds).
	Stores int `json:"stores"`
	// Probed stores had an unchanged base version and cost only probes; Observed
	// stores had their base manifest read.
	Probed   int `json:"probed"`
	Observed int `json:"observed"`
	// Changed rows were written; Deleted rows belonged to stores no longer
	// registered.
	Changed int `json:"changed"`
	Deleted int `json:"deleted"`
	// Conflicts are rows another writer (a Rescan) changed during the round; the
	// next round looks at them again.
	Conflicts int `json:"conflicts"`
	// Errors counts stores whose observation failed; their rows keep their
	// previous values.
	Errors   int           `json:"errors"`
	Duration time.Duration `json:"duration"`
}

// Scanner observes every registered store and keeps P/stats/<target> up to date.
// It is safe for concurrent use; rounds run one at a time.
type Scanner struct {
	bucket    *objstore.Bucket
	reg       *registry.Registry
	rows      stats.Rows
	cfg       Config
	log       *slog.Logger
	metrics   *scanMetrics
	coord     *roundLock
	cache     *observations
	tableOpts []table.Option

	round chan struct{} // holds a token while a round runs
}

// New returns a Scanner of the stores registered in bucket, writing stats rows
// under the task queue's prefix and taking the "scanner" coordination lock under
// lease. Call Run to scan periodically, or Scan for one round.
func New(client *clientv3.Client, ts *tasks.Queue, bucket *objstore.Bucket, lease Lease, cfg Config) *Scanner {
	cfg = cfg.withDefaults()
	log := cfg.Logger.With("component", "scanner")
	return &Scanner{
		bucket:  bucket,
		reg:     registry.New(bucket),
		rows:    stats.NewRows(client, ts.Keys()),
		cfg:     cfg,
		log:     log,
		metrics: newScanMetrics(cfg.Registerer),
		coord:   &roundLock{ts: ts, name: ScannerLock, lease: lease, log: log},
		cache:   &observations{max: cfg.MaxCachedStores, m: map[registry.Target]*observation{}},
		// The scanner reads manifests only: no fragment cache.
		tableOpts: []table.Option{table.WithCacheBytes(0), table.WithClock(cfg.Clock), table.WithLogger(cfg.Logger)},
		round:     make(chan struct{}, 1),
	}
}

// Run scans at once and then every scan interval until ctx is done, then gives
// up the scanner lock. A round that overruns the interval is followed by the next
// one at once.
func (s *Scanner) Run(ctx context.Context) {
	defer s.coord.release(ctx)
	every(ctx, s.cfg.Clock, s.cfg.Interval, func(ctx context.Context) { _, _ = s.Scan(ctx) })
}

// Scan runs one round, if this replica holds (or can take) the scanner lock: list
// both registries, observe every store, write the rows that changed and delete
// the rows of stores no longer registered. It returns an error only when the
// round as a whole failed (a registry listing, etcd, or a lost lock); a store that
// cannot be observed is logged and counted in Summary.Errors.
func (s *Scanner) Scan(ctx context.Context) (Summary, error) {
	select {
	case s.round <- struct{}{}:
	case <-ctx.Done():
		return Summary{}, ctx.Err()
	}
	defer func() { <-s.round }()

	start := s.cfg.Clock.Now()
	sum, err := s.scan(ctx)
	sum.Duration = s.cfg.Clock.Since(start)
	switch {
	case err != nil && ctx.Err() != nil:
		s.metrics.rounds.WithLabelValues("failed").Inc()
		s.log.Info("stats scan interrupted", "err", err)
	case err != nil:
		s.metrics.rounds.WithLabelValues("failed").Inc()
		s.log.Error("stats scan failed", "err", err, "changed", sum.Changed, "deleted", sum.Deleted,
			"errors", sum.Errors, "duration", sum.Duration.String())
	case sum.Skipped:
		s.metrics.rounds.WithLabelValues("skipped").Inc()
		s.log.Debug("stats scan skipped", "reason", sum.SkipReason)
	default:
		s.metrics.rounds.WithLabelValues("done").Inc()
		s.metrics.duration.Observe(sum.Duration.Seconds())
		s.metrics.lastRound.Set(float64(s.cfg.Clock.Now().Unix()))
		level := slog.LevelDebug
		if sum.Changed+sum.Deleted+sum.Errors+sum.Conflicts > 0 {
			level = slog.LevelInfo
		}
		s.log.Log(ctx, level, "stats scan done", "stores", sum.Stores, "probed", sum.Probed,
			"observed", sum.Observed, "changed", sum.Changed, "deleted", sum.Deleted,
			"conflicts", sum.Conflicts, "errors", sum.Errors, "duration", sum.Duration.String())
	}
	return sum, err
}

// storeRef names one registered store.
type storeRef struct {
	kind   registry.Kind
	name   string
	target registry.Target
}

// result is one store's outcome in a round.
type result struct {
	storeRef
	row  stats.Row
	mode observeMode
	err  error
}

// rowWrite is one conditional write of a round.
type rowWrite struct {
	target registry.Target
	del    bool
	// modRev is the row's mod revision when the round read it (0: absent); the
	// write happens only if it is unchanged.
	modRev int64
	value  string
}

func (s *Scanner) scan(ctx context.Context) (Summary, error) {
	var sum Summary
	lock, err := s.coord.hold(ctx)
	if errors.Is(err, tasks.ErrCoordinationHeld) {
		return Summary{Skipped: true, SkipReason: err.Error()}, nil
	}
	if err != nil {
		return sum, fmt.Errorf("stats scan: %w", err)
	}

	stores, err := s.registered(ctx)
	if err != nil {
		// Without the full listing a missing store is indistinguishable from a
		// deleted one: write nothing.
		return sum, fmt.Errorf("stats scan: %w", err)
	}
	sum.Stores = len(stores)
	s.metrics.stores.Set(float64(len(stores)))
	stored, err := s.rows.All(ctx)
	if err != nil {
		return sum, fmt.Errorf("stats scan: %w", err)
	}

	results := s.observeAll(ctx, stores)
	if err := ctx.Err(); err != nil {
		return sum, fmt.Errorf("stats scan: %w", err)
	}

	registered := make(map[registry.Target]bool, len(stores))
	var writes []rowWrite
	current := make(map[registry.Target]stats.Row, len(results))
	kinds := make(map[registry.Target]registry.Kind, len(results))
	for _, r := range results {
		registered[r.target] = true
		kinds[r.target] = r.kind
		if r.err != nil {
			if cur, found := stored[r.target]; found && cur.Err == nil {
				current[r.target] = cur.Row
			}
			sum.Errors++
			s.metrics.errors.Inc()
			s.log.Warn("stats scan: store not observed; its row keeps its previous value",
				"target", r.target, "kind", r.kind, "store", r.name, "err", r.err)
			continue
		}
		if r.mode == modeProbe {
			sum.Probed++
		} else {
			sum.Observed++
		}
		s.metrics.observed.WithLabelValues(string(r.mode)).Inc()
		current[r.target] = r.row
		cur, found := stored[r.target]
		if found && cur.Err == nil && cur.Row.SameObservation(r.row) {
			continue
		}
		writes = append(writes, rowWrite{target: r.target, modRev: cur.ModRev, value: stats.Encode(r.row)})
	}
	for target, cur := range stored {
		if !registered[target] {
			writes = append(writes, rowWrite{target: target, del: true, modRev: cur.ModRev})
		}
	}
	s.cache.retain(registered)
	sort.Slice(writes, func(i, j int) bool { return writes[i].target.Compare(writes[j].target) < 0 })

	if s.cfg.beforeWrite != nil {
		s.cfg.beforeWrite(ctx)
	}
	if err := s.apply(ctx, lock, writes, &sum); err != nil {
		if errors.Is(err, tasks.ErrCoordinationLost) {
			s.coord.lost(lock)
		}
		return sum, fmt.Errorf("stats scan: %w", err)
	}
	s.metrics.observeRound(current, kinds, sum.Probed, sum.Observed)
	return sum, nil
}

// registered lists both registries: one listing per kind, no reads.
func (s *Scanner) registered(ctx context.Context) ([]storeRef, error) {
	var out []storeRef
	for _, k := range registry.Kinds() {
		names, err := s.reg.Names(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("list %s stores: %w", k, err)
		}
		for _, n := range names {
			out = append(out, storeRef{kind: k, name: n, target: registry.NewTarget(k, n)})
		}
	}
	return out, nil
}

// observeAll observes every store, at most Concurrency at once.
func (s *Scanner) observeAll(ctx context.Context, stores []storeRef) []result {
	results := make([]result, len(stores))
	sem := make(chan struct{}, s.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, ref := range stores {
		results[i].storeRef = ref
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			results[i].err = ctx.Err()
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i].row, results[i].mode, results[i].err = s.observeCached(ctx, ref)
		})
	}
	wg.Wait()
	return results
}

// observeCached observes one store from its cached observation, within the store
// timeout, and caches the new one. A failed observation drops the cache entry, so
// the next round starts that store from scratch.
func (s *Scanner) observeCached(ctx context.Context, ref storeRef) (stats.Row, observeMode, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	defer cancel()
	obs, mode, err := s.observe(ctx, ref.kind, ref.name, s.cache.get(ref.target))
	if err != nil {
		s.cache.drop(ref.target)
		return stats.Row{}, "", describe(ref.target, err)
	}
	s.cache.put(ref.target, obs)
	return obs.row(s.cfg.Clock.Now()), mode, nil
}

// apply performs the round's writes in batches, each through the scanner lock's
// guarded transaction, each row conditional on the mod revision the round read.
func (s *Scanner) apply(ctx context.Context, lock *tasks.CoordinationLock, writes []rowWrite, sum *Summary) error {
	for len(writes) > 0 {
		n := min(len(writes), writeBatch)
		batch := writes[:n]
		writes = writes[n:]
		ops := make([]clientv3.Op, len(batch))
		for i, w := range batch {
			key := s.rows.Key(w.target)
			op := clientv3.OpPut(key, w.value)
			if w.del {
				op = clientv3.OpDelete(key)
			}
			// Row write, nested in the lock's guarded transaction (CoordinationLock.Do:
			// if create_revision(P/coordination/scanner) == our acquisition):
			//   if   mod_revision(P/stats/<target>) == the revision this round read
			//                                        nobody (a Rescan) wrote the row since
			//   then put P/stats/<target> = row      (or delete it: store no longer registered)
			ops[i] = clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", w.modRev)},
				[]clientv3.Op{op}, nil)
		}
		resp, err := lock.Do(ctx, ops...)
		if err != nil {
			return err
		}
		for i, w := range batch {
			if !resp.Responses[i].GetResponseTxn().GetSucceeded() {
				sum.Conflicts++
				s.metrics.conflicts.Inc()
				s.log.Info("stats row changed during the scan; left for the next round", "target", w.target)
				continue
			}
			if w.del {
				sum.Deleted++
				s.metrics.written.WithLabelValues("delete").Inc()
				s.log.Info("stats row deleted: store no longer registered", "target", w.target)
			} else {
				sum.Changed++
				s.metrics.written.WithLabelValues("put").Inc()
			}
		}
	}
	return nil
}

// maxRescanAttempts bounds Rescan's retries when the row keeps changing under it.
const maxRescanAttempts = 3

// Rescan observes one target in full now and writes its row if it changed,
// whether or not this replica holds the scanner lock: its write is conditional on
// the row being unchanged since Rescan read it, so it never overwrites a row
// written after it looked (it reads and observes again instead). It returns the
// row now stored.
//
// A malformed target wraps tasks.ErrInvalidArgument and registry.ErrInvalidName;
// a target whose store is not registered wraps registry.ErrNotFound (and its row,
// if any, is deleted).
func (s *Scanner) Rescan(ctx context.Context, target registry.Target) (stats.Row, error) {
	if err := target.Validate(); err != nil {
		return stats.Row{}, fmt.Errorf("rescan: %w: %w", tasks.ErrInvalidArgument, err)
	}
	kind, name := target.Kind, target.Name
	for range maxRescanAttempts {
		cur, found, err := s.rows.Get(ctx, target)
		if err != nil {
			return stats.Row{}, fmt.Errorf("rescan %s: %w", target, err)
		}
		if _, err := s.reg.Get(ctx, kind, name); err != nil {
			if errors.Is(err, registry.ErrNotFound) {
				s.cache.drop(target)
				if found {
					if ok, derr := s.rows.DeleteIf(ctx, target, cur.ModRev); derr != nil {
						return stats.Row{}, fmt.Errorf("rescan %s: %w", target, derr)
					} else if ok {
						s.metrics.written.WithLabelValues("delete").Inc()
						s.log.Info("stats row deleted: store no longer registered", "target", target)
					}
				}
			}
			return stats.Row{}, fmt.Errorf("rescan %s: %w", target, err)
		}
		octx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
		obs, _, err := s.observe(octx, kind, name, nil)
		cancel()
		if err != nil {
			s.metrics.errors.Inc()
			return stats.Row{}, fmt.Errorf("rescan: %w", describe(target, err))
		}
		s.cache.put(target, obs)
		s.metrics.observed.WithLabelValues(string(modeFull)).Inc()
		row := obs.row(s.cfg.Clock.Now())
		if found && cur.Err == nil && cur.Row.SameObservation(row) {
			return cur.Row, nil
		}
		ok, err := s.rows.PutIf(ctx, row, cur.ModRev)
		if err != nil {
			return stats.Row{}, fmt.Errorf("rescan %s: %w", target, err)
		}
		if ok {
			s.metrics.written.WithLabelValues("put").Inc()
			s.log.Info("stats row rescanned", "target", target, "version", row.Version,
				"pending_wal_generations", row.PendingWALGenerations)
			return row, nil
		}
		s.metrics.conflicts.Inc()
	}
	return stats.Row{}, fmt.Errorf("rescan %s: the row changed under each of %d attempts", target, maxRescanAttempts)
}

// Row returns the stats row of target, or an error wrapping ErrRowNotFound.
func (s *Scanner) Row(ctx context.Context, target registry.Target) (stats.Row, error) {
	if err := target.Validate(); err != nil {
		return stats.Row{}, fmt.Errorf("%w: %w", tasks.ErrInvalidArgument, err)
	}
	cur, found, err := s.rows.Get(ctx, target)
	if err != nil {
		return stats.Row{}, err
	}
	if !found {
		return stats.Row{}, fmt.Errorf("%s: %w", s.rows.Key(target), stats.ErrRowNotFound)
	}
	return cur.Row, cur.Err
}

// Page selects one page of Stats.
type Page struct {
	// Limit is the page size: 0 means DefaultPageLimit, at most MaxPageLimit.
	Limit int
	// PageToken continues a previous call; "" starts at the first target.
	PageToken string
}

// Stats returns one page of stats rows in target order and the token of the next
// page ("" when there is none). A row whose value does not decode is logged and
// left out.
func (s *Scanner) Stats(ctx context.Context, p Page) ([]stats.Row, string, error) {
	return listRows(ctx, s.rows, p, s.log)
}

func listRows(ctx context.Context, rs stats.Rows, p Page, log *slog.Logger) ([]stats.Row, string, error) {
	limit := p.Limit
	switch {
	case limit < 0:
		return nil, "", fmt.Errorf("%w: limit %d is negative", tasks.ErrInvalidArgument, limit)
	case limit == 0:
		limit = stats.DefaultPageLimit
	case limit > stats.MaxPageLimit:
		limit = stats.MaxPageLimit
	}
	page, more, _, err := rs.Page(ctx, p.PageToken, limit, 0)
	if err != nil {
		return nil, "", err
	}
	rows := make([]stats.Row, 0, len(page))
	for _, r := range page {
		if r.Err != nil {
			log.Warn("stats row skipped", "target", r.Target, "err", r.Err)
			continue
		}
		rows = append(rows, r.Row)
	}
	next := ""
	if more && len(page) > 0 {
		next = page[len(page)-1].Key
	}
	return rows, next, nil
}
