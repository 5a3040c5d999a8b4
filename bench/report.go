package bench

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/tools/mdreport"
)

// Report is one run of the scenarios, rendered as the "Incident reproductions"
// section of BENCHMARKS.md.
type Report struct {
	Date     time.Time
	Command  string
	Machine  mdreport.Machine
	Seed     uint64
	Duration time.Duration

	StormConfig StormConfig
	Storm       []StormResult // old shape first
	// StormS3 are the same shapes on the S3-compatible bucket StormS3URL names,
	// behind the fault proxy (tidemark-bench --storm-s3).
	StormS3    []StormResult
	StormS3URL string
	// FanOutRuns are the fan-out shapes' merge throughput (FanOutThroughputConfigs).
	FanOutRuns []FanOutThroughput
	// IngestRuns are issue 16's sustained-ingest runs, both fan-out shapes of
	// each configuration (IngestConfigs).
	IngestRuns []IngestRun
	// SkewRuns are issue 31's skewed-ingest runs (RunSkew), Overload its
	// overload run (RunOverload).
	SkewRuns   []SkewRun
	Overload   *OverloadRun
	LockConfig LockConfig
	Lock       []LockResult // by Mergers, old shape first
	FanoutCfg  FanoutConfig
	Fanout     []FanoutPoint
	Throughput *ThroughputResult
	ThroughCfg ThroughputConfig
	MemoryCfg  MemoryConfig
	Memory     *MemoryResult
}

// SectionHeading starts the section WriteSection replaces.
const SectionHeading = "## Incident reproductions"

// Markdown renders the report.
func (r *Report) Markdown() string {
	var b strings.Builder
	b.WriteString(r.header())
	for _, s := range r.scenarioSections() {
		b.WriteString(s)
	}
	return b.String()
}

func (r *Report) header() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("%s (`bench/`), %s\n\n", SectionHeading, r.Date.Format("2006-01-02"))
	p("Command: `%s`. Machine: %s. Seed %d; the whole run took %s.\n\n", r.Command, r.Machine, r.Seed, fmtDur(r.Duration))
	p("Each scenario runs the design's old shape and Tidemark's shape side by side in this one run. The old shapes " +
		"exist only in `bench/` (`OldShapePerWorkerTimers`, `OldShapeLockAcrossRead`). Every scenario checks its data " +
		"afterwards (every acknowledged row in the base table exactly once, no generation pending), so no shape can win " +
		"by losing rows. Latency and throttling come from `objstore.WithFaults` around the bucket; request counts are its " +
		"counters.\n\n")
	return b.String()
}

// scenarioSections renders the subsection ("### " heading first) of every scenario
// the report holds, in order.
func (r *Report) scenarioSections() []string {
	var out []string
	add := func(section func(printer)) {
		var b strings.Builder
		section(func(format string, args ...any) { fmt.Fprintf(&b, format, args...) })
		out = append(out, b.String())
	}
	if len(r.Storm) > 0 {
		add(r.stormSection)
	}
	if len(r.IngestRuns) > 0 {
		add(r.ingestSection)
	}
	if len(r.SkewRuns) > 0 {
		add(r.skewSection)
	}
	if r.Overload != nil {
		add(r.overloadSection)
	}
	if len(r.Lock) > 0 {
		add(r.lockSection)
	}
	if len(r.Fanout) > 0 {
		add(r.fanoutSection)
	}
	if r.Throughput != nil {
		add(r.throughputSection)
	}
	if r.Memory != nil {
		add(r.memorySection)
	}
	return out
}

type printer func(format string, args ...any)

