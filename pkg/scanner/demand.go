package scanner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/coord/pending"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// Defaults of merges on demand (DemandConfig).
const (
	// DefaultMergeMaxDelay is MERGE_MAX_DELAY: a store whose oldest pending
	// generation was sealed this long ago is merged (by then) even below
	// MERGE_WAL_MIN_GENERATIONS, so a quiet store's rows do not wait for seven
	// more generations that may never come.
	DefaultMergeMaxDelay = 30 * time.Second
	// demandTick re-judges the entries without a change, for the age rule.
	demandTick = time.Second
	// demandStandby is how often a replica that does not hold the lock tries it:
	// how long merges on demand can pause after the holder dies, beside the
	// holder's lease TTL.
	demandStandby = 5 * time.Second
	// demandSpacing spaces rounds: twenty workers sealing every second change
	// their entries twenty times a second, and one round judges them all.
	demandSpacing = 250 * time.Millisecond
	// demandMaxEnqueues caps the new tasks of one round, as the sweep's cap does;
	// the rest are enqueued a round later.
	demandMaxEnqueues = DefaultMergeMaxEnqueues
	// demandSettle is how long a finished merge's start stays the cutoff of its
	// target's entries (see MergeDemand): a worker that merged republishes
	// within its MinInterval, so an entry still older than the merge after this
	// long was not changed by it, and counts again.
	demandSettle = 10 * time.Second
)

// MergeDemandLock is the coordination lock of merges on demand,
// P/coordination/merge-demand.
const MergeDemandLock = "merge-demand"

