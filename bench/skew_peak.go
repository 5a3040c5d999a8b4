package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// HotPeak is what the hot store's tasks were doing when its pending generations
// peaked: the sample of the maximum, the merge_wal commit before it (the last
// task of the store that finished before the sample, a store's merges never
// overlapping), and the store's tasks that ran in the peak's window (from that
// commit to the sample). A peak is a stretch without a commit: these say whether
// a merge took long, waited in the queue, or ran beside a compaction.
type HotPeak struct {
	Pending int
	At      time.Duration // since the run's start
	// SinceCommit is the time from the last merge commit before the sample to it
	// (the run's start when there was none).
	SinceCommit time.Duration
	// Window lists the store's tasks that ran in the window, in start order, as
	// "kind queued Q, ran R (detail)".
	Window []string
}

// hotPeak finds the peak of samples (taken from start) and the tasks of the hot
// store that explain it.
func hotPeak(samples []IngestSample, start time.Time, all []tasks.Task, hot string) HotPeak {
	var p HotPeak
	for _, s := range samples {
		if s.Pending > p.Pending {
			p.Pending, p.At = s.Pending, s.At
		}
	}
	if p.Pending == 0 {
		return p
	}
	at := start.Add(p.At)
	from := start
	var mine []tasks.Task
	hotTarget := registry.NewTarget(registry.KindRollout, hot) // the run's stores are rollout stores
	for _, t := range all {
		if t.Target != hotTarget || t.StartedAt.IsZero() {
			continue
		}
		mine = append(mine, t)
		if t.Kind == tasks.KindMergeWAL && t.State.Finished() && t.FinishedAt.Before(at) && t.FinishedAt.After(from) {
			from = t.FinishedAt
		}
	}
	p.SinceCommit = at.Sub(from)
	slices.SortFunc(mine, func(a, b tasks.Task) int { return a.StartedAt.Compare(b.StartedAt) })
	for _, t := range mine {
		end := t.FinishedAt
		if end.IsZero() {
			end = at
		}
		if end.Before(from) || t.StartedAt.After(at) {
			continue
		}
		detail := t.Detail
		if len(detail) > 160 {
			detail = detail[:160] + "..."
		}
		p.Window = append(p.Window, fmt.Sprintf("%s queued %s, ran %s from %s (%s)", t.Kind,
			fmtDur(t.StartedAt.Sub(t.EnqueuedAt)), fmtDur(end.Sub(t.StartedAt)), fmtDur(t.StartedAt.Sub(start)), strings.TrimSpace(detail)))
	}
	return p
}