func (r *Report) stormSection(p printer) {
	c := r.StormConfig
	throttle := "the rest wait"
	if c.Throttle == objstore.ThrottleReject {
		throttle = "the rest are refused at once with a throttling error, as a real store's 503 SlowDown; the table and " +
			"the merger send a refused request again after an exponential backoff (50 ms doubling to 2 s, with jitter) " +
			"within the retry timeout, as object-store SDKs do"
	}
	p("### 1. Commit storm\n\n")
	p("%d workers, each with its own store handles and merger (`store.Stores`, `merge.Merger` with the default caps) "+
		"and one shard of one rollout store holding %d pending generations of %d rows. The bucket is `mem://` with "+
		"%s (+ up to %s) per request and at most %d requests in flight (%s). Base-table commit retry timeout %s; a "+
		"failed merge is tried again after %s (the old shape's next timer tick, the new shape's next sweep).",
		c.Workers, c.GenerationsPerWorker, c.RowsPerGeneration, fmtDur(c.Latency), fmtDur(c.Jitter), c.MaxConcurrent,
		throttle, fmtDur(c.RetryTimeout), fmtDur(c.RetryInterval))
	if scale := float64(c.Latency) / float64(50*time.Millisecond); scale != 1 {
		p(" The reference system had 50 ms, a 30 s retry timeout and a 30 s timer; the times here are those scaled "+
			"by %.2f, keeping their ratios.", scale)
	}
	p("\n\nOld: every worker calls `Merger.Merge` on its own shard at the same moment. New: one `merge_wal` task in "+
		"`pkg/tasks` on embedded etcd; the master's `Scheduler` claims it and `FanOut` calls the %d workers' real gRPC "+
		"`WorkerService` (over loopback): serial, `MergeWal` on one worker after another (each prepares and commits in "+
		"turn); gather (the default), `MergeStore` on one worker, which merges every "+
		"shard in one commit, then `DrainMerged` on the others at once. (A two-phase shape, every worker preparing at "+
		"once then committing in turn, was measured here until it was removed: gather drained the storm faster.)\n\n",
		c.Workers)
	stormTable(p, c, r.Storm)
	if len(r.StormS3) > 0 {
		p("\nThe same storm on a real S3 store, `%s` (credentials from the environment), through the AWS SDK as a worker's "+
			"requests go, behind `testutil/faultproxy`, which adds the same latency per HTTP request and answers what is "+
			"over %d in flight with S3's own `503 SlowDown` (XML body and headers) without forwarding it. The SDK resends a "+
			"refused request itself first (up to 3 attempts, exponential backoff with jitter up to 20 s), then `objstore.WithRetry` "+
			"and the commit loop do. Requests, refusals, conditional writes and peak in flight are the proxy's counts of HTTP "+
			"requests, the SDK's resends included.\n\n", r.StormS3URL, c.MaxConcurrent)
		stormTable(p, c, r.StormS3)
	}
	if len(r.FanOutRuns) > 0 {
		f := r.FanOutRuns[0].Config
		p("\nMerge throughput of the two fan-out shapes, without the storm's throttling: %d workers, %s (+ up to %s) "+
			"per request, at most %d in flight (the rest wait); one `merge_wal` task drains every shard's backlog.\n\n",
			f.Workers, fmtDur(f.Latency), fmtDur(f.Jitter), f.MaxConcurrent)
		p("| backlog | shape | time to drain | generations/s | rows/s | object-store requests | base versions |\n")
		p("|---|---|---|---|---|---|---|\n")
		for _, run := range r.FanOutRuns {
			c, s := run.Config, run.Result
			p("| %s generations of %s rows | %s | %s | %.0f | %.0f | %d | %d |\n", fmtCount(float64(c.Workers*c.GenerationsPerWorker)),
				fmtCount(float64(c.RowsPerGeneration)), s.Shape, fmtDur(s.Elapsed), run.GenerationsPerSecond(), run.RowsPerSecond(),
				s.Requests, s.Versions)
		}
	}
	p("\n")
}

