package table

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
)

// A merge's conflict check and deletion vectors are bounded by the requests they
// have in flight, not by the fragments they touch: a merge of ids spread over 150
// fragments sends more than 32 requests at once (the old bound was 32 fragments
// for lookups, 8 for deletion vectors, a round trip per few fragments on an
// object store), and never more than requestsInFlight.
func TestAMergeOverManyFragmentsIsBoundedByRequestsNotFragments(t *testing.T) {
	ctx := context.Background()
	const frags = 150
	f, tb, m := faultyTable(t, frags, 20)
	rows := make([]row, frags)
	for i := range rows {
		rows[i] = row{fmt.Sprintf("f%02d-%05d", i, i%20), 2, int64(i)}
	}
	rec := batch(rows...)
	defer rec.Release()
	f.SetLatency(5*time.Millisecond, 0)
	f.ResetCounters()
	x, err := tb.Prepare(ctx, m, Append{Records: []arrow.RecordBatch{rec}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Abort(ctx)
	if got := len(x.dels); got != frags {
		t.Fatalf("deletions in %d fragments, want %d", got, frags)
	}
	if peak := f.PeakInFlight(); peak <= 32 || peak > requestsInFlight {
		t.Fatalf("peak of %d requests in flight for %d fragments (%d requests), want more than 32 and at most %d",
			peak, frags, f.TotalRequests(), requestsInFlight)
	}
}
