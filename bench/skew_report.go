package bench

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/tidemark-io/tidemark/pkg/master"
	"github.com/tidemark-io/tidemark/pkg/scanner"
)

// SkewHeading starts the skewed ingest's subsection.
const SkewHeading = "### 1c. Skewed ingest"

func (r *Report) skewSection(p printer) {
	c := r.SkewRuns[0].Config
	ic := c.Ingest
	p("%s\n\n", SkewHeading)
	p("The cluster of 1b (%d workers, goroutines of this process, each with its own store handles and merger, its real "+
		"gRPC `WorkerService` on loopback and its pending records in etcd; a master built by `master.New` with every "+
		"setting at its default: merges on demand at MERGE_WAL_MIN_GENERATIONS %d or MERGE_MAX_DELAY %s, at most %d "+
		"`merge_wal` tasks of different stores at once, 4x TASK_CONCURRENCY) with %d stores instead of one. The hot "+
		"store is written as 1b's store: every worker appends %d rows (%s) and seals them every %s. The %d quiet stores "+
		"share %.0f%% of all rows: each gets an add of %d rows every %s (the first at a phase spread over the interval), "+
		"through a worker chosen at random each time, sealed there at once (one generation per add, as that worker's "+
		"next flush would seal it). %s per run; the bucket is `file://` in the run's scratch directory (1b says why not `mem://`) with %s (+ up to %s) per request and at most %d "+
		"requests in flight (the rest wait).\n\n",
		ic.Workers, scanner.DefaultMinGenerations, fmtDur(scanner.DefaultMergeMaxDelay), master.DefaultMergeConcurrency, 1+c.QuietStores,
		ic.RowsPerGeneration, rowDesc(ic.Row), fmtDur(ic.SealEvery), c.QuietStores, 100*c.QuietShare, c.QuietRows(),
		fmtDur(c.QuietEvery), fmtDur(ic.Duration), fmtDur(ic.Latency), fmtDur(ic.Jitter), ic.MaxConcurrent)
	p("Every store's pending generations and merged watermarks are read from the bucket (outside the latency and "+
		"the request counts) every %s: the hot store by one sampler, the quiet stores by another, one after another "+
		"(\"quiet sampled every\" is that round's mean length). Seal to merged is, for each generation, the time from "+
		"its seal (the writer's `sealed_at`) to the commit (the manifest's `updated_at`) of the first base table "+
		"version whose watermark of its shard covers it, as each sample reads every version since the one before; a quiet "+
		"generation no sample saw merged counts with its wait at the end (\"oldest unmerged\"), so a starved store "+
		"cannot hide by never being merged. The goal (issue 31): every quiet store merged within MERGE_MAX_DELAY plus "+
		"one merge time, taken here as the run's `merge_wal` task-time p99 over every store's tasks (claim to finish); "+
		"the hot store bounded as 1b's goals say (pending at most %d at every sample, median at most %d, seal to merged "+
		"p99 at most %s). After each run what is pending is merged without latency and every acknowledged row of every "+
		"store is checked in its base table once.\n\n",
		fmtDur(ic.SampleEvery), IngestGoalMaxPending, IngestGoalMedianPending, fmtDur(IngestGoalSealToMergedP99))
	p("| workers | fan-out | rows: hot / quiet (quiet share) | quiet generations (sampled every) | quiet: seal to merged p50 / p99 / max | quiet: oldest unmerged at the end (unmerged) | worst quiet store: longest wait (its p50, tasks) | goal: MERGE_MAX_DELAY + task p99 | merge_wal tasks: hot / quiet (on demand: generations / age; failed) | task time p50 / p99: hot; quiet | hot: pending max / median | hot: seal to merged p50 / p99 | goals | object-store requests | load average start / end |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, run := range r.SkewRuns {
		s, h := run.Result, run.Result.Hot
		share := 0.0
		if total := s.HotRows + s.QuietRows; total > 0 {
			share = 100 * float64(s.QuietRows) / float64(total)
		}
		p("| %d | %s | %d / %d (%.1f%%) | %d (%s) | %s / %s / %s | %s (%d) | %s: %s (%s, %d) | %s + %s = %s | %d / %d (%d / %d; %d) | %s / %s; %s / %s | %d / %d | %s / %s | %s | %d | %s / %s |\n",
			run.Config.Ingest.Workers, s.Mode, s.HotRows, s.QuietRows, share, s.QuietSealed, fmtDur(s.QuietSampleEvery),
			fmtDur(s.QuietSealToMerged.P50), fmtDur(s.QuietSealToMerged.P99), fmtDur(s.QuietSealToMerged.Max),
			fmtDur(s.QuietOldestUnmerged), s.QuietUnmerged,
			s.Worst.Name, fmtDur(s.Worst.Longest()), fmtDur(s.Worst.SealToMerged.P50), s.Worst.Tasks,
			fmtDur(s.MaxDelay), fmtDur(s.TaskTimes.P99), fmtDur(s.QuietGoal()),
			h.Tasks, s.QuietTasks, h.DemandByGenerations, h.DemandByAge, s.FailedTasks,
			fmtDur(h.TaskTimes.P50), fmtDur(h.TaskTimes.P99), fmtDur(s.QuietTaskTimes.P50), fmtDur(s.QuietTaskTimes.P99),
			h.MaxPending, h.MedianPending, fmtDur(h.SealToMerged.P50), fmtDur(h.SealToMerged.P99),
			s.goals(), s.Requests, cmp.Or(s.LoadStart, "unknown"), cmp.Or(s.LoadEnd, "unknown"))
	}
	for _, run := range r.SkewRuns {
		s := run.Result
		if len(s.Hot.MinuteMax) > 1 {
			p("\n%d workers, %s: the hot store's pending, maximum of each minute: %s.\n", run.Config.Ingest.Workers, s.Mode,
				joinInts(s.Hot.MinuteMax))
		}
		if pk := s.Peak; pk.Pending > 0 {
			p("\n%d workers, %s: the hot store's peak, %d pending at %s, %s after its last merge commit; its tasks "+
				"from that commit to the peak: %s.\n", run.Config.Ingest.Workers, s.Mode, pk.Pending, fmtDur(pk.At),
				fmtDur(pk.SinceCommit), cmp.Or(strings.Join(pk.Window, "; "), "none"))
		}
		if w := s.Waits; w.Late > 0 {
			p("\n%d workers, %s: the %d quiet generations that waited longer than MERGE_MAX_DELAY, their waits in parts "+
				"(p50 / p99 / max), against the merge that took each: seal to its enqueue %s; in the queue %s, of which "+
				"another task held the store %s; claim to the commit that merged it %s (%d explained by no task). "+
				"Every merge_wal task's wait in the queue: quiet %s, hot %s.",
				run.Config.Ingest.Workers, s.Mode, w.Late, fmtQuantiles(w.SealToEnqueue), fmtQuantiles(w.Queued),
				fmtQuantiles(w.Blocked), fmtQuantiles(w.ClaimToSeen), w.Unmatched, fmtQuantiles(w.QuietQueue), fmtQuantiles(w.HotQueue))
			p(" %d merge_wal tasks waited longer than 1 s; while they waited, %.2f merge_wal tasks ran on the mean.",
				w.LongWaits, w.BusySlots)
			for _, k := range slices.Sorted(maps.Keys(w.Others)) {
				q := w.Others[k]
				p(" %s tasks: %d, %s.", k, q.N, fmtQuantiles(q))
				if l, ok := w.Longest[k]; ok {
					what := l.Detail
					if l.Error != "" {
						what = l.Error
					}
					p(" The longest (%s, %s): %s.", l.Target, l.State, strings.TrimSuffix(what, "."))
				}
			}
			p("\n")
		}
		if s.FirstError != "" {
			p("\n%d workers, %s: first failed task: `%s`\n", run.Config.Ingest.Workers, s.Mode, s.FirstError)
		}
		if n := s.Hot.AppendFailures + s.Hot.SealFailures; n > 0 {
			p("\n%d workers, %s: %d appends and %d seals failed during the run.\n", run.Config.Ingest.Workers, s.Mode,
				s.Hot.AppendFailures, s.Hot.SealFailures)
		}
	}
	p("\n")
}
