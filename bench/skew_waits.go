package bench

import (
	"slices"
	"time"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// WaitBreakdown splits the waits of the quiet generations that waited longer
// than MERGE_MAX_DELAY into their parts, each against the merge that took the
// generation (its store's merge_wal task started last before the sample that
// saw the generation merged: a store's merges never overlap): seal to the task's
// enqueue (merges on demand's age rule and its tick), enqueue to claim (the
// queue), claim to the sample (the task up to its commit, and the sampler's
// lag). Of the queue wait, Blocked is the part during which a task of another
// kind (compaction, cleanup) held the store. Queue are every quiet and every hot
// merge_wal task's waits in the queue; Others the other kinds' tasks by kind.
type WaitBreakdown struct {
	Late                                        int
	SealToEnqueue, Queued, Blocked, ClaimToSeen Quantiles
	// Unmatched counts the late generations no task explains.
	Unmatched            int
	QuietQueue, HotQueue Quantiles
	Others               map[tasks.Kind]Quantiles
	// Longest is the longest-running task of each kind in Others: which store
	// it rewrote or checked, and what it said it did.
	Longest map[tasks.Kind]tasks.Task
	// LongWaits counts the merge_wal tasks that waited in the queue longer than
	// a second, and BusySlots is how many merge_wal tasks ran, on the mean,
	// while they waited: below the master's merge slots, the wait was not for a
	// slot.
	LongWaits int
	BusySlots float64
}

// breakdownWaits builds the WaitBreakdown of the generations in seen (by
// store) from the run's tasks of every kind.
func breakdownWaits(all []tasks.Task, seen map[string][]seenMerged, hot string, maxDelay time.Duration) WaitBreakdown {
	b := WaitBreakdown{Others: map[tasks.Kind]Quantiles{}, Longest: map[tasks.Kind]tasks.Task{}}
	// The run's stores are rollout stores.
	hotTarget := registry.NewTarget(registry.KindRollout, hot)
	merges := map[registry.Target][]tasks.Task{}
	others := map[registry.Target][]tasks.Task{}
	otherTimes := map[tasks.Kind]durations{}
	var quietQ, hotQ durations
	for _, t := range all {
		if t.StartedAt.IsZero() {
			continue
		}
		if t.Kind != tasks.KindMergeWAL {
			others[t.Target] = append(others[t.Target], t)
			if d, ok := taskTime(t); ok {
				otherTimes[t.Kind] = append(otherTimes[t.Kind], d)
				if l, ok := b.Longest[t.Kind]; !ok || d > l.FinishedAt.Sub(l.StartedAt) {
					b.Longest[t.Kind] = t
				}
			}
			continue
		}
		q := t.StartedAt.Sub(t.EnqueuedAt)
		if t.Target == hotTarget {
			hotQ = append(hotQ, q)
		} else {
			quietQ = append(quietQ, q)
		}
		merges[t.Target] = append(merges[t.Target], t)
	}
	var everyMerge []tasks.Task
	for _, ts := range merges {
		everyMerge = append(everyMerge, ts...)
	}
	var waited, busy time.Duration
	for _, t := range everyMerge {
		if t.StartedAt.Sub(t.EnqueuedAt) <= time.Second {
			continue
		}
		b.LongWaits++
		waited += t.StartedAt.Sub(t.EnqueuedAt)
		for _, o := range everyMerge {
			busy += ranDuring(o, t.EnqueuedAt, t.StartedAt)
		}
	}
	if waited > 0 {
		b.BusySlots = float64(busy) / float64(waited)
	}
	for k, d := range otherTimes {
		b.Others[k] = d.quantiles()
	}
	b.QuietQueue, b.HotQueue = quietQ.quantiles(), hotQ.quantiles()
	var toEnqueue, queued, blocked, toSeen durations
	for store, gens := range seen {
		target := registry.NewTarget(registry.KindRollout, store)
		ts := merges[target]
		slices.SortFunc(ts, func(a, b tasks.Task) int { return a.StartedAt.Compare(b.StartedAt) })
		for _, g := range gens {
			if g.seen.Sub(g.sealed) <= maxDelay {
				continue
			}
			b.Late++
			i, _ := slices.BinarySearchFunc(ts, g.seen, func(t tasks.Task, at time.Time) int {
				return t.StartedAt.Compare(at)
			})
			if i == 0 {
				b.Unmatched++
				continue
			}
			t := ts[i-1] // the last started before the sample
			toEnqueue = append(toEnqueue, max(t.EnqueuedAt.Sub(g.sealed), 0))
			queued = append(queued, t.StartedAt.Sub(t.EnqueuedAt))
			var held time.Duration
			for _, o := range others[target] {
				held += ranDuring(o, t.EnqueuedAt, t.StartedAt)
			}
			blocked = append(blocked, held)
			toSeen = append(toSeen, g.seen.Sub(t.StartedAt))
		}
	}
	b.SealToEnqueue, b.Queued, b.Blocked, b.ClaimToSeen = toEnqueue.quantiles(), queued.quantiles(), blocked.quantiles(), toSeen.quantiles()
	return b
}

// ranDuring is how long task o ran within [from, to) (a task still running at
// the end runs to it).
func ranDuring(o tasks.Task, from, to time.Time) time.Duration {
	end := o.FinishedAt
	if end.IsZero() || end.After(to) {
		end = to
	}
	if start := later(o.StartedAt, from); end.After(start) {
		return end.Sub(start)
	}
	return 0
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// fmtQuantiles prints q as p50 / p99 / max.
func fmtQuantiles(q Quantiles) string {
	return fmtDur(q.P50) + " / " + fmtDur(q.P99) + " / " + fmtDur(q.Max)
}