// DemandConfig configures a MergeDemand. Zero fields take their defaults.
type DemandConfig struct {
	// MinGenerations is MERGE_WAL_MIN_GENERATIONS (DefaultMinGenerations), the
	// merge sweep's threshold: a store with at least this many pending
	// generations summed over the workers' entries is merged.
	MinGenerations int
	// MaxDelay is MERGE_MAX_DELAY (DefaultMergeMaxDelay): a store's oldest
	// pending generation is merged by this age, however few it has (its merge
	// starts that much earlier as recent merges took: mergeTimes.startBy).
	MaxDelay time.Duration
	// RetryAfterFailure is how long a store whose merge failed waits before
	// merges on demand try it again (the merge sweep's interval): a failing
	// merge must not be retried four times a second.
	RetryAfterFailure time.Duration

	// Clock, Logger and Registerer are as in Config.
	Clock      clock.Clock
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

func (c DemandConfig) withDefaults() DemandConfig {
	c.Clock, c.Logger = orDefault(c.Clock, c.Logger)
	setDefault(&c.MinGenerations, DefaultMinGenerations)
	setDefault(&c.MaxDelay, DefaultMergeMaxDelay)
	setDefault(&c.RetryAfterFailure, DefaultMergeSweepInterval)
	return c
}

// DemandSummary says what one round of merges on demand did.
type DemandSummary struct {
	Skipped bool
	// Due counts the stores found due, by generations or by age; Live of them
	// already had a merge queued or running, and FailedLately had a merge that
	// failed less than RetryAfterFailure ago.
	Due, Live, FailedLately int
	// Enqueued, Deduplicated and Errors are the enqueues' outcomes;
	// SkippedByCap were left for the next round.
	Enqueued, Deduplicated, Errors, SkippedByCap int
	// Pending is the pending generations summed over every entry.
	Pending int
}

// Why a store is due: its reason, as its metric label and log value say it.
const (
	dueByGenerations = "generations"
	dueByAge         = "age"
)

// dueStore is a store found due, and why: dueByGenerations or dueByAge.
type dueStore struct {
	pending.Demand
	reason string
}

// tracked is a merge this MergeDemand enqueued, until it has settled.
type tracked struct {
	id string
	// byAge: the store was enqueued for its oldest generation's age (its merge
	// times the age rule's lead: mergeTimes).
	byAge bool
	// claimedRev is the etcd revision the merge was claimed at (its fencing
	// token) once it finished (zero while live, or when it failed); entries of
	// the target written before it do not count.
	claimedRev int64
	// checkedAt is when a round last read the task while its dedupe key still
	// named it: a key that outlived its task is found within RetryAfterFailure.
	checkedAt time.Time
	// stale: the dedupe key names a finished or missing task; Enqueue replaces it.
	stale bool
	// gone: the merge was skipped because the store was deleted; its cutoff holds
	// for as long as any worker still lists the store.
	gone bool
	// finishedSeen is when a round first saw it finished (this clock).
	finishedSeen time.Time
	failed       bool
}

// MergeDemand enqueues merge_wal for a store as soon as the workers' pending
// entries (package pending) show it due: at least MinGenerations pending
// generations over all its shards, or an oldest pending generation older than
// MaxDelay. It judges the entries after every change (at most every 250 ms) and
// every second, instead of at the next stats scan, so pending generations stay
// near the threshold from a store's first second.
//
// It complements the merge sweep, never replaces it: entries cover only the
// stores workers hold open, and a dead worker's entries die with it, so the
// stats scan and the merge sweep remain the authoritative reconciliation (and
// the only path for orphaned shards).
//
// A merge's own entry lag: a worker republishes its entry after the merge took
// its generations, at most MinInterval later; an entry written before that merge
// was claimed still counts them, and judging it would enqueue a merge that finds
// nothing. So once a merge of a target finishes (ours, the merge sweep's or an
// operator's), entries of the target whose etcd mod revision is below the merge's
// fencing token (the revision of its claim) are left out until they are
// republished (or, at most demandSettle later, taken as they are: a worker that
// did not republish was not changed by the merge). Revisions, not clocks: the
// claiming replica's clock may be skewed against this one's. A store with a live
// merge is not judged at all: the queue's deduplication would return the live task
// anyway; a dedupe key that names a task no longer live is checked once per
// RetryAfterFailure and then replaced by an Enqueue. A merge skipped because the
// store was deleted cuts off every entry of it written before: a worker holding an
// idle handle of the deleted store would otherwise list it for ever, and every
// demandSettle bring a merge of nothing.
//
// Ages are the entries' (package pending): a worker's clock skew neither makes its
// stores overdue nor hides them.
//
// MaxDelay is a freshness target: the age by which a store's oldest pending
// generation is in its base table. So a store is due by age that much less the
// slowest of the recent merges by age, enqueue to finish (mergeTimes.startBy): a
// merge enqueued at MaxDelay would land a merge time late. Each merge is due
// (tasks.Task.DueAt) when it fell behind (dueStore.due), and the scheduler claims
// the task due first: stores are served in the order they fell behind.
//
// Enqueues deduplicate onto a live task, so replicas never double a merge; the
// coordination lock only keeps them from doubling the etcd reads. Rounds of one
// MergeDemand run one at a time (Run's goroutine).
type MergeDemand struct {
	ts      *tasks.Queue
	view    *pending.View
	cfg     DemandConfig
	log     *slog.Logger
	coord   *roundLock
	metrics *demandMetrics

	merges map[registry.Target]*tracked // by target; Run's goroutine only
	// times are the run times of the merges settle saw done: the age rule's
	// lead. Run's goroutine only.
	times mergeTimes
}

// NewMergeDemand returns a MergeDemand following the pending entries under the
// task queue's prefix and taking the "merge-demand" coordination lock under
// lease.
func NewMergeDemand(client *clientv3.Client, ts *tasks.Queue, lease Lease, cfg DemandConfig) *MergeDemand {
	cfg = cfg.withDefaults()
	log := cfg.Logger.With("component", "merge-demand")
	return &MergeDemand{
		ts:      ts,
		view:    pending.NewView(client, ts.Keys().Prefix(), cfg.Clock, cfg.Logger),
		cfg:     cfg,
		log:     log,
		coord:   &roundLock{ts: ts, name: MergeDemandLock, lease: lease, log: log},
		metrics: newDemandMetrics(cfg.Registerer),
		merges:  map[registry.Target]*tracked{},
	}
}

// Run follows the entries and judges them after each change and every second,
// until ctx is done; then it gives up the lock.
func (d *MergeDemand) Run(ctx context.Context) {
	defer d.coord.release(ctx)
	ctx, cancel := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() { defer close(followed); d.view.Run(ctx) }()
	defer func() { cancel(); <-followed }()
	for {
		start := d.cfg.Clock.Now()
		sum, err := d.Round(ctx)
		if err != nil && ctx.Err() == nil {
			d.log.Warn("merges on demand: round failed", "err", err)
		}
		// A standby replica (another holds the lock) tries the lock again every
		// demandStandby, not at every change: each try is an etcd transaction.
		wait, changed := demandTick, d.view.Changed()
		if sum.Skipped {
			wait, changed = demandStandby, nil
		}
		tick := d.cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			tick.Stop()
			return
		case <-changed:
		case <-tick.C():
		}
		tick.Stop()
		if wait := demandSpacing - d.cfg.Clock.Since(start); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-d.cfg.Clock.After(wait):
			}
		}
	}
}

