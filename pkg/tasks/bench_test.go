package tasks

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/testutil/etcdtest"
)

// BenchmarkTaskCycle measures enqueue+claim+finish against an embedded etcd, next
// to a loop of plain sequential puts to the same server in the same run, and
// reports how many plain puts one task cycle costs.
func BenchmarkTaskCycle(b *testing.B) {
	client, _ := etcdtest.Start(b)
	ctx := context.Background()
	s := New(client, "/bench", WithLogger(slog.New(slog.DiscardHandler)))
	lease, err := client.Grant(ctx, 600)
	if err != nil {
		b.Fatal(err)
	}

	putStart := time.Now()
	for i := range b.N {
		if _, err := client.Put(ctx, fmt.Sprintf("/bench-put/%d", i%100), "{}"); err != nil {
			b.Fatal(err)
		}
	}
	puts := time.Since(putStart)

	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if _, _, err := s.Enqueue(ctx, KindMergeWAL, tgt(fmt.Sprintf("r%d", i%100))); err != nil {
			b.Fatal(err)
		}
		c, err := s.Claim(ctx, lease.ID, ClaimFilter{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Finish(ctx, c, Result{}); err != nil {
			b.Fatal(err)
		}
	}
	cycles := time.Since(start)
	b.StopTimer()

	cyclesPerSec := float64(b.N) / cycles.Seconds()
	putsPerSec := float64(b.N) / puts.Seconds()
	b.ReportMetric(cyclesPerSec, "tasks/s")
	b.ReportMetric(putsPerSec, "puts/s")
	b.ReportMetric(putsPerSec/cyclesPerSec, "puts/task")
}
