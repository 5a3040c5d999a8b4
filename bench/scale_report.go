package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/table"
	"github.com/tidemark-io/tidemark/tools/mdreport"
)

// ScaleHeading starts the scale scenario's section of BENCHMARKS.md, which
// RunScaleSection replaces or inserts before the incident reproductions.
const ScaleHeading = "## Stores of millions of rows (`bench/` scale, `pkg/storage/table`, `pkg/store`)"

// RunScaleSection runs the scenario with cfg, prints its section to out and, if
// path is not empty, writes it into that Markdown file.
func RunScaleSection(ctx context.Context, env *Env, cfg ScaleConfig, out io.Writer, command, path string) error {
	res, err := RunScale(ctx, env, cfg)
	if err != nil {
		return err
	}
	res.Command, res.Machine = command, mdreport.ThisMachine()
	return printSection(out, path, ScaleHeading, res.Markdown())
}

// scaleOp is one row of the results table: its name and where its figures are.
type scaleOp struct {
	name string
	op   func(b ScaleBucket) ScaleOp
}

// scaleOps are the results table's rows, in order.
func scaleOps(c ScaleConfig) []scaleOp {
	return []scaleOp{
		{"first get of a new handle (one sample)", func(b ScaleBucket) ScaleOp { return b.ColdGet }},
		{"get (`store.Store.Get`) of an existing id", func(b ScaleBucket) ScaleOp { return b.Get }},
		{"get of a missing id", func(b ScaleBucket) ScaleOp { return b.MissingGet }},
		{fmt.Sprintf("batch get of %d ids (`store.Store.GetMany`)", c.BatchIDs), func(b ScaleBucket) ScaleOp { return b.Batch }},
		{fmt.Sprintf("page of %d at offset 0 (`store.Store.Page`)", c.PageRows), func(b ScaleBucket) ScaleOp { return b.FirstPage }},
		{fmt.Sprintf("page of %d by cursor at 90%% (`StartAfter`)", c.PageRows), func(b ScaleBucket) ScaleOp { return b.CursorPage }},
		{fmt.Sprintf("filtered page of %d (`%s`, 1%% of rows)", c.PageRows, ScaleFilter), func(b ScaleBucket) ScaleOp { return b.FilteredPage }},
		{fmt.Sprintf("first merge of %s new ids (one sample)", fmtCount(float64(c.MergeRows))), func(b ScaleBucket) ScaleOp { return b.FirstMergeNew }},
		{fmt.Sprintf("first merge of %s overwritten ids (one sample)", fmtCount(float64(c.MergeRows))), func(b ScaleBucket) ScaleOp { return b.FirstMergeOverwrite }},
		{fmt.Sprintf("merge of %s new ids (`merge.Merger.Merge`)", fmtCount(float64(c.MergeRows))), func(b ScaleBucket) ScaleOp { return b.MergeNew }},
		{fmt.Sprintf("merge of %s overwritten ids", fmtCount(float64(c.MergeRows))), func(b ScaleBucket) ScaleOp { return b.MergeOverwrite }},
		{"compact task after those merges", func(b ScaleBucket) ScaleOp { return b.Compaction.Op }},
	}
}

