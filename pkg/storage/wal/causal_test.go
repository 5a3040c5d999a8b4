package wal_test

import (
	"context"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// TestCausalTokenOrdersWritesAcrossSkewedWriters writes one id through a writer
// whose clock runs 2 s ahead, then through one 2 s behind carrying the first
// answer's token. Production failure: _seq came from each writer's own clock only,
// so the later acknowledged write of an id lost to the earlier one whenever the
// clocks differed by more than the gap between the writes.
func TestCausalTokenOrdersWritesAcrossSkewedWriters(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	now := time.Now()
	ahead := openWriter(t, b, "ahead", wal.WithClock(clocktesting.NewFakeClock(now.Add(2*time.Second))))
	behind := openWriter(t, b, "behind", wal.WithClock(clocktesting.NewFakeClock(now.Add(-2*time.Second))))

	first, err := ahead.AppendAfter(ctx, one(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	blind, err := behind.AppendAfter(ctx, one(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if blind >= first {
		t.Fatalf("without a token the later write got _seq %d, above the earlier %d: the clocks are not skewed as the test means", blind, first)
	}
	second, err := behind.AppendAfter(ctx, one(t), first)
	if err != nil {
		t.Fatal(err)
	}
	if second <= first {
		t.Fatalf("a write carrying token %d got _seq %d: ordered before the write it follows", first, second)
	}
	// What a worker observes orders its later writes too, token or not.
	behind.Observe(second + 1000)
	third, err := behind.AppendAfter(ctx, one(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if third <= second+1000 {
		t.Fatalf("after observing %d the writer gave _seq %d", second+1000, third)
	}
}

// one is a one-row batch of id "x"; it is released when the test ends.
func one(t *testing.T) arrow.RecordBatch {
	rec := batch("x")
	t.Cleanup(rec.Release)
	return rec
}
