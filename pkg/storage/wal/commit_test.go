package wal_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// TestConcurrentAppendsShareEntries: with one object write per append, 64 writers
// on a 20 ms store would get 50 appends/s in total; group commit writes one entry per
// batch of waiting appenders.
func TestConcurrentAppendsShareEntries(t *testing.T) {
	raw := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(raw, f)
	w := openWriter(t, b, testShard)
	f.SetLatency(20*time.Millisecond, 0)
	before := f.Requests(objstore.OpPutIfAbsent)
	const appenders = 32
	var ids []string
	var wg sync.WaitGroup
	for i := range appenders {
		id := fmt.Sprintf("r%02d", i)
		ids = append(ids, id)
		wg.Go(func() { mustAppend(t, w, id) })
	}
	wg.Wait()
	entries := f.Requests(objstore.OpPutIfAbsent) - before
	t.Logf("%d appends in %d entry writes", appenders, entries)
	if entries > appenders/4 {
		t.Errorf("%d appends took %d entry writes: not group-committed", appenders, entries)
	}
	f.Clear()
	mustSeal(t, w)
	checkExactlyOnce(t, sealedRows(t, raw, testShard), ids)
}

// TestCanceledAppendDoesNotCorruptItsBatch: a caller that gives up while its batch
// is waiting or being written gets its context's error; the other callers of the
// batch are acknowledged and the write lands whole (durable but unacknowledged is
// allowed).
func TestCanceledAppendDoesNotCorruptItsBatch(t *testing.T) {
	raw := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(raw, f)
	w := openWriter(t, b, testShard)
	f.SetLatency(50*time.Millisecond, 0)
	var wg sync.WaitGroup
	// While "blocker" is being written, "patient" and "impatient" queue up; they
	// share the next entry.
	wg.Go(func() { mustAppend(t, w, "blocker") })
	testwait.Until(t, 10*time.Second, "the blocker's write to be in flight", func() bool { return f.InFlight() > 0 })
	var patientErr error
	wg.Go(func() { patientErr = appendIDs(context.Background(), w, "patient") })
	testwait.Until(t, 10*time.Second, "the patient append to queue", func() bool { return w.Stats().QueuedBytes > 0 })
	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := appendIDs(short, w, "impatient"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("impatient append: %v, want DeadlineExceeded", err)
	}
	wg.Wait()
	if patientErr != nil {
		t.Fatalf("patient append in the same batch: %v", patientErr)
	}
	f.Clear()
	mustSeal(t, w)
	rows := sealedRows(t, raw, testShard)
	checkExactlyOnce(t, rows, []string{"blocker", "patient"})
	if len(rows["impatient"]) != 1 {
		t.Errorf("the canceled caller's row was dropped from its batch: %v", rows)
	}
}

// TestAppendWaitsWhileTheQueueIsFull: appends queued behind a slow store are bounded
// in memory; a caller over the bound waits, and gives up with its context without
// having queued anything.
func TestAppendWaitsWhileTheQueueIsFull(t *testing.T) {
	ctx := context.Background()
	raw := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(raw, f)
	w := openWriter(t, b, testShard, wal.WithMaxQueuedBytes(1), wal.WithLinger(-1))
	f.SetLatency(100*time.Millisecond, 0)
	var wg sync.WaitGroup
	wg.Go(func() { mustAppend(t, w, "in-flight") })
	testwait.Until(t, 10*time.Second, "the first write to be in flight", func() bool { return f.InFlight() > 0 })
	wg.Go(func() { mustAppend(t, w, "queued") })
	testwait.Until(t, 10*time.Second, "the second append to queue", func() bool { return w.Stats().QueuedBytes > 0 })
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := appendIDs(short, w, "refused"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("append over the queue bound: %v, want DeadlineExceeded", err)
	}
	wg.Wait()
	f.Clear()
	mustSeal(t, w)
	rows := sealedRows(t, raw, testShard)
	checkExactlyOnce(t, rows, []string{"in-flight", "queued"})
	if len(rows["refused"]) != 0 {
		t.Error("an append that never got into the queue was written")
	}
}

// TestCloseFlushesAndStopsTheCommitter: Close acknowledges (writes) what was queued,
// refuses later appends, and leaves no goroutine behind.
func TestCloseFlushesAndStopsTheCommitter(t *testing.T) {
	ctx := context.Background()
	raw := objstoretest.Mem(t)
	f := objstore.NewFaults(nil)
	b := objstore.WithFaults(raw, f)
	running := goleak.IgnoreCurrent()
	w, err := wal.OpenWriter(ctx, b, testDir, testShard, inputSchema, wal.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	f.SetLatency(10*time.Millisecond, 0)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		acked []string
	)
	for i := range 16 {
		wg.Go(func() {
			id := fmt.Sprintf("r%02d", i)
			err := appendIDs(ctx, w, id)
			switch {
			case err == nil:
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			case !errors.Is(err, wal.ErrClosed):
				t.Errorf("append %s during Close: %v", id, err)
			}
		})
	}
	testwait.Until(t, 10*time.Second, "an append to queue or be written", func() bool {
		return w.Stats().QueuedBytes > 0 || f.InFlight() > 0
	})
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	select {
	case <-w.CommitterDone():
	default:
		t.Fatal("Close returned with the committer still running")
	}
	if err := appendIDs(ctx, w, "late"); !errors.Is(err, wal.ErrClosed) {
		t.Errorf("append after Close: %v, want ErrClosed", err)
	}
	if err := w.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// Seal still works after Close (a worker seals on shutdown).
	f.Clear()
	mustSeal(t, w)
	checkExactlyOnce(t, sealedRows(t, raw, testShard), acked)
	t.Logf("%d of 16 appends acknowledged around Close", len(acked))

	testwait.For(t, 10*time.Second, "the goroutines started since Open to end", func() (bool, string) {
		if err := goleak.Find(running); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}