// Round judges the entries once, if this replica holds (or can take) the lock.
func (d *MergeDemand) Round(ctx context.Context) (DemandSummary, error) {
	var sum DemandSummary
	if !d.view.Synced() {
		return sum, nil
	}
	if _, err := d.coord.hold(ctx); errors.Is(err, tasks.ErrCoordinationHeld) {
		sum.Skipped = true
		d.metrics.rounds.WithLabelValues("skipped").Inc()
		return sum, nil
	} else if err != nil {
		d.metrics.rounds.WithLabelValues("failed").Inc()
		return sum, fmt.Errorf("merges on demand: %w", err)
	}
	sum, err := d.round(ctx)
	if err != nil {
		d.metrics.rounds.WithLabelValues("failed").Inc()
		return sum, err
	}
	d.metrics.rounds.WithLabelValues("done").Inc()
	d.metrics.pending.Set(float64(sum.Pending))
	if sum.Enqueued+sum.Errors+sum.SkippedByCap > 0 {
		d.log.Debug("merges on demand: round done", "due", sum.Due, "live", sum.Live, "enqueued", sum.Enqueued,
			"deduplicated", sum.Deduplicated, "errors", sum.Errors, "skipped_by_cap", sum.SkippedByCap, "pending", sum.Pending)
	}
	return sum, nil
}

func (d *MergeDemand) round(ctx context.Context) (DemandSummary, error) {
	var sum DemandSummary
	live, err := d.ts.LiveIDs(ctx, tasks.KindMergeWAL)
	if err != nil {
		return sum, fmt.Errorf("merges on demand: %w", err)
	}
	now := d.cfg.Clock.Now()
	d.settle(ctx, live, now)

	// A merge this MergeDemand did not enqueue (the merge sweep's, an operator's)
	// is followed too: its end is a cutoff like ours.
	for target, id := range live {
		if m := d.merges[target]; m == nil || m.id != id {
			d.merges[target] = &tracked{id: id, checkedAt: now}
		}
	}
	demand := d.view.Demand(now, func(target registry.Target) int64 {
		if m := d.merges[target]; m != nil {
			return m.claimedRev
		}
		return 0
	})
	for _, dm := range demand {
		sum.Pending += dm.Generations
	}
	var byCount, byAge []dueStore
	startBy := d.times.startBy(d.cfg.MaxDelay)
	for _, dm := range demand {
		switch {
		case dm.Generations >= d.cfg.MinGenerations:
			byCount = append(byCount, dueStore{dm, dueByGenerations})
		case dm.Generations > 0 && dm.Age+demandTick >= startBy:
			// Judged once a tick: a store whose oldest generation reaches the age
			// its merge must start at before the next round is due in this one,
			// not up to a tick late.
			byAge = append(byAge, dueStore{dm, dueByAge})
		default:
			continue
		}
		sum.Due++
	}
	// Most pending first (Demand's order), then the stores due by age.
	for _, c := range append(byCount, byAge...) {
		if _, ok := live[c.Target]; ok && !d.merges[c.Target].stale {
			sum.Live++
			continue
		}
		if m := d.merges[c.Target]; m != nil && m.failed && now.Sub(m.finishedSeen) < d.cfg.RetryAfterFailure {
			sum.FailedLately++
			continue
		}
		if sum.Enqueued >= demandMaxEnqueues {
			sum.SkippedByCap++ // the least due: a round later
			continue
		}
		task, dedup, err := d.ts.EnqueueDue(ctx, tasks.KindMergeWAL, c.Target, c.due(now, startBy, d.cfg.MinGenerations))
		switch {
		case err != nil && ctx.Err() != nil:
			return sum, fmt.Errorf("merges on demand: %w", err)
		case err != nil:
			sum.Errors++
			d.metrics.targets.WithLabelValues(c.reason, "error").Inc()
			d.log.Warn("merges on demand: enqueue failed", "target", c.Target, "err", err)
			continue
		case dedup:
			sum.Deduplicated++
			d.metrics.targets.WithLabelValues(c.reason, "deduplicated").Inc()
		default:
			sum.Enqueued++
			d.metrics.targets.WithLabelValues(c.reason, "enqueued").Inc()
			d.log.Info("merge_wal enqueued on demand", "task", task.ID, "target", c.Target, "reason", c.reason,
				"pending_wal_generations", c.Generations, "pending_wal_bytes", c.Bytes,
				"oldest_age", c.Age.Round(time.Millisecond).String(), "workers", c.Workers)
		}
		d.merges[c.Target] = &tracked{id: task.ID, byAge: c.reason == dueByAge}
	}
	return sum, nil
}

