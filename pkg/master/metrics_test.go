package master

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark-io/tidemark/pkg/tasks"
)

// The merge series are computed from a run's stats alone. They were parsed out
// of the detail's words, so rewording the fan-out's summary would have zeroed
// master_merge_wal_generations_reclaimed_total and stopped counting empty rounds:
// here no detail, whatever it says, changes a series, and the same details with
// other stats change them.
func TestMergeMetricsReadTheStatsNeverTheDetail(t *testing.T) {
	for _, detail := range []string{"", "done", "merged 0 generations across 1/1 worker", "merged 100 generations across 3/3 workers; adopted 9 orphaned shards"} {
		m := NewMetrics(nil)
		observe := func(outcome string, s tasks.Stats) {
			m.ObserveTask(tasks.KindMergeWAL, outcome, tasks.Report{Detail: detail, Stats: s}, nil, time.Second)
		}
		check := func(what string, reclaimed, empty float64) {
			t.Helper()
			if n := testutil.ToFloat64(m.GenerationsReclaimed); n != reclaimed {
				t.Errorf("detail %q, %s: generations reclaimed %v, want %v", detail, what, n, reclaimed)
			}
			if n := testutil.ToFloat64(m.MergeEmptyRounds); n != empty {
				t.Errorf("detail %q, %s: empty rounds %v, want %v", detail, what, n, empty)
			}
		}
		observe(OutcomeDone, tasks.Stats{Workers: 1, WorkersMerged: 1, GenerationsMerged: 5})
		check("a merge of 5 generations", 5, 0)
		observe(OutcomeDone, tasks.Stats{Workers: 3, WorkersMerged: 3})
		check("then a round that merged nothing", 5, 1)
		observe(OutcomeDone, tasks.Stats{Workers: 3, WorkersMerged: 3, ShardsAdopted: 1})
		check("then a round that only adopted", 5, 1)
		observe(OutcomeFailed, tasks.Stats{Workers: 3, WorkersMerged: 1, WorkersSkipped: 2, GenerationsMerged: 2})
		check("then a failed round's progress", 7, 1)
		observe(OutcomeDone, tasks.Stats{})
		check("then a runner that counts nothing", 7, 1)
	}
}