// stormTable prints one table of the storm's shapes, old shape first, with the new
// shapes' ratios to it, and each shape's drain time over the store-bound limit
// (storeBound).
func stormTable(p printer, c StormConfig, runs []StormResult) {
	limit, fewest := storeBound(c, runs)
	p("| shape | merges ok / failed | \"too many concurrent writers\" | failed: throttled | drained | time to drain | x limit | one worker's merge: p50 / max | object-store requests (refused) | conditional writes | peak in flight | base versions |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range runs {
		drained := "yes"
		if !s.Drained {
			drained = "**no** (after " + fmtDur(c.Deadline) + ")"
		}
		tasks := ""
		if s.Tasks > 0 {
			tasks = fmt.Sprintf(" (%d task)", s.Tasks)
			if s.Tasks > 1 {
				tasks = fmt.Sprintf(" (%d tasks)", s.Tasks)
			}
		}
		p("| %s | %d / %d%s | %d | %d | %s | %s | %s | %s / %s | %d (%d) | %d | %d | %d |\n", s.label(), s.MergesOK, s.MergesFailed, tasks,
			s.TooManyWriters, s.ThrottledFailures, drained, fmtDur(s.Elapsed), fmtRatio(ratio(s.Elapsed, limit)),
			fmtDur(s.MergeTimes.P50), fmtDur(s.MergeTimes.Max), s.Requests, s.Refused, s.PutIfAbsent, s.PeakInFlight, s.Versions)
	}
	if len(runs) >= 2 {
		o := runs[0]
		for _, n := range runs[1:] {
			p("| %s / old | | | | | %s | | | %s | %s | | |\n", n.label(), fmtRatio(ratio(n.Elapsed, o.Elapsed)),
				fmtRatio(float64(n.Requests)/float64(o.Requests)), fmtRatio(float64(n.PutIfAbsent)/float64(o.PutIfAbsent)))
		}
	}
	if limit > 0 {
		p("\nStore-bound limit: %s. The fewest requests the store served for any shape here are %d, for \"%s\" (%d "+
			"requests minus %d refused); the bucket serves at most %.0f requests/s (%d in flight for %s each on average: %s plus half "+
			"the jitter of up to %s), so those %d requests hold its slots for %s at least. A shape that needs that many "+
			"requests cannot drain faster, whatever its order; a refused request holds no slot and costs only the "+
			"sender's backoff. It is a floor, not a schedule any shape can reach: it counts every slot busy from the "+
			"first request to the last, nothing serial left over (the commits' round trips are one after another), and "+
			"no time of the machine's own. \"x limit\" is each shape's time to drain over it.\n",
			fmtDur(limit), fewest.Served(), fewest.label(), fewest.Requests, fewest.Refused, c.RequestRate(), c.MaxConcurrent,
			fmtDur(c.Latency+c.Jitter/2), fmtDur(c.Latency), fmtDur(c.Jitter), fewest.Served(), fmtDur(limit))
	}
	for _, s := range runs {
		if s.FirstError != "" {
			p("\n%s: first error: `%s`\n", s.label(), s.FirstError)
		}
	}
}

// storeBound is the store-bound limit of a storm table: the fewest requests the
// store served for any of the shapes (Served), over the bucket's RequestRate, and
// the shape that needed them. Zero when no shape drained or the rate is unbounded.
func storeBound(c StormConfig, runs []StormResult) (time.Duration, StormResult) {
	var fewest StormResult
	for _, s := range runs {
		if s.Drained && (fewest.Requests == 0 || s.Served() < fewest.Served()) {
			fewest = s
		}
	}
	rate := c.RequestRate()
	if fewest.Requests == 0 || rate <= 0 {
		return 0, fewest
	}
	return time.Duration(float64(fewest.Served()) / rate * float64(time.Second)), fewest
}