// due is when a store's merge should start at the latest, which is when it
// became due: by age, when its oldest pending generation reaches startBy
// (mergeTimes.startBy); by count, when its generations reached minGenerations,
// taken as if they had arrived evenly since the oldest (Age x (1 - min/count)
// ago). The queue claims the task due first, so stores are served in the order
// they fell behind: one enqueued late by age (a round that came late, a merge
// that failed) overtakes the ones enqueued on time, and a busy store whose
// generations piled up while its last merge ran (it cannot be enqueued again
// before that merge ends) is not put behind every quiet store that came due
// meanwhile; yet a store that falls behind later is served later, whatever its
// count, so no store starves another.
func (c dueStore) due(now time.Time, startBy time.Duration, minGenerations int) time.Time {
	if c.reason == dueByGenerations {
		behind := 1 - float64(minGenerations)/float64(max(c.Generations, minGenerations))
		return now.Add(-time.Duration(float64(c.Age) * behind))
	}
	return now.Add(startBy - c.Age)
}

// settle learns how the merges it tracks ended: a merge no longer live is read
// once, for its claim's revision (the cutoff of its target's entries) and whether
// it failed; a finished merge is forgotten demandSettle after it was seen
// finished, a merge of a deleted store once no worker lists the store.
func (d *MergeDemand) settle(ctx context.Context, live map[registry.Target]string, now time.Time) {
	listed := map[registry.Target]bool{}
	for _, dm := range d.view.Demand(now, nil) {
		listed[dm.Target] = true
	}
	for target, m := range d.merges {
		switch {
		case live[target] == m.id && now.Sub(m.checkedAt) < d.cfg.RetryAfterFailure:
			continue
		case live[target] == m.id:
			// Live for a while: LiveIDs reads dedupe keys, and one that outlived
			// its task would hide the store from us for good.
			m.checkedAt = now
			task, err := d.ts.Get(ctx, m.id)
			m.stale = errors.Is(err, tasks.ErrTaskNotFound) || (err == nil && !task.State.Live())
			continue
		case m.gone:
			if !listed[target] {
				delete(d.merges, target)
			}
			continue
		case !m.finishedSeen.IsZero():
			if now.Sub(m.finishedSeen) >= max(demandSettle, d.cfg.RetryAfterFailure) {
				delete(d.merges, target)
			}
			continue
		}
		m.finishedSeen = now
		task, err := d.ts.Get(ctx, m.id)
		switch {
		case err != nil:
			// Pruned, or etcd did not answer: no cutoff. At worst one merge that
			// finds little.
			if !errors.Is(err, tasks.ErrTaskNotFound) {
				d.log.Debug("merges on demand: finished merge not read", "target", target, "task", m.id, "err", err)
			}
		case task.State == tasks.StateDone && task.Detail == tasks.SkippedDetail:
			// The store is gone, but a worker that still holds an idle handle of
			// it keeps its entry: only entries written from now on count, and the
			// cutoff lasts until the store's entries change or go (gone).
			m.claimedRev, m.gone = d.view.Revision()+1, true
		case task.State == tasks.StateDone:
			m.claimedRev = task.FencingToken
			if m.byAge {
				d.times.add(task.FinishedAt.Sub(task.EnqueuedAt))
			}
		case task.State.Live():
			// Live again under the same id (requeued by orphan recovery) after a
			// listing that missed it: look again next round.
			m.finishedSeen = time.Time{}
		default:
			m.failed = true
		}
	}
}

// demandMetrics are MergeDemand's series.
type demandMetrics struct {
	// rounds counts rounds by result: done, skipped, failed.
	rounds *prometheus.CounterVec
	// targets counts due stores by reason (generations, age) and outcome
	// (enqueued, deduplicated, error).
	targets *prometheus.CounterVec
	// pending is the pending generations summed over the workers' entries as of
	// the last round.
	pending prometheus.Gauge
}

func newDemandMetrics(reg prometheus.Registerer) *demandMetrics {
	return &demandMetrics{
		rounds: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_merge_demand_rounds_total", Help: "Rounds of merges on demand, by result (done, skipped, failed).",
		}, []string{"result"})),
		targets: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_merge_demand_targets_total",
			Help: "Stores merges on demand found due, by reason (generations, age) and outcome (enqueued, deduplicated, error).",
		}, []string{"reason", "outcome"})),
		pending: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_merge_demand_pending_generations",
			Help: "Pending WAL generations summed over the workers' pending entries, as of the last round of merges on demand.",
		})),
	}
}
