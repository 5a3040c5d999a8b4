package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/master/fanout"
)

func quickOverload() OverloadConfig {
	return OverloadConfig{Workers: 2, Writers: 2, RowsPerAdd: 5, Row: SmallRow, ProbeGenerations: 12, ProbeTimeout: time.Minute,
		Factor: 2, Duration: 4 * time.Second, SampleEvery: 100 * time.Millisecond, Latency: time.Millisecond, MaxConcurrent: 16}
}

// Writers add through the workers' real HTTP add route after a probe measured
// what merges sustain; every acknowledged add's rows are in the base table once
// afterwards (RunOverload checks it and fails otherwise), and the report has its
// table of minutes. What it guards: a probe that measures nothing (no merge of
// its backlog) and a phase whose adds never reach the route.
func TestOverloadAddsThroughTheHTTPRouteAfterAProbe(t *testing.T) {
	env := testEnv(t)
	res, err := RunOverload(context.Background(), env, quickOverload(), fanout.Gather)
	if err != nil {
		t.Fatal(err)
	}
	if res.ProbeSealed != 24 || res.ProbeTasks == 0 || res.ProbeRate <= 0 || res.Adds == 0 || len(res.Minutes) == 0 ||
		res.Rows < int64(res.Adds*5) || len(res.Ingest.Samples) == 0 || res.Ingest.Sealed == 0 {
		t.Fatalf("%+v", res)
	}
	r := &Report{Overload: &OverloadRun{Config: quickOverload(), Result: res}}
	md := r.Markdown()
	for _, want := range []string{OverloadHeading + "\n", "| 2 (2) | gather | 24 in ", "\n| 1 | "} {
		if !strings.Contains(md, want) {
			t.Fatalf("no %q in:\n%s", want, md)
		}
	}
	t.Logf("probe %.1f generations/s (%d tasks in %s); offered %.1f adds/s; adds %d, failed %d, latency %s, delayed %d (%s); pending max %d",
		res.ProbeRate, res.ProbeTasks, res.ProbeTime, res.Offered, res.Adds, res.Failed, fmtQ(res.Latency), res.Delayed,
		fmtQ(res.Delay), res.Ingest.MaxPending)
}