func (r *Report) ingestSection(p printer) {
	c := r.IngestRuns[0].Config
	var counts []string
	for _, run := range r.IngestRuns {
		if n := fmt.Sprint(run.Config.Workers); !slices.Contains(counts, n) {
			counts = append(counts, n)
		}
	}
	p("### 1b. Sustained ingest\n\n")
	p("%s workers (goroutines of this process, each with its own store handles and merger and its real gRPC "+
		"`WorkerService` on loopback) each append %d rows (%s) to one rollout store through `store.Store.Append` and "+
		"seal them into a generation every %s, at phases spread over the interval, for %s per run. The bucket is "+
		"`file://` in the run's scratch directory (not `mem://`, whose lists sort every key of the bucket: by the end of "+
		"a run half this process's CPU) with %s (+ up to %s) per request and at most %d requests in flight (the rest wait), the latency of "+
		"the merge-throughput runs above, from the start: appends, seals, scans and merges all pay their round trips. "+
		"Each worker publishes its pending record (`P/pending/<instance>`, package `coord/pending`) as a registered "+
		"worker does: under a lease of its own on the embedded etcd, from `store.Stores.Pending`, woken by every new "+
		"store snapshot. A master built by `master.New` as `cmd/master` builds it (static discovery of the workers, every "+
		"setting at its default except MERGE_FANOUT and, where the table says so, STATS_SCAN_INTERVAL and "+
		"MERGE_WAL_INTERVAL) runs its stats scanner, merge sweep, merges on demand (MERGE_WAL_MIN_GENERATIONS %d "+
		"summed over the shards, MERGE_MAX_DELAY %s), scheduler and fan-out on that etcd; nothing else merges (the "+
		"workers' own sweepers are not run).\n\n",
		strings.Join(counts, " and "), c.RowsPerGeneration, rowDesc(c.Row), fmtDur(c.SealEvery), fmtDur(c.Duration),
		fmtDur(c.Latency), fmtDur(c.Jitter), c.MaxConcurrent, scanner.DefaultMinGenerations, fmtDur(scanner.DefaultMergeMaxDelay))
	p("Pending generations (every shard's, above its merged watermark) are counted every %s from the bucket, "+
		"outside the latency and the request counts: the maximum of the first minute and of the whole run, the median "+
		"of every sample, and \"steady p50\", the median of the last third. \"Bounded\" means the last third's "+
		"maximum is at most 1.1x the middle third's plus one generation per worker (one round of seals), which a "+
		"backlog that keeps growing fails. Seal to merged is, for each generation sealed in the run, the time from its "+
		"seal (the writer's `sealed_at`) to the commit (the manifest's `updated_at`) of the first base table version "+
		"whose watermark of its shard covers it, as each sample reads every version since the one before (every %s); "+
		"generations no sample saw merged are left out "+
		"and counted. Merged generations/s is (generations sealed - pending at the end) / run time. Tasks are the "+
		"`merge_wal` tasks of the run (on demand: enqueued by merges on demand for their generations or their age, "+
		"the sweep enqueued the rest; empty: merged nothing), with their time from claim to finish. The goals are "+
		"issue 31's: pending at most %d at every sample, median at most %d, seal to merged p99 at most %s. After "+
		"each run whatever is pending is merged without latency and every acknowledged row is checked to be in the "+
		"base table once. Load averages (1, 5, 15 min) are this shared 2-core machine's at the start and end of each "+
		"run: other agents' work ran alongside.\n\n",
		fmtDur(c.SampleEvery), fmtDur(c.SampleEvery), IngestGoalMaxPending, IngestGoalMedianPending, fmtDur(IngestGoalSealToMergedP99))
	p("| workers | scan / sweep interval | fan-out | generations sealed (/s) | merged /s | merge_wal tasks (on demand: generations / age; empty, failed) | task time p50 / max | pending: first minute max | max | median | steady p50 | final | seal to merged p50 / p99 / max (not merged) | bounded | goals | object-store requests | load average start / end |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, run := range r.IngestRuns {
		c, s := run.Config, run.Result
		scan, sweep := c.Intervals()
		iv := fmt.Sprintf("%s / %s", fmtDur(scan), fmtDur(sweep))
		if c.ScanInterval <= 0 && c.SweepInterval <= 0 {
			iv += " (defaults)"
		}
		bounded := "yes"
		if !s.Bounded {
			bounded = "**no**"
		}
		taskTime := "-"
		if s.TaskTimes.N > 0 {
			taskTime = fmtDur(s.TaskTimes.P50) + " / " + fmtDur(s.TaskTimes.Max)
		}
		sealToMerged := "-"
		if s.SealToMerged.N > 0 {
			sealToMerged = fmt.Sprintf("%s / %s / %s (%d)", fmtDur(s.SealToMerged.P50), fmtDur(s.SealToMerged.P99),
				fmtDur(s.SealToMerged.Max), s.Unmerged)
		}
		p("| %d | %s | %s | %d (%.1f) | %.1f | %d (%d / %d; %d, %d) | %s | %d | %d | %d | %d | %d | %s | %s | %s | %d | %s / %s |\n",
			c.Workers, iv, s.Mode, s.Sealed, s.SealedPerSecond(), s.MergedPerSecond(), s.Tasks, s.DemandByGenerations,
			s.DemandByAge, s.EmptyTasks, s.FailedTasks, taskTime, s.FirstMinuteMax, s.MaxPending, s.MedianPending,
			s.SteadyP50, s.FinalPending, sealToMerged, bounded, s.goals(), s.Requests,
			cmp.Or(s.LoadStart, "unknown"), cmp.Or(s.LoadEnd, "unknown"))
	}
	for _, run := range r.IngestRuns {
		if s := run.Result; len(s.MinuteMax) > 1 {
			p("\n%d workers, %s: pending, maximum of each minute: %s.\n", run.Config.Workers, s.Mode, joinInts(s.MinuteMax))
		}
	}
	for _, run := range r.IngestRuns {
		if s := run.Result; s.FirstError != "" {
			p("\n%d workers, %s: first failed task: `%s`\n", run.Config.Workers, s.Mode, s.FirstError)
		}
		if s := run.Result; s.AppendFailures+s.SealFailures > 0 {
			p("\n%d workers, %s: %d appends and %d seals failed during the run.\n", run.Config.Workers, s.Mode,
				s.AppendFailures, s.SealFailures)
		}
	}
	p("\n")
}

