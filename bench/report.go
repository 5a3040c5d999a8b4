package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/objstore"
)

// Report is one run of the scenarios, rendered as the "Incident reproductions"
// section of BENCHMARKS.md.
type Report struct {
	Date     time.Time
	Command  string
	Machine  Machine
	Seed     uint64
	Duration time.Duration

	StormConfig StormConfig
	Storm       []StormResult // old shape first
	LockConfig  LockConfig
	Lock        []LockResult // old shape first
	FanoutCfg   FanoutConfig
	Fanout      []FanoutPoint
	Throughput  *ThroughputResult
	ThroughCfg  ThroughputConfig
	MemoryCfg   MemoryConfig
	Memory      *MemoryResult
}

// SectionHeading starts the section WriteSection replaces.
const SectionHeading = "## Incident reproductions"

// Markdown renders the report.
func (r *Report) Markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("%s (`bench/`), %s\n\n", SectionHeading, r.Date.Format("2006-01-02"))
	p("Command: `%s`. Machine: %s. Seed %d; the whole run took %s.\n\n", r.Command, r.Machine, r.Seed, fmtDur(r.Duration))
	p("Each scenario runs the design's old shape and Tidemark's shape side by side in this one run. The old shapes " +
		"exist only in `bench/` (`OldShapePerWorkerTimers`, `OldShapeLockAcrossRead`). Every scenario checks its data " +
		"afterwards (every acknowledged row in the base table exactly once, no generation pending), so no shape can win " +
		"by losing rows. Latency and throttling come from `objstore.WithFaults` around the bucket; request counts are its " +
		"counters.\n\n")
	if len(r.Storm) > 0 {
		r.stormSection(p)
	}
	if len(r.Lock) > 0 {
		r.lockSection(p)
	}
	if len(r.Fanout) > 0 {
		r.fanoutSection(p)
	}
	if r.Throughput != nil {
		r.throughputSection(p)
	}
	if r.Memory != nil {
		r.memorySection(p)
	}
	return b.String()
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
		"`WorkerService` (over loopback) one after another.\n\n", c.Workers)
	p("| shape | merges ok / failed | \"too many concurrent writers\" | failed: throttled | drained | time to drain | one worker's merge: p50 / max | object-store requests (refused) | conditional writes | peak in flight | base versions |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Storm {
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
		p("| %s | %d / %d%s | %d | %d | %s | %s | %s / %s | %d (%d) | %d | %d | %d |\n", s.Shape, s.MergesOK, s.MergesFailed, tasks,
			s.TooManyWriters, s.ThrottledFailures, drained, fmtDur(s.Elapsed), fmtDur(s.MergeTimes.P50), fmtDur(s.MergeTimes.Max),
			s.Requests, s.Refused, s.PutIfAbsent, s.PeakInFlight, s.Versions)
	}
	if len(r.Storm) == 2 {
		o, n := r.Storm[0], r.Storm[1]
		p("| new / old | | | | | %s | | %s | %s | | |\n", fmtRatio(ratio(n.Elapsed, o.Elapsed)),
			fmtRatio(float64(n.Requests)/float64(o.Requests)), fmtRatio(float64(n.PutIfAbsent)/float64(o.PutIfAbsent)))
		if o.FirstError != "" {
			p("\nOld shape's first error: `%s`\n", o.FirstError)
		}
		if n.FirstError != "" {
			p("\nNew shape's first error: `%s`\n", n.FirstError)
		}
	}
	p("\n")
}

func (r *Report) lockSection(p printer) {
	c := r.LockConfig
	p("### 2. Lock held across the read\n\n")
	p("One store; %d rounds, each sealing %d generations of %d records (%s) and merging them (one pass at the default "+
		"caps) on `mem://` with %s (+ up to %s) per request, while %d clients add one record at a time and %d clients get "+
		"a random sealed record by id (each pausing %s between calls). Latencies are of the calls that overlapped a "+
		"merge (\"otherwise\": the calls of the same run that did not). Old: the merge holds the store's exclusive lock from reading the shard manifest to the commit, and every "+
		"add and get holds the shared lock, as in the reference system (a `sync.RWMutex` in the scenario: production's "+
		"`store.Store` cannot hold its exclusive lock across I/O). New: `merge.Merger` (prepare under no lock, "+
		"`Store.Commit` under the exclusive lock), adds and gets straight to the store. The longest exclusive hold is "+
		"timed around the lock for the old shape; for the new one it is the longest wait of a probe that takes "+
		"`Store.SharedLock` every 0.2 ms, which waits exactly while `Store.Commit` holds or awaits the lock. The probe's "+
		"longest wait is also shown for both: it adds the wait for readers already inside.\n\n",
		c.Rounds, c.Generations, c.RowsPerGeneration, rowDesc(c.Row), fmtDur(c.Latency), fmtDur(c.Jitter), c.Adders,
		c.Getters, fmtDur(c.Pause))
	p("| shape | adds during merges: p50 / p99 / max (n) | adds otherwise: p50 / p99 | gets during merges: p50 / p99 / max (n) | gets otherwise: p50 / p99 | longest exclusive hold | longest shared-lock wait | mean merge time |\n")
	p("|---|---|---|---|---|---|---|---|\n")
	for _, l := range r.Lock {
		p("| %s | %s | %s / %s | %s | %s / %s | %s | %s | %s |\n", l.Shape, fmtQ(l.Adds), fmtDur(l.IdleAdds.P50), fmtDur(l.IdleAdds.P99),
			fmtQ(l.Gets), fmtDur(l.IdleGets.P50), fmtDur(l.IdleGets.P99), fmtDur(l.LongestHold), fmtDur(l.ProbeMax), fmtDur(l.Merge))
	}
	if len(r.Lock) == 2 {
		o, n := r.Lock[0], r.Lock[1]
		p("| old / new | p50 %s, p99 %s, max %s | | p50 %s, p99 %s, max %s | | %s | %s | |\n",
			fmtRatio(ratio(o.Adds.P50, n.Adds.P50)), fmtRatio(ratio(o.Adds.P99, n.Adds.P99)), fmtRatio(ratio(o.Adds.Max, n.Adds.Max)),
			fmtRatio(ratio(o.Gets.P50, n.Gets.P50)), fmtRatio(ratio(o.Gets.P99, n.Gets.P99)), fmtRatio(ratio(o.Gets.Max, n.Gets.Max)),
			fmtRatio(ratio(o.LongestHold, n.LongestHold)), fmtRatio(ratio(o.ProbeMax, n.ProbeMax)))
	}
	p("\n")
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
	p("\n**Master task store** against the embedded etcd (no fsync), %s each, one after another: `Enqueue` + `Claim` + "+
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
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	doc := string(data)
	if i := strings.Index(doc, "\n"+SectionHeading); i >= 0 {
		rest := doc[i+1+len(SectionHeading):]
		after := ""
		if j := strings.Index(rest, "\n## "); j >= 0 {
			after = rest[j:]
		}
		doc = doc[:i] + after
	}
	doc = strings.TrimRight(doc, "\n") + "\n\n" + strings.TrimRight(section, "\n") + "\n"
	tmp, err := os.CreateTemp(filepath.Dir(path), ".bench-*.md")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(doc); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), info.Mode().Perm()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
