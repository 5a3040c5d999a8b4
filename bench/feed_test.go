package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func quickFeed() FeedConfig {
	c := DefaultFeedConfig(2)
	c.SealEvery, c.Rate, c.Batch = 500*time.Millisecond, 100, 5
	c.Duration, c.Warmup, c.HorizonEvery = 6*time.Second, time.Second, 100*time.Millisecond
	c.Limit, c.Wait = 50, 2*time.Second
	c.CatchUpRows, c.BuildBatch, c.BuildConcurrency, c.Rounds = 2000, 200, 2, 1
	return c
}

// The feed scenario at a tiny size, on real master and worker processes: the
// consumer receives every acknowledged row (the scenario fails otherwise), each
// once, with a delay, while the horizon is sampled; both catch-up reads answer
// every row of the catch-up store (checked by the scenario).
func TestFeedFollowsACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes: skipped with -short")
	}
	env := testEnv(t)
	cfg := quickFeed()
	res, err := RunFeed(context.Background(), env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f, u := res.Follow, res.CatchUp
	if f.Acked == 0 || f.Delivered < f.Acked || f.Repeated != 0 || f.Delay.N == 0 || f.Commits == 0 || f.HorizonLag.N == 0 {
		t.Fatalf("followed load: %+v", f)
	}
	if len(u.Feed) != cfg.Rounds || len(u.List) != cfg.Rounds || u.FeedRate() <= 0 || u.ListRate() <= 0 {
		t.Fatalf("catch-up: %+v", u)
	}
	t.Logf("acked %d, delay p50 %s p99 %s max %s, horizon lag p50 %s p99 %s; catch-up feed %.0f rows/s, list %.0f rows/s",
		f.Acked, f.Delay.P50, f.Delay.P99, f.Delay.Max, f.HorizonLag.P50, f.HorizonLag.P99, u.FeedRate(), u.ListRate())
}

// A run's subsection goes into the section made on the first write, replaces
// the subsection of its worker count on the next, and another worker count's
// is added after it; the section's description, edited by hand, stays.
func TestFeedSectionKeepsOtherWorkerCounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := os.WriteFile(path, []byte("# Benchmarks\n\n"+SectionHeading+", 2026-11-29\n\nold\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(workers int, acked int64) FeedResult {
		c := DefaultFeedConfig(workers)
		return FeedResult{Config: c, Date: time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC), Command: "cmd",
			Follow: FeedFollow{Acked: acked}, CatchUp: FeedCatchUp{Rows: c.CatchUpRows, Feed: []time.Duration{time.Second},
				List: []time.Duration{2 * time.Second}}}
	}
	write := func(r FeedResult) string {
		t.Helper()
		if err := writeFeedSection(path, r); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	doc := write(run(20, 111))
	if !strings.Contains(doc, FeedHeading+"\n\nA real cluster") || strings.Index(doc, FeedHeading) > strings.Index(doc, SectionHeading) ||
		!strings.Contains(doc, "| 111 (0 rows/s)") || !strings.Contains(doc, "Feed / list: 2.00x") {
		t.Fatalf("first write:\n%s", doc)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(doc, "A real cluster", "Written by hand. A real cluster", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	write(run(3, 333))
	doc = write(run(20, 222))
	for _, want := range []string{"Written by hand.", "### 20 workers, 2026-12-07", "| 222 (0 rows/s)", "### 3 workers, 2026-12-07", "| 333 (0 rows/s)", "\nold\n"} {
		if !strings.Contains(doc, want) {
			t.Fatalf("no %q in:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "| 111 ") || strings.Count(doc, "### 20 workers") != 1 ||
		strings.Index(doc, "### 20 workers") > strings.Index(doc, "### 3 workers") || strings.Index(doc, "### 3 workers") > strings.Index(doc, SectionHeading) {
		t.Fatalf("rewrite:\n%s", doc)
	}
}
