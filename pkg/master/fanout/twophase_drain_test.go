package fanout

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidemark-io/tidemark/pkg/tasks"
	tidemarkv1 "github.com/tidemark-io/tidemark/proto/tidemark/v1"
)

// drainingWorker is a countingWorker that records whether its commits deferred
// the drain and the DrainMerged calls it gets; its drain may wait for a signal.
type drainingWorker struct {
	countingWorker
	deferred   atomic.Bool
	committed  chan struct{} // closed by its commit
	drainAfter <-chan struct{}
	drainErr   error
	drainedAt  atomic.Uint64 // base_version of its drain + 1 (0: none)
	drains     atomic.Int32
	log        *orderLog
}

func (w *drainingWorker) CommitMerge(ctx context.Context, r *tidemarkv1.CommitMergeRequest) (*tidemarkv1.MergeWalResponse, error) {
	w.deferred.Store(r.GetDeferDrain())
	resp, err := w.countingWorker.CommitMerge(ctx, r)
	w.log.add("commit " + w.name)
	close(w.committed)
	return resp, err
}

func (w *drainingWorker) DrainMerged(ctx context.Context, r *tidemarkv1.DrainMergedRequest) (*tidemarkv1.DrainMergedResponse, error) {
	if r.GetFencingToken() != 9 {
		return nil, status.Errorf(codes.FailedPrecondition, "token %d", r.GetFencingToken())
	}
	if w.drainAfter != nil {
		select {
		case <-w.drainAfter:
		case <-ctx.Done():
			return nil, status.Error(codes.DeadlineExceeded, "the commit after this one never came")
		}
	}
	w.drains.Add(1)
	w.drainedAt.Store(r.GetBaseVersion() + 1)
	w.log.add("drain " + w.name)
	if w.drainErr != nil {
		return nil, w.drainErr
	}
	return &tidemarkv1.DrainMergedResponse{Reclaimed: 2, InstanceId: w.name}, nil
}

// The two-phase fan-out's commits answer before their drains (defer_drain), and
// the fan-out drains each committed worker with the version its commit created,
// beside the commits after it: w0's drain waits for w1's commit, so a fan-out
// that drained before the next commit would see it time out, undrained.
// Invariant: the chain of commits holds only the base table's writes, and yet
// every committed shard is drained before the task ends; a drain that fails
// fails no task (reads skip by the watermark, the next drain takes it) but the
// worker is not counted merged.
func TestTwoPhaseDrainsEachWorkerBesideTheCommitsAfterIt(t *testing.T) {
	var inFlight, maxSeen atomic.Int32
	var versions atomic.Uint64
	versions.Store(10)
	log := &orderLog{}
	var ws []*drainingWorker
	var disc StaticDiscovery
	for i := range 3 {
		w := &drainingWorker{countingWorker: countingWorker{name: fmt.Sprint("w", i), inFlight: &inFlight, maxSeen: &maxSeen,
			versions: &versions}, committed: make(chan struct{}), log: log}
		ws = append(ws, w)
		disc = append(disc, serve(t, w.name, w))
	}
	ws[0].drainAfter = ws[1].committed
	ws[1].drainAfter = ws[2].committed
	ws[2].drainErr = status.Error(codes.Internal, "disk on fire")
	caller := NewGRPCCaller(GRPCCallerConfig{})
	t.Cleanup(func() { caller.Close() })
	f := New(Config{Discovery: disc, Caller: caller, Shape: TwoPhase, WorkerTimeout: 20 * time.Second})
	report, err := f.Run(context.Background(), claimFor("generic:gs", 9))
	if err != nil {
		t.Fatal(err)
	}
	want := tasks.Stats{Workers: 3, WorkersMerged: 2, GenerationsMerged: 6, RowsMerged: 30, BaseVersion: 13}
	if report.Stats != want {
		t.Fatalf("stats %+v, want %+v (w2's drain failed)", report.Stats, want)
	}
	for i, w := range ws {
		if !w.deferred.Load() {
			t.Fatalf("%s's commit did not defer its drain", w.name)
		}
		if n := w.drains.Load(); n != 1 {
			t.Fatalf("%s drained %d times, want 1", w.name, n)
		}
		if got, want := w.drainedAt.Load()-1, uint64(11+i); got != want {
			t.Fatalf("%s drained at version %d, want %d (its commit's)", w.name, got, want)
		}
	}
	got := log.get()
	if i, j := slices.Index(got, "drain w0"), slices.Index(got, "commit w1"); i < j {
		t.Fatalf("calls %v: w0 drained before w1 committed", got)
	}
}
