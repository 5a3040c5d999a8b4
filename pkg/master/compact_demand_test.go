package master

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/scanner"
	"github.com/tidemark-io/tidemark/pkg/tasks"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

// A merge that leaves MIN_FRAGMENTS level-0 fragments makes a compaction of its
// store due at once: the scheduler runs it after the merge, without the
// compaction sweep (an hour here). One fragment fewer, or a task of another kind,
// enqueues nothing; a second merge's enqueue deduplicates onto the compaction
// still queued.
func TestAMergeThatLeavesManyLevelZeroFragmentsGetsItsStoreCompacted(t *testing.T) {
	client, _ := etcdtest.Start(t)
	ts := tasks.New(client, "/compact-demand")
	m := &Master{cfg: Config{CompactionSweep: scanner.CompactionSweepConfig{MinFragments: 4}}, tasks: ts,
		log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()

	report := func(level0 int64) tasks.Report {
		return tasks.Report{Stats: tasks.Stats{GenerationsMerged: 3, Level0Fragments: level0}}
	}
	merge := tasks.Task{Kind: tasks.KindMergeWAL, Target: registry.MustParseTarget("few")}
	m.compactOnDemand(ctx, merge, report(3))
	m.compactOnDemand(ctx, tasks.Task{Kind: tasks.KindCompact, Target: registry.MustParseTarget("other")}, report(40))
	if depth, err := ts.QueueDepth(ctx); err != nil || depth != 0 {
		t.Fatalf("queue depth %d (%v) after a merge below MIN_FRAGMENTS and a compaction, want 0", depth, err)
	}

	ran := make(chan string, 8)
	runner := RunnerFunc(func(_ context.Context, c *tasks.Claim) (tasks.Report, error) {
		ran <- string(c.Task.Kind) + " " + c.Task.Target.String()
		if c.Task.Kind == tasks.KindMergeWAL {
			return report(4), nil
		}
		return tasks.Report{}, nil
	})
	s := NewScheduler(SchedulerConfig{Tasks: ts, Lease: session(t, client, 10).Lease, PollInterval: time.Hour,
		Runners: map[tasks.Kind]Runner{tasks.KindMergeWAL: runner, tasks.KindCompact: runner}, OnDone: m.compactOnDemand})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.Run(runCtx, time.Second); close(done) }()
	defer func() { cancel(); <-done }()
	if _, _, err := ts.Enqueue(ctx, tasks.KindMergeWAL, registry.MustParseTarget("busy")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"merge_wal busy", "compact busy"} {
		select {
		case got := <-ran:
			if got != want {
				t.Fatalf("ran %q, want %q", got, want)
			}
		case <-time.After(30 * time.Second): // liveness bound, far below the sweep
			t.Fatalf("%s never ran", want)
		}
	}
	cancel()
	<-done

	// Stopped: two merges' reports enqueue one compaction.
	m.compactOnDemand(ctx, tasks.Task{Kind: tasks.KindMergeWAL, Target: registry.MustParseTarget("twice")}, report(9))
	m.compactOnDemand(ctx, tasks.Task{Kind: tasks.KindMergeWAL, Target: registry.MustParseTarget("twice")}, report(10))
	queued, _, err := ts.List(ctx, tasks.ListFilter{State: tasks.StateQueued})
	if err != nil || len(queued) != 1 || queued[0].Kind != tasks.KindCompact || queued[0].Target.String() != "twice" {
		t.Fatalf("queued %v (%v), want one compaction of twice", queued, err)
	}
}
