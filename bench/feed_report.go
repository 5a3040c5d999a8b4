package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/tools/mdreport"
)

// FeedHeading starts the feed scenario's BENCHMARKS.md section. The section holds
// a description written when it is first made (and kept: words added to it by
// hand stay) and one subsection per worker count (feedSubheading), which a run
// replaces.
const FeedHeading = "## Change feed (`bench/` feed, issue 32)"

func feedSubheading(workers int) string { return fmt.Sprintf("### %d workers", workers) }

// RunFeedSection runs the scenario, prints its subsection (under the section's
// heading) to out, and with path set writes it into that Markdown file.
func RunFeedSection(ctx context.Context, env *Env, cfg FeedConfig, out io.Writer, command, path string) error {
	machine := mdreport.ThisMachine() // its load average is the one at the start
	res, err := RunFeed(ctx, env, cfg)
	if err != nil {
		return err
	}
	res.Date, res.Command, res.Machine = time.Now(), command, machine
	if _, err := io.WriteString(out, FeedHeading+"\n\n"+res.Markdown()); err != nil {
		return err
	}
	if path == "" {
		return nil
	}
	return writeFeedSection(path, res)
}

// feedIntro is the section's description, before the subsections.
func feedIntro(c FeedConfig) string {
	return fmt.Sprintf("A real cluster of processes on one machine (`tools/devcluster`, as `master dev` runs it): an "+
		"embedded etcd, a master and N worker processes sharing one `file://` bucket, every worker with FLUSH_INTERVAL=%s "+
		"(it seals every second while it has rows) and the other settings at `master dev`'s defaults. A writer "+
		"(`tools/loadgen`) adds generic rows (`loadgen.GenericSchema`) through every worker in turn at a steady "+
		"rate; ONE consumer (`pkg/client/tail`, what `worker tail --follow --consumer` runs) follows the store through the "+
		"first worker with `wait=` long polls of %s and pages of %s, committing each page as a named consumer.\n\n"+
		"- **Delay**: from each row's acknowledgement (the writer's wall clock when the 201 arrived) to its delivery (the "+
		"consumer's wall clock when the page holding it arrived), over every row acknowledged after a warm-up; every "+
		"acknowledged row must be delivered or the run fails.\n"+
		"- **Horizon lag**: wall time minus the wall time of the store's horizon (`wal.SeqTime`), sampled from etcd every "+
		"%s with the workers' own `horizon.View`.\n"+
		"- **Catch-up**: a second store of rows written as fast as the writer goes, then flushed and merged by every "+
		"worker (its `flush` and `merge-wal` routes) and under the horizon; a new named consumer reads it from the "+
		"beginning (pages of %s, a commit after each), and the list route (`GET .../rows?limit=%d&cursor=`) pages "+
		"through it, alternating, each read checked to answer every row; the fastest round of each is the rate.\n\n",
		c.SealEvery, c.Wait, fmtCount(float64(c.Limit)), c.HorizonEvery, fmtCount(float64(c.Limit)), c.Limit)
}

// Markdown renders the run as the subsection of its worker count.
func (r FeedResult) Markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	c, f, u := r.Config, r.Follow, r.CatchUp
	p("%s, %s\n\n", feedSubheading(c.Workers), r.Date.Format("2006-01-02"))
	p("Command: `%s`. Machine: %s; %s at the end. Seed %d; the run took %s (cluster start and stop included).\n\n",
		r.Command, r.Machine, orDash(r.LoadEnd), r.Seed, fmtDur(r.Duration))
	p("%d workers; %s rows/s in requests of %d rows for %s (warm-up %s left out of the delays); catch-up store of %s rows "+
		"written %s rows a request, %d in flight.\n\n",
		c.Workers, fmtCount(c.Rate), c.Batch, fmtDur(c.Duration), fmtDur(c.Warmup), fmtCount(float64(u.Rows)),
		fmtCount(float64(c.BuildBatch)), c.BuildConcurrency)
	p("| followed load | value |\n|---|---|\n")
	p("| rows acknowledged (rate) | %s (%.0f rows/s), %d requests failed |\n", fmtCount(float64(f.Acked)), f.AckedRate, f.FailedRequests)
	p("| rows delivered to the consumer | %s (%d again, %d never acknowledged) in %s pages, %s commits |\n",
		fmtCount(float64(f.Delivered)), f.Repeated, f.Unacknowledged, fmtCount(float64(f.Pages)), fmtCount(float64(f.Commits)))
	p("| delay, acknowledgement to delivery: p50 / p99 / max (rows) | %s / %s / %s (%s) |\n",
		fmtDur(f.Delay.P50), fmtDur(f.Delay.P99), fmtDur(f.Delay.Max), fmtCount(float64(f.Delay.N)))
	p("| horizon behind wall time: p50 / p99 / max (samples) | %s / %s / %s (%d) |\n",
		fmtDur(f.HorizonLag.P50), fmtDur(f.HorizonLag.P99), fmtDur(f.HorizonLag.Max), f.HorizonLag.N)
	p("| last acknowledged row delivered after the load's end | %s |\n\n", fmtDur(f.Drain))
	p("| catch-up over %s rows | rounds | fastest | rows/s |\n|---|---|---|---|\n", fmtCount(float64(u.Rows)))
	p("| feed, a new consumer from the beginning (%d pages) | %s | %s | %s |\n", u.FeedPages, joinDurs(u.Feed), fmtDur(best(u.Feed)),
		fmtCount(u.FeedRate()))
	p("| list route by cursor (%d pages) | %s | %s | %s |\n\n", u.ListPages, joinDurs(u.List), fmtDur(best(u.List)),
		fmtCount(u.ListRate()))
	ratio := 0.0
	if u.ListRate() > 0 {
		ratio = u.FeedRate() / u.ListRate()
	}
	p("Feed / list: %s of the list's rows/s. Catch-up store written in %s, flushed, merged (%d fragments) and under the horizon %s later.\n",
		fmtRatio(ratio), fmtDur(u.Build), u.Fragments, fmtDur(u.Settle))
	return b.String()
}

func joinDurs(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = fmtDur(d)
	}
	return strings.Join(s, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return "load average " + s
}

// writeFeedSection writes the run's subsection into the Markdown file at path:
// it replaces the subsection of the same worker count, or adds it at the end of
// the section, or makes the section (FeedHeading, the description, the
// subsection) before the incident reproductions. The rest of the file, the
// section's description included, is kept as it is.
func writeFeedSection(path string, r FeedResult) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc, sub := string(data), r.Markdown()
	sec, ok := mdreport.Find(doc, mdreport.All(doc), FeedHeading)
	if !ok {
		return writeOwnSection(path, FeedHeading, FeedHeading+"\n\n"+feedIntro(r.Config)+sub)
	}
	if s, ok := mdreport.Find(doc, sec, feedSubheading(r.Config.Workers)+","); ok {
		return mdreport.WriteFile(path, mdreport.Replace(doc, s, sub))
	}
	end := mdreport.Span{Start: sec.End, End: sec.End}
	text := sub
	if !strings.HasSuffix(doc[:sec.End], "\n\n") {
		text = "\n" + text
	}
	return mdreport.WriteFile(path, mdreport.Replace(doc, end, text))
}
