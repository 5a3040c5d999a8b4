package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/master/fanout"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// quickSkew's quiet stores are written often enough to pass
// MERGE_WAL_MIN_GENERATIONS within the run even on a loaded machine under -race
// (a run with 4 stores written every 300 ms sealed 8 generations each in 7 s,
// too late for the master to enqueue one).
func quickSkew() SkewConfig {
	in := quickIngest()
	in.Workers, in.Duration = 3, 6*time.Second
	return SkewConfig{Ingest: in, QuietStores: 2, QuietEvery: 100 * time.Millisecond, QuietShare: 0.1}
}

// A hot store and quiet stores written at once through the real master: the
// quiet stores' generations are sealed and merged too, and every acknowledged row
// of every store is in its base table once afterwards (RunSkew checks it and
// fails otherwise). What it guards: a scenario whose quiet stores are never
// written, or never merged by the master, reporting an empty table as a result.
func TestSkewMergesTheQuietStoresBesideTheHotOne(t *testing.T) {
	env := testEnv(t)
	res, err := RunSkew(context.Background(), env, quickSkew(), fanout.Gather)
	if err != nil {
		t.Fatal(err)
	}
	// QuietTasks (enqueued), not QuietSealToMerged: under a loaded -race run a
	// quiet merge may finish after the last sample; what this guards is that the
	// master merges quiet stores, not how fast.
	if res.Hot.Sealed == 0 || res.QuietSealed == 0 || res.QuietRows == 0 || res.HotRows == 0 || res.QuietTasks == 0 ||
		res.Hot.Tasks == 0 || res.FailedTasks > 0 || res.Worst.Name == "" || len(res.Hot.Samples) == 0 {
		t.Fatalf("%+v", res)
	}
	r := &Report{SkewRuns: []SkewRun{{Config: quickSkew(), Result: res}}}
	md := r.Markdown()
	for _, want := range []string{SkewHeading + "\n", "| 3 | gather | ", "worst quiet store"} {
		if !strings.Contains(md, want) {
			t.Fatalf("no %q in:\n%s", want, md)
		}
	}
	t.Logf("hot: sealed %d, pending max %d; quiet: sealed %d, seal to merged %s, oldest unmerged %s, worst %s (%s); tasks %d (quiet %d), p99 %s",
		res.Hot.Sealed, res.Hot.MaxPending, res.QuietSealed, fmtQ(res.QuietSealToMerged), res.QuietOldestUnmerged,
		res.Worst.Name, res.Worst.Longest(), res.Tasks, res.QuietTasks, res.TaskTimes.P99)
}

// The quiet stores' rows per add are their share of the hot store's rows per
// QuietEvery, over the quiet stores: at the default 90/10 split, 11 rows every
// 5 s to each of 50 stores beside 1,000 rows/s to the hot one.
func TestSkewQuietRowsAreTheirShare(t *testing.T) {
	if got := DefaultSkewConfig(time.Minute).QuietRows(); got != 11 {
		t.Fatalf("quiet rows per add %d, want 11", got)
	}
}

// A quiet generation that was never merged counts with its wait at the end: a
// starved store cannot meet the goal by never being merged.
func TestSkewGoalCountsTheWaitsStillRunning(t *testing.T) {
	r := SkewResult{MaxDelay: 30 * time.Second, TaskTimes: Quantiles{N: 1, P99: 5 * time.Second},
		QuietSealToMerged: Quantiles{N: 10, P50: time.Second, P99: 20 * time.Second, Max: 20 * time.Second},
		Hot:               IngestResult{SealToMerged: Quantiles{N: 1, P99: time.Second}}}
	if got := r.goals(); got != "yes" {
		t.Fatalf("goals %q, want yes", got)
	}
	r.QuietOldestUnmerged = 40 * time.Second
	if got := r.goals(); !strings.Contains(got, "quiet longest 40.00 s > 35.00 s") {
		t.Fatalf("goals %q: the wait still running at the end was not counted", got)
	}
}

// The hot store's peak is explained by the tasks between its last merge commit
// and the peak sample: here a merge that ran 7 s beside a compaction; tasks of
// other stores and merges that ended before the last commit are left out.
func TestHotPeakNamesTheTasksSinceTheLastCommit(t *testing.T) {
	start := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	task := func(kind tasks.Kind, target string, enq, from, to int, detail string) tasks.Task {
		tk := tasks.Task{Kind: kind, Target: registry.MustParseTarget(target), EnqueuedAt: at(enq), StartedAt: at(from), State: tasks.StateDone, Detail: detail}
		if to > 0 {
			tk.FinishedAt = at(to)
		} else {
			tk.State = tasks.StateRunning
		}
		return tk
	}
	all := []tasks.Task{
		task(tasks.KindMergeWAL, "hot", 0, 1, 2, "early"),
		task(tasks.KindMergeWAL, "hot", 3, 3, 4, "the last commit"),
		task(tasks.KindCompact, "hot", 3, 3, 11, "compacted"),
		task(tasks.KindMergeWAL, "hot", 4, 5, 0, "slow"),
		task(tasks.KindMergeWAL, "quiet-1", 5, 6, 7, "other store"),
	}
	var samples []IngestSample
	for s, n := range []int{1, 5, 3, 9, 12, 30, 44, 60, 80, 99, 120, 20} {
		samples = append(samples, IngestSample{At: time.Duration(s) * time.Second, Pending: n})
	}
	p := hotPeak(samples, start, all, "hot")
	if p.Pending != 120 || p.At != 10*time.Second || p.SinceCommit != 6*time.Second || len(p.Window) != 3 {
		t.Fatalf("peak %+v", p)
	}
	for i, want := range []string{"(the last commit)", "compact queued 0, ran 8.00 s from 3.00 s (compacted)", "(slow)"} {
		if !strings.Contains(p.Window[i], want) {
			t.Errorf("window[%d] = %q, want it to contain %q", i, p.Window[i], want)
		}
	}
}