// Markdown renders the result as a BENCHMARKS.md section.
func (r ScaleResult) Markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	c := r.Config
	p("%s, %s\n\n", ScaleHeading, r.Date.Format("2006-01-02"))
	p("Command: `%s`. Machine: %s. Seed %d; the run took %s.\n\n", r.Command, r.Machine, r.Seed, fmtDur(r.Duration))
	p("Issue 29: reads and merges should cost what they touch, not the store's size. For each size, one generic "+
		"store of four small columns (`%s`) on `file://`, every row merged into the base table through the worker's "+
		"write path: `store.Store.Append` of %s rows at a time, `Seal`, and `merge.Merger.Merge` every %s rows, a "+
		"compact task (`maintain.Maintainer.Compact`: TARGET_ROWS_PER_FRAGMENT %s, at most "+
		"%d source fragments; retention of %d versions and %s, so that the build's garbage goes) whenever the merges left level 0 "+
		"with %d fragments, as a long-lived store's merges ask for one, and at the end compact tasks until one found "+
		"nothing to compact: the leveled shape a long-lived store has. Ids are 16 hex digits spread over the key space like random ones "+
		"(a bijection of a seeded counter, so they are distinct), and every row's values follow from its id, so every "+
		"read checks what it got; `n` is uniform in [0, 1000).\n\n",
		ScaleSchema, fmtCount(float64(c.AppendRows)), fmtCount(float64(c.BuildRows)), fmtCount(float64(c.Compact.TargetRows)),
		c.Compact.MaxSources, c.Retention.KeepVersions, fmtDur(c.Retention.KeepAge), table.DefaultLevel0Trigger)
	p("Then two workers of this process open the store, each with its own caches and WAL shard, one on the "+
		"`file://` bucket and one on the same directory behind `objstore.WithFaults` with %s per request (the fault "+
		"wrapper counts every request of both), each with a base-table cache of %s (a quarter of CACHE_BYTES). Each "+
		"first does one get on its new handle (\"first get\"), then an untimed batch get of %s random ids, which "+
		"reads every fragment's key-index top, as a long-running worker has them cached. A fragment's bloom filter "+
		"is read by the first lookup of at least 4 ids in its range (a batch get looks ids up 128 at a time, a "+
		"merge all of its ids at once) and stays while the cache holds it, so a worker's first merge pays for filters the "+
		"reads did not need: it has its own row (\"first merge\", one sample of each kind), the merges after it are the "+
		"steady state. Samples on `file://` / on the latency bucket: %d / %d gets of random "+
		"existing ids and %d / %d of missing ones, %d / %d batch gets of %d random ids, %d / %d pages of each kind "+
		"(the cursor pages start at 90%% of the id space and a page's width further each time). Reads go "+
		"through `store.Store` with the worker's defaults (the snapshot refreshes when older than 1 s). After both "+
		"workers' reads, each merges once and then %d times more %s new ids and %d times %s overwritten ids "+
		"(existing ones at random), alternating, each appended and sealed first, the merge alone timed; then one "+
		"compact task. "+
		"\"Round trips\" on the latency bucket is the time divided by %s: the requests that ran one after another. "+
		"Figures are p50 / p99 (with few samples p99 is the maximum); requests and CPU (the process's user and "+
		"system time, `getrusage`) are per operation: on this shared 2-core machine other work stretches the times, "+
		"and CPU says what the operation itself cost.\n\n",
		fmtDur(c.Latency), fmtBytes(cmp.Or(c.TableCacheBytes, scaleDefaultTableCache)), fmtCount(float64(c.WarmIDs)), c.Gets[0], c.Gets[1], c.MissingGets[0], c.MissingGets[1],
		c.Batches[0], c.Batches[1], c.BatchIDs, c.Pages[0], c.Pages[1], c.Merges, fmtCount(float64(c.MergeRows)), c.Merges,
		fmtCount(float64(c.MergeRows)), fmtDur(c.Latency))

	p("| rows | build | merge passes | compact tasks (compactions, rows rewritten) | fragments per level L0, L1, ... | data / key index bytes |\n")
	p("|---|---|---|---|---|---|\n")
	for _, s := range r.Sizes {
		bd := s.Build
		p("| %s | %s | %d in %s | %d (%s, %s) in %s | %s (%d) | %s / %s |\n", fmtCount(float64(s.Rows)), fmtDur(bd.Elapsed),
			bd.Merges, fmtDur(bd.MergeTime), bd.Tasks, fmtCount(float64(bd.Compactions)), fmtCount(float64(bd.RowsRewritten)),
			fmtDur(bd.CompactTime), fmtLevels(bd.Levels), bd.Levels.Total(), fmtBytes(bd.Levels.DataBytes), fmtBytes(bd.Levels.IndexBytes))
	}
	p("\n")

	if len(r.Sizes) > 0 {
		p("| operation |")
		for _, s := range r.Sizes {
			for _, bk := range s.Buckets {
				p(" %s rows, %s |", fmtRows(s.Rows), bk.Name)
			}
		}
		for i := 1; i < len(r.Sizes); i++ {
			for _, bk := range r.Sizes[i].Buckets {
				p(" p50 %s / %s, %s |", fmtRows(r.Sizes[i].Rows), fmtRows(r.Sizes[i-1].Rows), bk.Name)
			}
		}
		p("\n|---|")
		for range r.columns() {
			p("---|")
		}
		p("\n")
		for _, o := range scaleOps(c) {
			p("| %s |", o.name)
			for _, s := range r.Sizes {
				for _, bk := range s.Buckets {
					p(" %s |", fmtScaleOp(o.op(bk), bk.Latency))
				}
			}
			for i := 1; i < len(r.Sizes); i++ {
				for k, bk := range r.Sizes[i].Buckets {
					if k < len(r.Sizes[i-1].Buckets) {
						p(" %s |", fmtRatio(ratio(o.op(bk).Q.P50, o.op(r.Sizes[i-1].Buckets[k]).Q.P50)))
					}
				}
			}
			p("\n")
		}
		p("\n")
	}

	if len(r.Sizes) > 0 {
		p("The same operations' requests by the object they went to (per operation; \"key index\" is the tops and " +
			"blocks of `data/*.idx`, \"data\" the fragments' footers and row groups):\n\n| operation |")
		for _, s := range r.Sizes {
			for _, bk := range s.Buckets {
				p(" %s rows, %s |", fmtRows(s.Rows), bk.Name)
			}
		}
		p("\n|---|")
		for _, s := range r.Sizes {
			for range s.Buckets {
				p("---|")
			}
		}
		p("\n")
		for _, o := range scaleOps(c) {
			p("| %s |", o.name)
			for _, s := range r.Sizes {
				for _, bk := range s.Buckets {
					p(" %s |", fmtByObject(o.op(bk).ByObject))
				}
			}
			p("\n")
		}
		p("\n")
	}

	p("The compact tasks after the merges, and the process's resident set: \"at reset\" is what it held after " +
		"the build, a GC and `debug.FreeOSMemory` when its peak (VmHWM) was reset through `/proc/self/clear_refs`; " +
		"the peaks are VmHWM after both workers' reads, and (reset again) after their merges and compact tasks. " +
		"They are this benchmark process's, which holds nothing of the store besides the two workers' handles.\n\n")
	p("| rows | bucket | compact task | compactions: sources -> outputs (rows written, bytes read / written) | fragments per level after |\n")
	p("|---|---|---|---|---|\n")
	for _, s := range r.Sizes {
		for _, bk := range s.Buckets {
			t := bk.Compaction
			cr := t.Report.Compaction
			p("| %s | %s | %s, %s requests | %d: %d -> %d (%s, %s / %s) | %s |\n", fmtCount(float64(s.Rows)), bk.Name,
				fmtDur(t.Op.Q.P50), fmtReq(t.Op.Requests), t.Report.Compactions, cr.Sources, cr.Outputs, fmtCount(float64(cr.RowsWritten)),
				fmtBytes(cr.BytesRead), fmtBytes(cr.BytesWritten), fmtLevels(t.Levels))
		}
	}
	p("\n| rows | resident set at reset | peak during the reads | peak during merges and compactions |\n|---|---|---|---|\n")
	for _, s := range r.Sizes {
		p("| %s | %s | %s | %s |\n", fmtCount(float64(s.Rows)), fmtBytes(s.BaseRSS), fmtBytes(s.ReadRSS), fmtBytes(s.WriteRSS))
	}
	p("\n")
	r.goals(p)
	return b.String()
}