func (r *Report) lockSection(p printer) {
	c := r.LockConfig
	p("### 2. Lock held across the read\n\n")
	p("One store; %d rounds, each sealing %d generations of %d records (%s) on every merging worker and merging them "+
		"(one pass at the default caps) on `mem://` with %s (+ up to %s) per request, while %d clients add one record at "+
		"a time and %d clients get by id a random record their worker sealed: half of them one merged in an earlier "+
		"round (\"merged rows\": read from the base table, one ranged request for its row group), half one sealed this "+
		"round (\"pending rows\": read from the worker's generation cache until the round's merge commits). Each client "+
		"pauses %s between calls. Two cases: "+
		"one worker merges; and two workers, each with its own shard and store handle and half of the clients, start "+
		"their merges at the same moment, so both prepare against the same base version and every round one commit "+
		"loses the race for the next version, rebases over the other's and retries.\n\n",
		c.Rounds, c.Generations, c.RowsPerGeneration, rowDesc(c.Row), fmtDur(c.Latency), fmtDur(c.Jitter), c.Adders,
		c.Getters, fmtDur(c.Pause))
	p("Old: a worker's merge holds that worker's exclusive store lock from reading the shard manifest to the end of " +
		"the commit (rebase, backoff and retries included), and every add and get on the worker holds the shared lock, " +
		"as in the reference system (a `sync.RWMutex` per worker in the scenario: production's `store.Store` has no " +
		"such lock). New: no lock that readers take: the prepare runs beside the clients, `Store.Commit` writes the " +
		"manifest (rebasing and retrying on conflict) and then swaps the snapshot atomically, and adds and gets go " +
		"straight to the store. Both shapes run the steps of `merge.Merger`'s pass in the scenario, so that the commit " +
		"can be timed (the old one reads the generations one after another, the new one 4 at a time, as the merger " +
		"does).\n\n")
	p("Calls are filed by what ran when they started. \"Store held\": their own worker's merge held the store, " +
		"the only window in which it could make them wait: for the old shape from asking for the exclusive lock (new " +
		"readers queue behind it) to releasing it after the commit, for the new one `Store.Commit` (manifest write, " +
		"rebase, backoff and retries, snapshot swap). \"Rest of a merge\": a merge of any worker ran otherwise (prepare, drain, the other worker's merge). \"No " +
		"merge\": the other calls of the same run. By start, not by overlap: a long call overlaps more windows, so " +
		"overlap would file every slow call under the busier column. Every column's gets include waits for the store's " +
		"snapshot refresh: a get that finds its worker's view older than 1 s refreshes it (a few requests), and the " +
		"worker's other gets wait for that refresh.\n\n")
	p("| merging workers | shape | calls | store held: p50 / p99 / max (n) | rest of a merge: p50 / p99 / max (n) | no merge: p50 / p99 / max (n) |\n")
	p("|---|---|---|---|---|---|\n")
	cases := lockCases(r.Lock)
	for _, ls := range cases {
		for _, l := range ls {
			for _, k := range []struct {
				name  string
				calls LockCalls
			}{{"adds", l.Adds}, {"gets of merged rows", l.Gets}, {"gets of pending rows", l.PendingGets}} {
				p("| %d | %s | %s | %s | %s | %s |\n", l.Mergers, l.Shape, k.name, fmtQ(k.calls.Held), fmtQ(k.calls.Merge), fmtQ(k.calls.Idle))
			}
		}
		if len(ls) == 2 {
			o, n := ls[0], ls[1]
			p("| %d | old / new | adds | %s | %s | %s |\n", o.Mergers, fmtQRatio(o.Adds.Held, n.Adds.Held),
				fmtQRatio(o.Adds.Merge, n.Adds.Merge), fmtQRatio(o.Adds.Idle, n.Adds.Idle))
			p("| %d | old / new | gets of merged rows | %s | %s | %s |\n", o.Mergers, fmtQRatio(o.Gets.Held, n.Gets.Held),
				fmtQRatio(o.Gets.Merge, n.Gets.Merge), fmtQRatio(o.Gets.Idle, n.Gets.Idle))
			p("| %d | old / new | gets of pending rows | %s | %s | %s |\n", o.Mergers, fmtQRatio(o.PendingGets.Held, n.PendingGets.Held),
				fmtQRatio(o.PendingGets.Merge, n.PendingGets.Merge), fmtQRatio(o.PendingGets.Idle, n.PendingGets.Idle))
		}
	}
	p("\nThe merges themselves. A commit \"lost the race\" when its first manifest write found the version taken; " +
		"\"versions rebased over\" counts the base versions the other worker committed between a commit's prepare and " +
		"its success: here, with one other writer committing once a round and nothing refused, each is one lost attempt " +
		"followed by one rebase.\n\n")
	p("| merging workers | shape | mean merge | commits: p50 / p99 / max (n) | commits that lost the race | versions rebased over | longest exclusive hold |\n")
	p("|---|---|---|---|---|---|---|\n")
	for _, ls := range cases {
		for _, l := range ls {
			hold := "none (no lock)"
			if l.LongestHold > 0 {
				hold = fmtDur(l.LongestHold)
			}
			p("| %d | %s | %s | %s | %d | %d | %s |\n", l.Mergers, l.Shape, fmtDur(l.Merge), fmtQ(l.Commits),
				l.Conflicted, l.RebasedOver, hold)
		}
	}
	p("\n")
}

