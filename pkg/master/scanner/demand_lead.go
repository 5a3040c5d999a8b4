package scanner

import (
	"slices"
	"time"
)

// mergeTimesKept is how many recent merges' run times the age rule's lead is
// taken from: enough for a p90 that one slow merge does not move, few enough to
// follow a change of load within minutes.
const mergeTimesKept = 64

// mergeTimes are the times from enqueue to finish of the last merges a
// MergeDemand saw finish: how long a store due by age takes to be merged once
// found due, its wait for a slot included (when merges of many stores come due
// together, the wait is most of it). The enqueue is on the enqueuer's clock and
// the finish on the claimer's: replicas' clocks apart by more than a merge time
// would skew it, which startBy's bound keeps from mattering much.
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

// p90 is the 90th percentile of the kept times, zero with none.
func (m *mergeTimes) p90() time.Duration {
	if len(m.last) == 0 {
		return 0
	}
	s := slices.Clone(m.last)
	slices.Sort(s)
	return s[len(s)*9/10]
}

// startBy is the age of a store's oldest pending generation at which its merge
// must be enqueued for the store to be merged by maxDelay: maxDelay less what
// recent merges took from enqueue to finish (their p90), and never less than half of maxDelay, so a run of slow
// or skewed merges cannot make a quiet store merge much more often than asked.
// MERGE_MAX_DELAY is a freshness target, the age by which rows are in the base
// table; a merge started at it would land a merge time late, and later still
// when merges of many stores come due together and wait for a slot.
func (m *mergeTimes) startBy(maxDelay time.Duration) time.Duration {
	return max(maxDelay-m.p90(), maxDelay/2)
}
