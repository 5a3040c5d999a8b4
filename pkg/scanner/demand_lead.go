package scanner

import (
	"slices"
	"time"
)

// mergeTimesKept is how many recent merges by age the age rule's lead is taken
// from: about one round of every store due by age at a few a second, so a burst
// of stores coming due together is in it, and a slow merge is forgotten within a
// minute or so.
const mergeTimesKept = 64

// mergeTimes are the times from enqueue to finish of the last merges by age a
// MergeDemand saw finish: how long a store due by age takes to be merged once
// found due, its wait for a slot included (when merges of many stores come due
// together, the wait is most of it). Merges by count are left out: they are the
// busy stores' merges, larger and not what the lead is for. The enqueue is on the
// enqueuer's clock and the finish on the claimer's: replicas' clocks apart by
// more than a merge time would skew it, which startBy's bound keeps from
// mattering much.
type mergeTimes struct {
	last []time.Duration // a ring of at most mergeTimesKept
	next int
}

func (m *mergeTimes) add(d time.Duration) {
	if d <= 0 {
		return
	}
	if len(m.last) < mergeTimesKept {
		m.last = append(m.last, d)
		return
	}
	m.last[m.next] = d
	m.next = (m.next + 1) % mergeTimesKept
}

// slowest is the longest of the kept times, zero with none.
func (m *mergeTimes) slowest() time.Duration {
	if len(m.last) == 0 {
		return 0
	}
	return slices.Max(m.last)
}

// startBy is the age of a store's oldest pending generation at which its merge
// must be enqueued for the store to be merged by maxDelay: maxDelay less the
// slowest of the recent merges by age, enqueue to finish, and never less than
// half of maxDelay, so a run of slow merges cannot make a quiet store merge much
// more often than asked. MERGE_MAX_DELAY is a bound, the age by which rows are in
// the base table, so the lead covers the slowest recent merge rather than a
// typical one: a merge enqueued at MERGE_MAX_DELAY would land a merge time late,
// and the last of a burst of stores coming due together a queue wait later still
// (1c of BENCHMARKS.md: up to 6 s with every slot busy).
func (m *mergeTimes) startBy(maxDelay time.Duration) time.Duration {
	return max(maxDelay-m.slowest(), maxDelay/2)
}