// lockCases groups the lock results by number of merging workers, in the order
// they were run.
func lockCases(ls []LockResult) [][]LockResult {
	var out [][]LockResult
	for _, l := range ls {
		if n := len(out); n > 0 && out[n-1][0].Mergers == l.Mergers {
			out[n-1] = append(out[n-1], l)
			continue
		}
		out = append(out, []LockResult{l})
	}
	return out
}

func (r *Report) fanoutSection(p printer) {
	c := r.FanoutCfg
	p("### 3. Read fan-out\n\n")
	p("A list of %d rows of a store whose base table holds %d rows, with N pending generations of %d new records each "+
		"(%s), then the same list after those generations were merged. `mem://` with %s (+ up to %s) per request while "+
		"lists run; median of %d lists after one warm-up list. Two readers (other workers' handles on the same store): "+
		"one with the worker's generation cache (256 MiB), one without (`wal.NewGenerationCache(0)`). The reference "+
		"system measured ~654 ms over 200 generations against ~50 ms merged: a 13x penalty.\n\n",
		c.ListRows, c.BaseRows, c.RowsPerGeneration, rowDesc(c.Row), fmtDur(c.Latency), fmtDur(c.Jitter), c.Repeats)
	p("| pending generations | with cache: pending / merged | penalty | requests per list | without cache: pending / merged | penalty | requests per list |\n")
	p("|---|---|---|---|---|---|---|\n")
	for _, f := range r.Fanout {
		p("| %d | %s / %s | %s | %.0f / %.0f | %s / %s | %s | %.0f / %.0f |\n", f.Pending, fmtDur(f.Cached), fmtDur(f.MergedCached),
			fmtRatio(f.PenaltyCached()), f.RequestsCached, f.MergedRequestsCached, fmtDur(f.Uncached), fmtDur(f.MergedUncached),
			fmtRatio(f.PenaltyUncached()), f.RequestsUncached, f.MergedRequests)
	}
	p("\n")
}

