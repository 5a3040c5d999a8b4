package sweep

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

// newDeleteFixture is a sweep fixture wired as worker.New wires a worker, with a
// delete queue. Drained files are due at the next drain (no delete delay), and the
// bucket counts requests.
func newDeleteFixture(t *testing.T) (*sweepFixture, *objstore.Faults, *objstore.Bucket) {
	t.Helper()
	faults := objstore.NewFaults(nil)
	b := objstore.WithFaults(objstoretest.Mem(t), faults)
	return newSweepFixtureOn(t, false, b, wal.NewDeleteQueue(0), wal.WithDeleteDelay(-1)), faults, b
}

// mergeOne seals one new row and merges it. It returns the files the shard
// manifest lists under deferred_deletes afterwards (drained, not yet due) and the
// deletes the merge sent (the seal's deletes of its entries are not counted).
func (f *sweepFixture) mergeOne(t *testing.T, faults *objstore.Faults, id string) ([]string, int64) {
	t.Helper()
	ctx := context.Background()
	f.addAndFlush(t, id)
	before := faults.Requests(objstore.OpDelete)
	if r, err := f.merger.Merge(ctx, f.s, false); err != nil || r.Generations != 1 {
		t.Fatalf("merge of %s: %+v, %v", id, r, err)
	}
	deletes := faults.Requests(objstore.OpDelete) - before
	m, err := wal.LoadShard(ctx, f.s.Bucket(), f.s.Entry().URI, f.s.Shard())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, d := range m.DeferredDeletes {
		keys = append(keys, f.s.Entry().URI+"/"+d.Path)
	}
	return keys, deletes
}

func exists(t *testing.T, b *objstore.Bucket, key string) bool {
	t.Helper()
	ok, err := b.Exists(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// A merge's drain deletes nothing: the generation files that came due wait in the
// delete queue, and the cleanup sweeper's delete pass removes them and counts them.
// Failure it guards: the drain deleted them inside the merge's answer to the master,
// which the cluster's commits wait for one after another.
func TestAMergeDeletesNothingAndTheCleanupSweeperDeletesTheDueFiles(t *testing.T) {
	f, faults, b := newDeleteFixture(t)
	first, _ := f.mergeOne(t, faults, "a")
	if len(first) != 1 || !exists(t, b, first[0]) {
		t.Fatalf("after the first merge: deferred %v, want generation 1's file, still in the bucket", first)
	}
	second, deletes := f.mergeOne(t, faults, "b") // its drain takes generation 1's file out: due
	if deletes != 0 {
		t.Fatalf("the merge sent %d deletes, want none", deletes)
	}
	if len(second) != 1 || second[0] == first[0] {
		t.Fatalf("after the second merge: deferred %v, want generation 2's file only", second)
	}
	if !exists(t, b, first[0]) {
		t.Fatal("generation 1's file was deleted by the merge")
	}

	r := f.sw.DeletePass(context.Background())
	if r.Deleted != 1 || r.Failed != 0 || r.Dropped != 0 {
		t.Fatalf("delete pass: %+v, want generation 1's file deleted", r)
	}
	if exists(t, b, first[0]) {
		t.Fatal("generation 1's file exists after the delete pass")
	}
	if !exists(t, b, second[0]) {
		t.Fatal("generation 2's file, drained but not due, was deleted")
	}
	if n := f.count(f.metrics.DrainedFiles, DrainedDeleted); n != 1 {
		t.Fatalf("tidemark_wal_drained_files_total{result=deleted} is %d, want 1", n)
	}
}

// Run's deleter is woken by the drain: the due files go without waiting for a
// sweep, and a failed delete is counted and left for garbage
// collection rather than retried forever.
func TestTheCleanupSweeperDeletesDueFilesWhenADrainWakesIt(t *testing.T) {
	f, faults, b := newDeleteFixture(t)
	f.sw.cfg.FlushInterval = time.Hour // only the wake-up runs deletes
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f.sw.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	var due []string
	for i := range 3 {
		keys, _ := f.mergeOne(t, faults, fmt.Sprint("r", i))
		due = append(due, keys...)
	}
	last := due[len(due)-1] // drained by the last merge: not due
	due = due[:len(due)-1]
	testwait.For(t, 10*time.Second, "the woken sweeper deletes the due files", func() (bool, string) {
		n := f.count(f.metrics.DrainedFiles, DrainedDeleted)
		return n == len(due), fmt.Sprintf("%d of %d deleted", n, len(due))
	})
	for _, k := range due {
		if exists(t, b, k) {
			t.Fatalf("%s exists after the sweeper deleted the due files", k)
		}
	}
	if !exists(t, b, last) {
		t.Fatal("the last merge's file, not due, was deleted")
	}

	faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpDelete}, KeyContains: "/gen/"})
	f.mergeOne(t, faults, "failing")
	testwait.For(t, 10*time.Second, "the failed delete counted", func() (bool, string) {
		n := f.count(f.metrics.DrainedFiles, DrainedFailed)
		return n == 1, fmt.Sprintf("%d failed", n)
	})
	if !exists(t, b, last) {
		t.Fatal("the file whose delete failed is gone")
	}
}
