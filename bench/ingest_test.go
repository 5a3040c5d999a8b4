package bench

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/master/fanout"
)

func quickIngest() IngestConfig {
	return IngestConfig{Workers: 2, RowsPerGeneration: 5, Row: SmallRow, SealEvery: 100 * time.Millisecond,
		Duration: 4 * time.Second, SampleEvery: 100 * time.Millisecond, Latency: time.Millisecond, MaxConcurrent: 16,
		ScanInterval: 300 * time.Millisecond, SweepInterval: 200 * time.Millisecond}
}

// Under both fan-out shapes the real master (its scanner, merge sweep and
// scheduler) merges what the sealing workers write while they write, and no
// acknowledged row is lost (the scenario checks the base table itself and fails
// otherwise).
func TestIngestMergesWhileWorkersSeal(t *testing.T) {
	env := testEnv(t)
	for _, mode := range []fanout.Shape{fanout.Serial, fanout.Gather} {
		res, err := RunIngest(context.Background(), env, quickIngest(), mode)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		// MergedByTasks, not Merged: Merged counts what was merged by the end of the
		// 4 s run, and under a loaded -race run one task took 9.6 s; what this test
		// guards is that the master's tasks merge what the workers sealed, not how fast.
		if res.Sealed == 0 || res.MergedByTasks == 0 || res.Tasks == 0 || res.FailedTasks > 0 || len(res.Samples) == 0 ||
			res.Rows < int64(res.Sealed*5) || res.MaxPending < res.SteadyP50 {
			t.Fatalf("%s: %+v", mode, res)
		}
		t.Logf("%s: sealed %d, merged %d, tasks %d (empty %d), pending max %d, steady p50 %d, final %d, bounded %v",
			mode, res.Sealed, res.Merged, res.Tasks, res.EmptyTasks, res.MaxPending, res.SteadyP50, res.FinalPending, res.Bounded)
	}
}

// At the master's defaults the first stats scan runs at the start, before anything
// is pending, and the next one a minute later (the merge sweep enqueues only what a
// scan counted), so within a few seconds only merges on demand can merge: the workers' pending records must reach the master (the bench's workers
// publish them as registered workers do, under the master's prefix) and every
// merge of the run is enqueued on demand. What it guards: a bench whose workers
// publish nothing, which measures the scan interval instead of merges on demand.
func TestIngestMergesOnDemandAtTheMastersDefaults(t *testing.T) {
	env := testEnv(t)
	cfg := quickIngest()
	cfg.ScanInterval, cfg.SweepInterval, cfg.Duration = 0, 0, 6*time.Second
	res, err := RunIngest(context.Background(), env, cfg, fanout.Gather)
	if err != nil {
		t.Fatal(err)
	}
	// MergedByTasks, not SealToMerged: under a loaded -race run the first merge may
	// finish after the last sample; what this guards is that merges on demand ran.
	if res.DemandByGenerations == 0 || res.MergedByTasks == 0 || res.FailedTasks > 0 {
		t.Fatalf("no merge on demand within the run: %+v", res)
	}
	if res.Tasks != res.DemandByGenerations+res.DemandByAge {
		t.Fatalf("%d merge_wal tasks, %d of them on demand: the stats scan cannot have counted a generation yet", res.Tasks,
			res.DemandByGenerations+res.DemandByAge)
	}
	t.Logf("sealed %d, tasks %d (on demand %d / %d), pending max %d, median %d, seal to merged p50 %s p99 %s (%d not merged)",
		res.Sealed, res.Tasks, res.DemandByGenerations, res.DemandByAge, res.MaxPending, res.MedianPending,
		res.SealToMerged.P50, res.SealToMerged.P99, res.Unmerged)
}

// The report's ingest subsection has its own heading, a row per run, and says when
// pending generations were not bounded.
func TestIngestSectionMarkdown(t *testing.T) {
	cfg := DefaultIngestConfig(3)
	r := &Report{IngestRuns: []IngestRun{
		{Config: cfg, Result: IngestResult{Mode: fanout.Serial, Sealed: 540, Elapsed: 3 * time.Minute, MaxPending: 540, Bounded: false}},
		{Config: cfg, Result: IngestResult{Mode: fanout.Gather, Sealed: 540, Merged: 500, Elapsed: 3 * time.Minute, Bounded: true,
			MinuteMax: []int{30, 20, 25}}},
	}}
	md := r.Markdown()
	for _, want := range []string{"### 1b. Sustained ingest\n", "| 3 | ", " (defaults) | serial | 540 (3.0) | 0.0 |", "| **no** |", "| gather |",
		"| **no**: max 540 > 64, seal to merged p99 0s > 15s |", "3 workers, gather: pending, maximum of each minute: 30, 20, 25.\n"} {
		if !strings.Contains(md, want) {
			t.Fatalf("no %q in:\n%s", want, md)
		}
	}
}

// The summary's first-minute maximum, median and per-minute maxima come from the
// samples as taken: a sample at exactly one minute closes the first minute.
func TestIngestSummaryByMinute(t *testing.T) {
	var r IngestResult
	for i := 1; i <= 150; i++ {
		r.Samples = append(r.Samples, IngestSample{At: time.Duration(i) * time.Second, Pending: i})
	}
	r.Elapsed, r.FinalPending = 150*time.Second, 7
	r.summarize(quickIngest())
	if r.FirstMinuteMax != 60 || r.MaxPending != 150 || r.MedianPending != 76 || !slices.Equal(r.MinuteMax, []int{60, 120, 150}) {
		t.Fatalf("first minute %d, max %d, median %d, by minute %v", r.FirstMinuteMax, r.MaxPending, r.MedianPending, r.MinuteMax)
	}
}
