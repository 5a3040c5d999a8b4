package scanner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/coord/stats"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// SweepSummary says what one sweep did.
type SweepSummary struct {
	// Skipped is set when another replica holds the sweep's lock; SkipReason
	// names the holder. Nothing else is set then.
	Skipped    bool   `json:"skipped"`
	SkipReason string `json:"skip_reason,omitempty"`
	// Eligible counts the targets the sweep's rule found due; those held back
	// (MergedSinceScan, CoolingDown) were left alone.
	Eligible int `json:"eligible"`
	// Enqueued counts new tasks; Deduplicated counts enqueues that found a live
	// task for the target (they do not count against the cap).
	Enqueued     int `json:"enqueued"`
	Deduplicated int `json:"deduplicated"`
	// SkippedByCap counts eligible targets not tried because the cap of new
	// tasks was reached; being the least due, they wait for the next sweep.
	SkippedByCap int `json:"skipped_by_cap"`
	// Errors counts enqueues that failed (logged; tried again next sweep).
	Errors int `json:"errors"`

	// MergedSinceScan (the merge sweep's) counts eligible targets whose
	// merge_wal finished after their stats row was scanned: the row still counts
	// the generations that merge took, and a merge now would find none of them.
	// With a Rescan the sweep observes such a target again (Rescanned of them)
	// and merges on the fresh row; without one, or when the rescan fails, the
	// target waits for the next scan.
	MergedSinceScan int `json:"merged_since_scan,omitempty"`
	Rescanned       int `json:"rescanned,omitempty"`
	// CoolingDown (the compaction sweep's) counts eligible targets whose
	// compactions failed lately.
	CoolingDown int `json:"cooling_down,omitempty"`

	Duration time.Duration `json:"duration"`
}

// counts are the summary's counts by the names the metrics' outcome label and the
// logs give them.
func (s SweepSummary) counts() map[string]int {
	return map[string]int{
		"enqueued": s.Enqueued, "deduplicated": s.Deduplicated, "capped": s.SkippedByCap, "error": s.Errors,
		"merged_since_scan": s.MergedSinceScan, "rescanned": s.Rescanned, "cooling_down": s.CoolingDown,
	}
}

// rule is what one sweep decides on its own; the rest (the round lock, reading
// the stats rows, the order, the cap, the enqueues, the summary, metrics and
// logs) is the sweeper's.
type rule interface {
	// prepare runs once a sweep, before the first row is judged.
	prepare(ctx context.Context)
	// due says why r's target needs a task ("" when it does not) and whether it
	// is urgent: held back by nothing.
	due(r stats.Row, last enqueues) (reason string, urgent bool)
	// holdBack reports whether a due target waits for a later sweep, counting
	// why in sum. It may replace c's row with a fresher one. Its error stops the
	// sweep.
	holdBack(ctx context.Context, c *candidate, last enqueues, sum *SweepSummary) (bool, error)
	// severity orders the due targets: the worst (highest) first.
	severity(r stats.Row) int
	// attrs describe c in the logs of its enqueue.
	attrs(c candidate) []any
}

// candidate is a due target.
type candidate struct {
	row    stats.Row
	reason string
}

// lastEnqueue is the task a sweep last enqueued or found live for a target, and
// the base version of the row it was due on.
type lastEnqueue struct {
	task    string
	version uint64
}

// enqueues is a sweep's lastEnqueue by target. In memory only: a new sweeper (a
// failover) starts without, and each rule reads its absence as "nothing known"
// (at worst one task more). Only sweeps touch it, one at a time.
type enqueues map[registry.Target]lastEnqueue

// sweepSpec is what sets a sweep apart besides its rule.
type sweepSpec struct {
	name        string // "merge sweep": in logs and errors
	component   string // the logger's component
	lock        string // its coordination lock
	kind        tasks.Kind
	interval    time.Duration
	maxEnqueues int
	// own names the summary's counts of the rule's own (SweepSummary.counts),
	// which its metric and its log show besides everyone's.
	own []string
	// badRow is the level a stats row that does not decode is logged at (one
	// sweep says it, the other need not repeat it).
	badRow slog.Level
}

// sweeper is the loop both sweeps are: under its round lock, read every stats
// row, keep the targets the rule finds due and does not hold back, and enqueue
// one task each, worst first, until the cap of new tasks. It is safe for
// concurrent use; sweeps run one at a time.
type sweeper struct {
	spec    sweepSpec
	rule    rule
	ts      *tasks.Queue
	rows    stats.Rows
	clock   clock.Clock
	log     *slog.Logger
	metrics *sweepMetrics
	coord   *roundLock

	round chan struct{} // holds a token while a sweep runs
	last  enqueues
}

func newSweeper(client *clientv3.Client, ts *tasks.Queue, lease Lease, spec sweepSpec, r rule,
	clk clock.Clock, log *slog.Logger, m *sweepMetrics) sweeper {
	log = log.With("component", spec.component)
	return sweeper{
		spec: spec, rule: r, ts: ts, rows: stats.NewRows(client, ts.Keys()), clock: clk, log: log, metrics: m,
		coord: &roundLock{ts: ts, name: spec.lock, lease: lease, log: log},
		round: make(chan struct{}, 1),
		last:  enqueues{},
	}
}

// Run sweeps at once and then every interval until ctx is done, then gives up
// the sweep's lock.
func (s *sweeper) Run(ctx context.Context) {
	defer s.coord.release(ctx)
	every(ctx, s.clock, s.spec.interval, func(ctx context.Context) { _, _ = s.Sweep(ctx) })
}

