package bench

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/master"
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
	for _, mode := range []string{master.FanOutSerial, master.FanOutTwoPhase} {
		res, err := RunIngest(context.Background(), env, quickIngest(), mode)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if res.Sealed == 0 || res.Merged == 0 || res.Tasks == 0 || res.FailedTasks > 0 || len(res.Samples) == 0 ||
			res.Rows < int64(res.Sealed*5) || res.MaxPending < res.SteadyP50 {
			t.Fatalf("%s: %+v", mode, res)
		}
		t.Logf("%s: sealed %d, merged %d, tasks %d (empty %d), pending max %d, steady p50 %d, final %d, bounded %v",
			mode, res.Sealed, res.Merged, res.Tasks, res.EmptyTasks, res.MaxPending, res.SteadyP50, res.FinalPending, res.Bounded)
	}
}