// columns lists the results table's data columns (for its separator row).
func (r ScaleResult) columns() []struct{} {
	n := 0
	for i, s := range r.Sizes {
		n += len(s.Buckets)
		if i > 0 {
			n += len(s.Buckets)
		}
	}
	return make([]struct{}, n)
}

// fmtScaleOp prints p50 / p99 and the requests per operation, and on a bucket
// with latency the sequential round trips of the p50.
func fmtScaleOp(o ScaleOp, latency time.Duration) string {
	if o.Q.N == 0 {
		return "-"
	}
	s := fmt.Sprintf("%s / %s (%s req", fmtDur(o.Q.P50), fmtDur(o.Q.P99), fmtReq(o.Requests))
	if latency > 0 {
		s += fmt.Sprintf(", %.1f trips", roundTrips(o.Q.P50, latency))
	}
	return s + ", CPU " + fmtDur(o.CPU) + ")"
}

// fmtByObject prints requests by object in scaleObjects' order, zeros left out.
func fmtByObject(by map[string]float64) string {
	var parts []string
	for _, k := range scaleObjects {
		if n := by[k.name]; n > 0 {
			parts = append(parts, k.name+" "+fmtReq(n))
		}
	}
	if n := by["other"]; n > 0 {
		parts = append(parts, "other "+fmtReq(n))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func roundTrips(d, latency time.Duration) float64 { return float64(d) / float64(latency) }

func fmtReq(n float64) string {
	if n >= 100 {
		return fmtCount(n)
	}
	return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", n), "0"), ".")
}

// fmtRows prints a store size short: 1M, 10M, 250k.
func fmtRows(n int64) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1_000 && n%1_000 == 0:
		return fmt.Sprintf("%dk", n/1_000)
	}
	return fmtCount(float64(n))
}

func fmtLevels(l ScaleLevels) string {
	parts := make([]string, len(l.Fragments))
	for i, n := range l.Fragments {
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, ", ")
}