// Sweep runs one sweep, if this replica holds (or can take) the sweep's lock.
//
// Enqueues are deduplicated by the task queue, so the lock only keeps replicas
// from doubling the work: a sweep that races another (its lock lost mid-sweep)
// adds no second task for a target.
func (s *sweeper) Sweep(ctx context.Context) (SweepSummary, error) {
	select {
	case s.round <- struct{}{}:
	case <-ctx.Done():
		return SweepSummary{}, ctx.Err()
	}
	defer func() { <-s.round }()

	start := s.clock.Now()
	sum, err := s.sweep(ctx)
	sum.Duration = s.clock.Since(start)
	counts := sum.counts()
	for _, outcome := range append([]string{"enqueued", "deduplicated", "capped", "error"}, s.spec.own...) {
		s.metrics.targets.WithLabelValues(outcome).Add(float64(counts[outcome]))
	}
	if err == nil && !sum.Skipped && s.metrics.deduped != nil {
		s.metrics.deduped.Set(float64(sum.Deduplicated))
	}
	switch {
	case err != nil && ctx.Err() != nil:
		s.metrics.rounds.WithLabelValues("failed").Inc()
		s.log.Info(s.spec.name+" interrupted", "err", err)
	case err != nil:
		s.metrics.rounds.WithLabelValues("failed").Inc()
		s.log.Error(s.spec.name+" failed", "err", err, "enqueued", sum.Enqueued, "deduplicated", sum.Deduplicated)
	case sum.Skipped:
		s.metrics.rounds.WithLabelValues("skipped").Inc()
		s.log.Debug(s.spec.name+" skipped", "reason", sum.SkipReason)
	default:
		s.metrics.rounds.WithLabelValues("done").Inc()
		level := slog.LevelDebug
		if sum.Enqueued+sum.SkippedByCap+sum.Errors > 0 {
			level = slog.LevelInfo
		}
		attrs := []any{"eligible", sum.Eligible, "enqueued", sum.Enqueued, "deduplicated", sum.Deduplicated,
			"skipped_by_cap", sum.SkippedByCap}
		for _, outcome := range s.spec.own {
			attrs = append(attrs, outcome, counts[outcome])
		}
		attrs = append(attrs, "errors", sum.Errors, "duration", sum.Duration.String())
		s.log.Log(ctx, level, s.spec.name+" done", attrs...)
	}
	return sum, err
}

func (s *sweeper) sweep(ctx context.Context) (SweepSummary, error) {
	var sum SweepSummary
	if _, err := s.coord.hold(ctx); errors.Is(err, tasks.ErrCoordinationHeld) {
		return SweepSummary{Skipped: true, SkipReason: err.Error()}, nil
	} else if err != nil {
		return sum, fmt.Errorf("%s: %w", s.spec.name, err)
	}
	stored, err := s.rows.All(ctx)
	if err != nil {
		return sum, fmt.Errorf("%s: %w", s.spec.name, err)
	}
	s.rule.prepare(ctx)
	for target := range s.last {
		if _, ok := stored[target]; !ok {
			delete(s.last, target) // the store is gone, or not scanned
		}
	}
	var due []candidate
	for target, r := range stored {
		if r.Err != nil {
			s.log.Log(ctx, s.spec.badRow, s.spec.name+": stats row skipped", "target", target, "err", r.Err)
			continue
		}
		reason, urgent := s.rule.due(r.Row, s.last)
		if reason == "" {
			continue
		}
		sum.Eligible++
		c := candidate{row: r.Row, reason: reason}
		if !urgent {
			held, err := s.rule.holdBack(ctx, &c, s.last, &sum)
			if err != nil {
				return sum, fmt.Errorf("%s: %w", s.spec.name, err)
			}
			if held {
				continue
			}
		}
		due = append(due, c)
	}
	sort.Slice(due, func(i, j int) bool {
		a, b := s.rule.severity(due[i].row), s.rule.severity(due[j].row)
		if a != b {
			return a > b
		}
		return due[i].row.Target.Compare(due[j].row.Target) < 0
	})

	for i, c := range due {
		if sum.Enqueued >= s.spec.maxEnqueues {
			sum.SkippedByCap = len(due) - i
			break
		}
		target := c.row.Target
		task, dedup, err := s.ts.Enqueue(ctx, s.spec.kind, target)
		switch {
		case err != nil && ctx.Err() != nil:
			return sum, fmt.Errorf("%s: %w", s.spec.name, err)
		case err != nil:
			sum.Errors++
			s.log.Warn(s.spec.name+": enqueue failed", append([]any{"target", target}, append(s.rule.attrs(c), "err", err)...)...)
			continue
		case dedup:
			sum.Deduplicated++
		default:
			sum.Enqueued++
			s.log.Info(string(s.spec.kind)+" enqueued", append([]any{"task", task.ID, "target", target}, s.rule.attrs(c)...)...)
		}
		s.last[target] = lastEnqueue{task: task.ID, version: c.row.Version}
	}
	return sum, nil
}

// sweepMetrics are a sweep's series.
type sweepMetrics struct {
	// rounds counts sweeps by result: done, skipped, failed.
	rounds *prometheus.CounterVec
	// targets counts due targets by outcome: enqueued, deduplicated, capped
	// (left for the next sweep), error, and the rule's own (sweepSpec.own).
	targets *prometheus.CounterVec
	// deduped, if set, is the number of targets the last sweep found a live
	// task for.
	deduped prometheus.Gauge
}