func (r *Report) throughputSection(p printer) {
	t, c := r.Throughput, r.ThroughCfg
	p("### 4. Throughput\n\n")
	p("**Durable adds per worker** on `file://` (local disk; every WAL entry fsync'd and published with link(2)): "+
		"clients each call `store.Store.Append` with one rollout record (%s, %.0f bytes in Arrow, decoded by "+
		"`schema.DecodeRollouts`) until %s pass; an add returns once its WAL entry is written. Raw: the same kind of "+
		"records as Arrow IPC objects written with `PutIfAbsent` one after another for %s, 1 and 64 records an object "+
		"(64 concurrent adds can at best share one entry). Every case ran %d times, interleaved, and the better run is shown (the local disk's speed drifts on this shared machine). After each case the acknowledged adds were sealed and counted.\n\n",
		rowDesc(c.Row), t.RowBytes, fmtDur(c.AddDuration), fmtDur(c.RawDuration), addRounds)
	p("| case | records/s | MB/s | vs raw 64-record objects |\n|---|---|---|---|\n")
	var raw64 float64
	for _, rw := range t.Raw {
		if rw.RowsPerObject == 64 {
			raw64 = rw.RowsPerSecond()
		}
	}
	for _, rw := range t.Raw {
		rs := rw.RowsPerSecond()
		p("| raw, %d-record objects (%s each) | %s | %.1f | %s |\n", rw.RowsPerObject, fmtBytes(int64(rw.ObjectBytes)),
			fmtCount(rs), rs*t.RowBytes/1e6, fmtRatio(rs/raw64))
	}
	for _, a := range t.Adds {
		rs := a.PerSecond()
		p("| %d client(s) | %s | %.1f | %s |\n", a.Clients, fmtCount(rs), rs*t.RowBytes/1e6, fmtRatio(rs/raw64))
	}
	p("\n**Merge**: one `Merger.Merge` of %d generations (%s) on `file://`: %s records in %s, **%s records/s** (%.0f MB/s of generations).\n\n",
		c.MergeGenerations, fmtBytes(t.MergeBytes), fmtCount(float64(t.MergeRows)), fmtDur(t.MergeTime),
		fmtCount(float64(t.MergeRows)/t.MergeTime.Seconds()), float64(t.MergeBytes)/1e6/t.MergeTime.Seconds())
	p("**Scanner**: `scanner.Scanner.Scan` over N registered rollout stores (registry object and table version 1 " +
		"written directly, on `file://`: `mem://` lists by sorting the whole bucket, which makes every listing O(all " +
		"stores)), stats rows in the embedded etcd. The first round observes every store and writes every row; the " +
		"second finds nothing changed. Requests are per round; on a store with latency L a round costs about " +
		"requests x L / 16 (the scanner observes 16 stores at once).\n\n")
	p("| stores | first round | second round | requests first / second |\n|---|---|---|---|\n")
	for _, s := range t.Scans {
		p("| %s | %s | %s | %d / %d |\n", fmtCount(float64(s.Stores)), fmtDur(s.First), fmtDur(s.Second), s.FirstRequests, s.SecondReqs)
	}
	tps, pps := float64(t.TaskCycles)/t.TaskTime.Seconds(), float64(t.Puts)/t.PutTime.Seconds()
	p("\n**Master task queue** against the embedded etcd (no fsync), %s each, one after another: `Enqueue` + `Claim` + "+
		"`Finish` of a `merge_wal` task (100 targets in turn) next to plain `Put`s of a 2-byte value.\n\n", fmtDur(c.EtcdDuration))
	p("| loop | per second | plain puts per task |\n|---|---|---|\n")
	p("| task cycles (enqueue + claim + finish) | %s | %.1f |\n", fmtCount(tps), pps/tps)
	p("| plain puts | %s | |\n\n", fmtCount(pps))
}

func (r *Report) memorySection(p printer) {
	m, c := r.Memory, r.MemoryCfg
	p("### Memory: one worker merging a backlog\n\n")
	p("A backlog of %d generations (%s, %s records of %s) in one shard on `file://`, written by one process "+
		"sealing at the worker's default 64 MiB; then, for each configuration, a fresh worker process (`tidemark-bench "+
		"memory-merge`, with Go's defaults like cmd/worker: no GOGC, no GOMEMLIMIT unless the row says so) merges a hard-linked copy of it and reports its peak RSS "+
		"(VmHWM from /proc/self/status) and the peak Go heap in use (sampled every 50 ms). A pass is charged %d times its "+
		"generation bytes against the budget (`merge.PassCostFactor`) and takes no more generations than the budget pays "+
		"for (at least one). \"Over budget\" is peak RSS minus the budget: the worker's fixed overhead when the charge "+
		"is honest.\n\n",
		m.Backlog.Generations, fmtBytes(m.Backlog.Bytes), fmtCount(float64(m.Backlog.Rows)), rowDesc(c.Row), merge.PassCostFactor)
	p("| configuration | MERGE_MAX_GENERATIONS / MERGE_MAX_BYTES | MERGE_MEMORY_BUDGET | passes | largest pass | time | peak RSS | peak Go heap | peak RSS / budget | over budget | peak RSS / largest pass |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, o := range m.Runs {
		p("| %s | %d / %s | %s | %d | %s | %s | %s | %s | %.2f | %s | %.1f |\n", o.Run.Name, o.Run.MaxGenerations, fmtBytes(o.Run.MaxBytes),
			fmtBytes(o.Run.Budget), o.Passes, fmtBytes(o.LargestPass), fmtDur(o.Elapsed), fmtBytes(o.PeakRSS), fmtBytes(o.PeakHeap),
			float64(o.PeakRSS)/float64(o.Run.Budget), fmtSignedBytes(o.PeakRSS-o.Run.Budget), float64(o.PeakRSS)/float64(max(o.LargestPass, 1)))
	}
	p("\n")
}