// scaleDefaultTableCache is the worker's table cache default (a quarter of CACHE_BYTES), which the
// table applies when the option is not given.
const scaleDefaultTableCache = 64 << 20

// Issue 29's goals.
const (
	scaleMaxGrowth   = 1.5
	scaleMaxGet      = 5 * time.Millisecond
	scaleMaxBatch    = 50 * time.Millisecond
	scaleMaxCursor   = 20 * time.Millisecond
	scaleMaxRSS      = 1 << 30
	scaleMaxGetTrips = 3
	// scaleGoalRows is the size the absolute goals are stated for.
	scaleGoalRows = 10_000_000
)

// goals states each of the goals and whether it holds in this run.
func (r ScaleResult) goals(p printer) {
	verdict := func(ok bool) string {
		if ok {
			return "**holds**"
		}
		return "**does not hold**"
	}
	p("Goals (issue 29), as measured in this run:\n\n")
	merged := fmtCount(float64(r.Config.MergeRows))
	growth := []scaleOp{
		{"Get", func(b ScaleBucket) ScaleOp { return b.Get }},
		{fmt.Sprintf("%d-id batch get", r.Config.BatchIDs), func(b ScaleBucket) ScaleOp { return b.Batch }},
		{"Page by cursor", func(b ScaleBucket) ScaleOp { return b.CursorPage }},
		{fmt.Sprintf("Merge of %s new ids", merged), func(b ScaleBucket) ScaleOp { return b.MergeNew }},
		{fmt.Sprintf("Merge of %s overwritten ids", merged), func(b ScaleBucket) ScaleOp { return b.MergeOverwrite }},
	}
	for i := 1; i < len(r.Sizes); i++ {
		lo, hi := r.Sizes[i-1], r.Sizes[i]
		for _, g := range growth {
			var parts []string
			ok := true
			for k := range min(len(lo.Buckets), len(hi.Buckets)) {
				x := ratio(g.op(hi.Buckets[k]).Q.P50, g.op(lo.Buckets[k]).Q.P50)
				ok = ok && x <= scaleMaxGrowth
				parts = append(parts, fmt.Sprintf("%s on %s (%s -> %s)", fmtRatio(x), hi.Buckets[k].Name,
					fmtDur(g.op(lo.Buckets[k]).Q.P50), fmtDur(g.op(hi.Buckets[k]).Q.P50)))
			}
			p("- %s: p50 grows at most %.1fx from %s to %s rows: %s: %s.\n", g.name, scaleMaxGrowth, fmtRows(lo.Rows),
				fmtRows(hi.Rows), strings.Join(parts, ", "), verdict(ok))
		}
	}
	for _, s := range r.Sizes {
		if s.Rows < scaleGoalRows && s.Rows != r.Sizes[len(r.Sizes)-1].Rows {
			continue
		}
		if len(s.Buckets) < 2 {
			continue
		}
		f, l := s.Buckets[0], s.Buckets[1]
		at := fmtRows(s.Rows) + " rows"
		p("- At %s on %s, get p50 at most %s: %s: %s.\n", at, f.Name, fmtDur(scaleMaxGet), fmtDur(f.Get.Q.P50),
			verdict(f.Get.Q.P50 <= scaleMaxGet))
		p("- At %s on %s, %d-id batch get p50 at most %s: %s: %s.\n", at, f.Name, r.Config.BatchIDs, fmtDur(scaleMaxBatch),
			fmtDur(f.Batch.Q.P50), verdict(f.Batch.Q.P50 <= scaleMaxBatch))
		p("- At %s on %s, page by cursor p50 at most %s: %s: %s.\n", at, f.Name, fmtDur(scaleMaxCursor),
			fmtDur(f.CursorPage.Q.P50), verdict(f.CursorPage.Q.P50 <= scaleMaxCursor))
		p("- At %s, peak resident set during the reads under %s: %s: %s.\n", at, fmtBytes(scaleMaxRSS),
			fmtBytes(s.ReadRSS), verdict(s.ReadRSS < scaleMaxRSS))
		trips := roundTrips(l.Get.Q.P50, l.Latency)
		p("- At %s on %s, a get takes at most %d sequential requests: p50 %s = %.1f round trips (%s requests): %s.\n",
			at, l.Name, scaleMaxGetTrips, fmtDur(l.Get.Q.P50), trips, fmtReq(l.Get.Requests), verdict(math.Round(trips) <= scaleMaxGetTrips))
	}
	p("\n")
}
