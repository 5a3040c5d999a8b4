package table

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

func throttledTable(t *testing.T, opts ...Option) (*objstore.Faults, *Table) {
	t.Helper()
	f := objstore.NewFaults(rand.NewPCG(5, 6))
	tb := createTable(t, objstore.WithFaults(memBucket(t), f), opts...)
	mustAppend(t, tb, row{"a", 1, 1}, row{"b", 1, 2})
	return f, tb
}

func TestThrottledRequestsOfAMergeAreRetried(t *testing.T) {
	ctx := context.Background()
	f, tb := throttledTable(t)
	fresh, err := Open(ctx, tb.bucket, "rollout/t") // nothing cached: blooms and key indexes are read
	if err != nil {
		t.Fatal(err)
	}
	// Every kind of request the merge makes is refused twice (503 SlowDown).
	for _, op := range []objstore.Op{objstore.OpGet, objstore.OpGetRange, objstore.OpPut, objstore.OpPutIfAbsent} {
		f.AddRule(objstore.Rule{Ops: []objstore.Op{op}, Times: 2, Err: objstore.ErrThrottled})
	}
	rec := batch(row{"a", 2, 10}, row{"c", 2, 30})
	defer rec.Release()
	m, err := appendRows(ctx, fresh, Append{Records: []arrow.RecordBatch{rec}})
	if err != nil {
		t.Fatalf("merge under throttling: %v", err)
	}
	if f.Injected() < 8 {
		t.Fatalf("only %d requests were refused: the test did not throttle every kind", f.Injected())
	}
	got := liveRows(t, fresh, m)
	if len(got) != 3 || got["a"].value != 10 || got["c"].value != 30 {
		t.Fatalf("rows after the merge: %v", got)
	}
}

func TestACommitThrottledUntilItsRetryTimeoutIsTooManyWriters(t *testing.T) {
	ctx := context.Background()
	f, tb := throttledTable(t, WithRetryTimeout(300*time.Millisecond))
	base, err := tb.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := batch(row{"c", 2, 30})
	defer rec.Release()
	x, err := tb.Prepare(ctx, base, Append{Records: []arrow.RecordBatch{rec}})
	if err != nil {
		t.Fatal(err)
	}
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPutIfAbsent}, Err: objstore.ErrThrottled})
	start := time.Now()
	_, err = x.Commit(ctx)
	if !errors.Is(err, ErrTooManyWriters) || !strings.Contains(err.Error(), "throttled") {
		t.Fatalf("got %v, want ErrTooManyWriters saying the attempts were throttled", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("gave up after %s with a 300 ms retry timeout", took)
	}
	if m, err := tb.Refresh(ctx); err != nil || m.Version != base.Version {
		t.Fatalf("after the failed commit: version %v (%v), want %d", m, err, base.Version)
	}
}