func rowDesc(s RowShape) string {
	return fmt.Sprintf("~%d words of content, %d output tokens with logprobs", s.ContentWords, s.Tokens)
}

func fmtQ(q Quantiles) string {
	if q.N == 0 {
		return "none"
	}
	return fmt.Sprintf("%s / %s / %s (%d)", fmtDur(q.P50), fmtDur(q.P99), fmtDur(q.Max), q.N)
}

// fmtQRatio compares two latency summaries: a's quantiles over b's.
func fmtQRatio(a, b Quantiles) string {
	if a.N == 0 || b.N == 0 {
		return "-"
	}
	return fmt.Sprintf("p50 %s, p99 %s, max %s", fmtRatio(ratio(a.P50, b.P50)), fmtRatio(ratio(a.P99, b.P99)), fmtRatio(ratio(a.Max, b.Max)))
}

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d < time.Minute:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return d.Round(time.Second).String()
}

func fmtRatio(r float64) string {
	switch {
	case r <= 0:
		return "-"
	case r < 10:
		return fmt.Sprintf("%.2fx", r)
	}
	return fmt.Sprintf("%.0fx", r)
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func fmtSignedBytes(n int64) string {
	if n < 0 {
		return "-" + fmtBytes(-n)
	}
	return "+" + fmtBytes(n)
}

// fmtCount prints a count or rate with thousands separators.
func fmtCount(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// WriteSection puts section at the end of the Markdown file at path, replacing the
// section that starts with SectionHeading (up to the next "## " heading) if there
// is one. The file is replaced atomically.
func WriteSection(path, section string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(data)
	if s, ok := mdreport.Find(doc, mdreport.All(doc), SectionHeading); ok {
		doc = doc[:s.Start] + doc[s.End:]
	}
	return mdreport.WriteFile(path, mdreport.Append(doc, section))
}

// UpdateSections replaces, inside the SectionHeading section of the Markdown file
// at path, the subsection of every scenario the report holds (from its "### "
// heading to the next "### " or "## " heading) and keeps the rest: a rerun of some
// scenarios leaves the others' figures, and the section's header, which describe
// an earlier run. Each replaced subsection says under its heading which run it
// comes from. A scenario the section lacks gets its subsection before the first
// one whose heading sorts after its own (the headings are numbered in the
// section's order: "### 1b." before "### 1c." before "### 2."), or at the
// section's end.
func (r *Report) UpdateSections(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(data)
	if _, ok := mdreport.Find(doc, mdreport.All(doc), SectionHeading); !ok {
		return fmt.Errorf("%s has no %q section", path, SectionHeading)
	}
	note := fmt.Sprintf("Rerun alone on %s, after the run above: `%s`. Machine: %s. Seed %d; it took %s.\n\n",
		r.Date.Format("2006-01-02"), r.Command, r.Machine, r.Seed, fmtDur(r.Duration))
	for _, s := range r.scenarioSections() {
		heading, body, _ := strings.Cut(s, "\n")
		sec, _ := mdreport.Find(doc, mdreport.All(doc), SectionHeading)
		sub, ok := mdreport.Find(doc, sec, heading+"\n")
		text := heading + "\n\n" + note + strings.Trim(body, "\n") + "\n"
		if !ok {
			// Inserted after the line before it and one blank line; the blank
			// lines that were there stay after it.
			at := subsectionAfter(doc, sec, heading)
			for at >= 2 && doc[at-1] == '\n' && doc[at-2] == '\n' {
				at--
			}
			sub, text = mdreport.Span{Start: at, End: at}, "\n"+text
		}
		doc = mdreport.Replace(doc, sub, text)
	}
	return mdreport.WriteFile(path, doc)
}

// subsectionAfter returns where, within sec of doc, the first "### " heading
// that sorts after heading starts, or sec's end.
func subsectionAfter(doc string, sec mdreport.Span, heading string) int {
	for i := sec.Start; i < sec.End; {
		line, _, _ := strings.Cut(doc[i:sec.End], "\n")
		if strings.HasPrefix(line, "### ") && line > heading {
			return i
		}
		i += len(line) + 1
	}
	return sec.End
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}
