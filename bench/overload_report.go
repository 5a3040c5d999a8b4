package bench

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// OverloadHeading starts the overload's subsection.
const OverloadHeading = "### 1d. Overload"

func (r *Report) overloadSection(p printer) {
	c, s := r.Overload.Config, r.Overload.Result
	ig := s.Ingest
	p("%s\n\n", OverloadHeading)
	p("The cluster of 1b (%d workers, goroutines of this process, each with its own store handles and merger, its real "+
		"gRPC `WorkerService` and now also its real HTTP API, `worker.NewServer`, on loopback; pending records in etcd; a "+
		"master built by `master.New` with every setting at its default but MERGE_FANOUT) on one rollout store, the bucket "+
		"`file://` in the run's scratch directory with %s (+ up to %s) per request and at most %d requests in flight (the rest wait). Each worker follows "+
		"every worker's pending records (`pending.View`), so its backpressure decides on the store's whole pending count "+
		"as a registered worker's does, at its defaults: adds wait from %d pending generations, linearly up to %s at %d, "+
		"where they are refused (503 with `Retry-After`). The workers' merges take at most MERGE_MAX_GENERATIONS %d "+
		"generations a pass (the default is %d): a gather merge takes every shard's pending generations in passes of "+
		"that many, so at the default its rate grows with the load and the writers this 2-core machine can run do not "+
		"outrun it; the cap makes merges the bound, which an overload needs.\n\n",
		c.Workers, fmtDur(c.Latency), fmtDur(c.Jitter), c.MaxConcurrent, store.DefaultWarnGenerations,
		fmtDur(store.DefaultMaxAddDelay), store.DefaultRefuseGenerations, cmp.Or(c.MergeMaxGenerations, merge.DefaultMaxGenerations),
		merge.DefaultMaxGenerations)
	p("What merges sustain, from a probe in the same run: before the master starts, every worker seals %d generations "+
		"of %d rows through its store handle (%d in all); the master's merges on demand drain them, and their rate from "+
		"the first task's claim to the last one's finish is what merges sustain. It is an upper bound for the phase "+
		"that follows: the probe's merges have the machine to themselves and full batches (MERGE_MAX_GENERATIONS a "+
		"pass), so twice its rate is at least twice what merges sustain under the writers' load.\n\n",
		c.ProbeGenerations, c.RowsPerAdd, s.ProbeSealed)
	p("Then for %s %d writers per worker each add %d rows (%s) at a time through the worker's HTTP add route, `POST "+
		"/api/v1/rollouts/{name}/records?flush=true` (so every add goes through `store.Store.AdmitAdd`'s backpressure "+
		"and is sealed into a generation, one per add unless two adds of a worker meet in one seal), at %.0fx the "+
		"probe's rate in all (each writer at an even share), each waiting for its answers; an "+
		"add whose time has come while the previous one is still waiting is dropped, as a client that waits for its "+
		"adds would. Add latency is the writer's, from sending to the answer; the backpressure delay is each answer's "+
		"`%s` header, and the workers' `tidemark_add_backpressure_delay_seconds` beside it. Minutes are by when an add "+
		"was sent; pending generations and the shards' merged watermarks are read from the bucket every %s (outside "+
		"the latency and the request counts): merged is the watermarks' growth (a shard numbers its generations one "+
		"by one), sealed that plus the growth of pending. \"Workers' own view\" is the most pending generations any "+
		"worker's own snapshot of the store counted at a sample (`Snapshot().PendingCount()`, what `AdmitAdd` decides "+
		"on while it is below the warn threshold, without refreshing). The goals (issue 31): no add fails, add latency "+
		"rises smoothly, pending stays under the refuse threshold. After the run what is pending is merged without "+
		"latency and every acknowledged row is checked in the base table once.\n\n",
		fmtDur(c.Duration), c.Writers, c.RowsPerAdd, rowDesc(c.Row), c.Factor, "X-Tidemark-Backpressure-Delay", fmtDur(c.SampleEvery))
	p("| workers (writers each) | fan-out | probe: generations drained in (tasks) | merges sustain | offered (each writer every) | adds ok (/s) | failed (goal 0) | add latency p50 / p99 / max | delayed adds: header p50 / p99 / max (metric: adds, mean) | refused (metric) | pending max (refuse at %d) / median / final | workers' own view max | sealed / merged /s | merge_wal tasks (failed), time p50 / max | goals | object-store requests | load average start / end |\n",
		store.DefaultRefuseGenerations)
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	meanDelay := "-"
	if s.MetricDelayed > 0 {
		meanDelay = fmtDur(time.Duration(s.MetricDelaySum / float64(s.MetricDelayed) * float64(time.Second)))
	}
	p("| %d (%d) | %s | %d in %s (%d) | %.1f generations/s | %.1f adds/s (%s) | %d (%.1f) | %s | %s / %s / %s | %d: %s / %s / %s (%d, %s) | %.0f | %d / %d / %d | %d | %.1f / %.1f | %d (%d), %s / %s | %s | %d | %s / %s |\n",
		c.Workers, c.Writers, s.Mode, s.ProbeSealed, fmtDur(s.ProbeTime), s.ProbeTasks, s.ProbeRate, s.Offered, fmtDur(s.Period),
		s.Adds, s.AddsPerSecond(), s.failures(), fmtDur(s.Latency.P50), fmtDur(s.Latency.P99), fmtDur(s.Latency.Max),
		s.Delayed, fmtDur(s.Delay.P50), fmtDur(s.Delay.P99), fmtDur(s.Delay.Max), s.MetricDelayed, meanDelay,
		s.MetricRefusals, ig.MaxPending, ig.MedianPending, ig.FinalPending, s.ViewMax, ig.SealedPerSecond(), ig.MergedPerSecond(), ig.Tasks, ig.FailedTasks,
		fmtDur(ig.TaskTimes.P50), fmtDur(ig.TaskTimes.Max), s.goals(), s.Requests,
		cmp.Or(s.LoadStart, "unknown"), cmp.Or(s.LoadEnd, "unknown"))
	p("\n| minute | adds ok (/s) | failed | add latency p50 / p99 / max | delayed adds: delay p50 / p99 / max | pending max | workers' own view max | sealed / merged /s |\n")
	p("|---|---|---|---|---|---|---|---|\n")
	for i, m := range s.Minutes {
		// The last minute may be cut short by the phase's end.
		span := min(time.Minute, s.Elapsed-time.Duration(i)*time.Minute)
		p("| %d | %d (%.1f) | %d | %s / %s / %s | %d: %s / %s / %s | %d | %d | %.1f / %.1f |\n", i+1, m.Adds,
			float64(m.Adds)/span.Seconds(), m.Failed, fmtDur(m.Latency.P50), fmtDur(m.Latency.P99), fmtDur(m.Latency.Max),
			m.Delayed, fmtDur(m.Delay.P50), fmtDur(m.Delay.P99), fmtDur(m.Delay.Max), m.PendingMax, m.ViewMax, m.rate(m.Sealed),
			m.rate(m.Merged))
	}
	p("\nThe workers' own means over the run: an add request past body parsing %s (its WAL append %s, a seal %s); "+
		"the writers' add latency (p50 %s) adds the HTTP round trip, the body's encoding and parsing, and the wait for "+
		"this machine's CPU.\n", fmtDur(s.MeanRequest), fmtDur(s.MeanAppend), fmtDur(s.MeanSeal), fmtDur(s.Latency.P50))
	if s.FirstFailure != "" {
		p("\nFirst failed add: `%s`\n", s.FirstFailure)
	}
	if ig.FirstError != "" {
		p("\nFirst failed task: `%s`\n", ig.FirstError)
	}
	p("\n")
}

// failures prints the failed adds, by HTTP status (0: no answer) when there are
// any.
func (r OverloadResult) failures() string {
	if r.Failed == 0 {
		return "0"
	}
	var by []string
	for _, st := range slices.Sorted(maps.Keys(r.FailedByStatus)) {
		by = append(by, fmt.Sprintf("%d: %d", st, r.FailedByStatus[st]))
	}
	return fmt.Sprintf("**%d** (%s)", r.Failed, strings.Join(by, ", "))
}

// goals says whether the run met issue 31's goals for overload that a number can
// judge: "yes", or the ones it missed. Whether latency rose smoothly is read from
// the minutes.
func (r OverloadResult) goals() string {
	var missed []string
	if r.Failed > 0 {
		missed = append(missed, fmt.Sprintf("%d adds failed", r.Failed))
	}
	if r.Ingest.MaxPending >= r.RefuseGenerations {
		missed = append(missed, fmt.Sprintf("pending %d >= %d", r.Ingest.MaxPending, r.RefuseGenerations))
	}
	if len(missed) == 0 {
		return "yes"
	}
	return "**no**: " + strings.Join(missed, ", ")
}
