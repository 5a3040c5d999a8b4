package table

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

func TestCoalesceMergesRangesCloserThanTheGap(t *testing.T) {
	got := coalesce([]byteRange{{100, 10}, {0, 10}, {10, 5}, {300, 10}, {105, 20}, {50, 0}}, 50)
	want := []byteRange{{0, 15}, {100, 25}, {300, 10}}
	if !slices.Equal(got, want) {
		t.Fatalf("coalesce = %v, want %v", got, want)
	}
	if got := coalesce([]byteRange{{0, 10}, {70, 10}}, 60); !slices.Equal(got, []byteRange{{0, 80}}) {
		t.Fatalf("a gap of exactly 60 with limit 60: %v, want one range", got)
	}
}

// readRuns keeps each run's items: a reader of key-index blocks or packed
// deletion vectors decodes item i from its run's read at i's offset, so a run
// must cover every item it names, and an item inside another's range (a range
// that ends before the run's furthest end) must not end the run.
func TestReadRunsNameTheItemsEachReadCovers(t *testing.T) {
	rs := []byteRange{{0, 100}, {10, 5}, {108, 10}, {200, 10}, {400, 1}, {411, 1}}
	got := readRuns(len(rs), func(i int) byteRange { return rs[i] }, 10)
	want := []readRun{{0, 3, byteRange{0, 118}}, {3, 4, byteRange{200, 10}}, {4, 6, byteRange{400, 12}}}
	if !slices.Equal(got, want) {
		t.Fatalf("readRuns = %v, want %v", got, want)
	}
	for _, r := range got {
		for _, it := range rs[r.first:r.end] {
			if it.off < r.span.off || it.off+it.n > r.span.off+r.span.n {
				t.Fatalf("run %v does not cover its item %v", r, it)
			}
		}
	}
	if got := readRuns(0, nil, 10); got != nil {
		t.Fatalf("no items: %v", got)
	}
}

// faultyTable is a table on a mem bucket behind a fault injector, with nFrags
// fragments of rowsEach rows ("fNN-RRRRR"), and a second handle on it that has
// nothing cached.
func faultyTable(t *testing.T, nFrags, rowsEach int) (*objstore.Faults, *Table, *Manifest) {
	t.Helper()
	f := objstore.NewFaults(rand.NewPCG(1, 2))
	bucket := objstore.WithFaults(memBucket(t), f)
	tb := createTable(t, bucket)
	for i := range nFrags {
		rows := make([]row, rowsEach)
		for j := range rows {
			rows[j] = row{fmt.Sprintf("f%02d-%05d", i, j), 1, int64(j)}
		}
		mustAppend(t, tb, rows...)
	}
	fresh, err := Open(context.Background(), bucket, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	f.ResetCounters()
	return f, fresh, fresh.Latest()
}

// A point lookup costs what it touches: with the key index's top and the
// fragment's footer cached, one read of the key-index block that holds the id and
// one coalesced read of the row group's column chunks; with the block cached too,
// the row group alone.
func TestPointLookupReadsOneIndexBlockAndOneRowGroup(t *testing.T) {
	ctx := context.Background()
	f, tb, m := faultyTable(t, 1, 100_000) // 49 row groups, larger than a footer read
	get := func(id string, want int64) {
		t.Helper()
		f.ResetCounters()
		rec, _, err := tb.Get(ctx, m, id)
		if err != nil || rec == nil {
			t.Fatalf("get %s: %v %v", id, rec, err)
		}
		defer rec.Release()
		if got := f.TotalRequests(); got != want {
			t.Fatalf("get %s of 4 columns made %d requests (%v), want %d", id, got, f.RequestCounts(), want)
		}
		if v := rec.Column(1); "f00-"+fmt.Sprintf("%05s", v.ValueStr(0)) != id {
			t.Fatalf("get %s: value %s", id, v.ValueStr(0))
		}
	}
	get("f00-00001", 4) // the index's top, its block, the footer, the row group
	get("f00-94500", 2) // another block, another row group
	get("f00-94501", 1) // the same block, cached: the row group alone
}

func TestScanReadsEveryRowGroupWithOneRequestEach(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		rows int
		want int64 // ranged reads of a scan with nothing cached
	}{
		{50, 1},      // the footer read holds the whole fragment
		{40_000, 21}, // the footer, then one read per row group (20)
	} {
		t.Run(fmt.Sprint(c.rows), func(t *testing.T) {
			f, tb, m := faultyTable(t, 1, c.rows)
			if big := m.Fragments[0].Bytes > footerRead; big != (c.rows > 50) {
				t.Fatalf("fragment of %d rows is %d bytes: the case does not test what it says", c.rows, m.Fragments[0].Bytes)
			}
			rows := 0
			err := tb.Scan(ctx, m, ScanOptions{}, func(rec arrow.RecordBatch, _ string) error { rows += int(rec.NumRows()); return nil })
			if err != nil {
				t.Fatal(err)
			}
			if rows != c.rows {
				t.Fatalf("scanned %d rows, want %d", rows, c.rows)
			}
			if got := f.TotalRequests(); got != c.want {
				t.Fatalf("scan made %d requests (%v), want %d", got, f.RequestCounts(), c.want)
			}
		})
	}
}

func TestConflictCheckReadsFragmentsInParallel(t *testing.T) {
	ctx := context.Background()
	const frags = 8
	f, tb, m := faultyTable(t, frags, 50)
	f.SetLatency(50*time.Millisecond, 0)
	var rows []row
	for i := range frags { // one update in every fragment
		rows = append(rows, row{fmt.Sprintf("f%02d-%05d", i, 7), 2, 100})
	}
	rec := batch(rows...)
	defer rec.Release()
	x, err := tb.Prepare(ctx, m, Append{Records: []arrow.RecordBatch{rec}})
	if err != nil {
		t.Fatal(err)
	}
	x.Abort(ctx)
	// One after another, at most one request would be in flight. (Counted, not
	// timed: the test machine may be loaded.)
	if peak := f.PeakInFlight(); peak < 4 || peak > fragmentReads*chunkReads {
		t.Fatalf("at most %d requests were in flight, want between 4 and %d", peak, fragmentReads*chunkReads)
	}
	if got := len(x.dvRefs); got != frags {
		t.Fatalf("deletion vectors for %d fragments, want %d", got, frags)
	}
}

func TestAFailedReadAmongParallelOnesFailsTheCheckNamingTheObject(t *testing.T) {
	ctx := context.Background()
	f, tb, m := faultyTable(t, 8, 50)
	bad := tb.key(m.Fragments[5].Index.Path)
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGetRange}, KeyContains: m.Fragments[5].Index.Path})
	var rows []row
	for i := range 8 {
		rows = append(rows, row{fmt.Sprintf("f%02d-%05d", i, 7), 2, 100})
	}
	rec := batch(rows...)
	defer rec.Release()
	_, err := tb.Prepare(ctx, m, Append{Records: []arrow.RecordBatch{rec}})
	if !errors.Is(err, objstore.ErrInjected) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("got %v, want the injected fault naming %s", err, bad)
	}
	if errors.Is(err, ErrCorrupt) {
		t.Fatalf("an I/O failure reported as corruption: %v", err)
	}
}

func TestCancellingAConflictCheckStopsItsReads(t *testing.T) {
	f, tb, m := faultyTable(t, 8, 50)
	var rows []row
	for i := range 8 {
		rows = append(rows, row{fmt.Sprintf("f%02d-%05d", i, 7), 2, 100})
	}
	rec := batch(rows...)
	defer rec.Release()
	// Writes are quick, reads of the base hang until cancelled.
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet, objstore.OpGetRange}, Hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := tb.Prepare(ctx, m, Append{Records: []arrow.RecordBatch{rec}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("prepare returned %s after the cancel", took)
	}
	testwait.For(t, 2*time.Second, "no request in flight after the cancel", func() (bool, string) {
		n := f.InFlight()
		return n == 0, fmt.Sprintf("%d in flight", n)
	})
}

func TestAFragmentShorterThanItsManifestIsCorrupt(t *testing.T) {
	ctx := context.Background()
	_, tb, m := faultyTable(t, 1, 50)
	key := tb.key(m.Fragments[0].Path)
	data, err := tb.bucket.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.bucket.Put(ctx, key, data[:len(data)-100]); err != nil {
		t.Fatal(err)
	}
	_, _, err = tb.Get(ctx, m, "f00-00003")
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), key) {
		t.Fatalf("got %v, want ErrCorrupt naming %s", err, key)
	}
}

// A merge hands Prepare one record batch per WAL generation; the fragment still
// gets row groups of RowGroupRows rows, not one per batch. Failure it guards: a
// merge of 32 generations of 25 rows wrote 32 row groups, and every later cold
// key-index read of that fragment (each other worker's conflict check) cost 33
// requests instead of 2 (BENCHMARKS.md, commit storm).
func TestAFragmentOfManySmallBatchesHasFullRowGroups(t *testing.T) {
	ctx := context.Background()
	tb := createTable(t, memBucket(t))
	var recs []arrow.RecordBatch
	for g := range 32 {
		rows := make([]row, 100)
		for j := range rows {
			rows[j] = row{fmt.Sprintf("g%02d-%03d", g, j), 1, int64(j)}
		}
		recs = append(recs, batch(rows...))
	}
	m, err := appendRows(ctx, tb, Append{Records: recs})
	for _, r := range recs {
		r.Release()
	}
	if err != nil {
		t.Fatal(err)
	}
	ff, err := tb.openFragment(ctx, m.ArrowSchema(), m.Fragments[0])
	if err != nil {
		t.Fatal(err)
	}
	defer ff.Close()
	// 3,200 rows in row groups of 2,048.
	if n := ff.pf.MetaData().NumRowGroups(); n != 2 {
		t.Fatalf("a fragment of 32 batches of 100 rows has %d row groups, want 2 (of at most %d rows)", n, tb.opts.RowGroupRows)
	}
}

// A lookup of ids in key-index blocks a few apart reads those blocks in one
// request (the bytes between are read and dropped), and blocks further apart
// than blockGap in one request each; every id is still found where it is.
func TestLookupReadsNearbyIndexBlocksInOneRequest(t *testing.T) {
	ctx := context.Background()
	f, tb, m := faultyTable(t, 1, 100_000)
	frag := m.Fragments[0]
	top, err := tb.indexTopOf(ctx, frag)
	if err != nil {
		t.Fatal(err)
	}
	blocks := top.blocks
	far := slices.IndexFunc(blocks, func(b indexBlockRef) bool { return b.off > blocks[13].off+blocks[13].n+blockGap })
	if far < 0 {
		t.Fatalf("an index of %d blocks (%d bytes) has none %d bytes past block 13", len(blocks), frag.Index.Top, blockGap)
	}
	// The first id of blocks 10 and 13 (two blocks between: one read) and of a
	// block more than blockGap past 13 (a read of its own).
	ids := []string{blocks[10].first, blocks[13].first, blocks[far].first}
	f.ResetCounters()
	hits, err := tb.lookupSorted(ctx, frag, ids)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Requests(objstore.OpGetRange); got != 2 {
		t.Fatalf("a lookup in blocks 10, 13 and %d made %d ranged reads (%v), want 2", far, got, f.RequestCounts())
	}
	for i, h := range hits {
		if want := uint32(blocks[[]int{10, 13, far}[i]].row); !h.found || h.off != want {
			t.Fatalf("id %s: %+v, want found at row %d", ids[i], h, want)
		}
	}
	// Blocks 11 and 12 were read through, not kept: a lookup there reads again.
	f.ResetCounters()
	if _, err := tb.lookupSorted(ctx, frag, []string{blocks[10].first, blocks[11].first}); err != nil {
		t.Fatal(err)
	}
	if got := f.Requests(objstore.OpGetRange); got != 1 {
		t.Fatalf("a lookup in cached block 10 and block 11 made %d ranged reads, want 1", got)
	}
}

// A lookup of many ids in a fragment whose whole key index is small (a merge's
// fragment of a few thousand rows, which every later commit's conflict check
// meets) reads that index in one request, top and blocks together, and no bloom
// filter: the index answers exactly for what the filter costs before its false
// positives. The next lookup reads nothing. A fragment with a larger index still
// has its filter read first.
func TestALookupInASmallKeyIndexReadsItWholeAndNoBloomFilter(t *testing.T) {
	ctx := context.Background()
	f, tb, m := faultyTable(t, 1, 2_000)
	frag := m.Fragments[0]
	if !smallIndex(frag) {
		t.Fatalf("a fragment of 2,000 rows has a key index of %d bytes, more than %d", frag.Index.Bytes, blockGap)
	}
	var ids []string
	for j := 0; j < 2_000; j += 40 {
		ids = append(ids, fmt.Sprintf("f00-%05d", j), fmt.Sprintf("f00-%05d~", j)) // one there, one not
	}
	hits, err := tb.lookupFragment(ctx, m, frag, ids)
	if err != nil {
		t.Fatal(err)
	}
	if got, bloom := f.TotalRequests(), f.Requests(objstore.OpGet); got != 1 || bloom != 0 {
		t.Fatalf("a cold lookup of %d ids made %d requests (%v), want one ranged read of the key index", len(ids), got, f.RequestCounts())
	}
	for i, h := range hits {
		if want := i%2 == 0; h.found != want || want && h.off != uint32(i/2*40) {
			t.Fatalf("id %s: %+v, want found %v at row %d", ids[i], h, want, i/2*40)
		}
	}
	f.ResetCounters()
	if _, err := tb.lookupFragment(ctx, m, frag, []string{"f00-00001", "f00-01999"}); err != nil {
		t.Fatal(err)
	}
	if got := f.TotalRequests(); got != 0 {
		t.Fatalf("a lookup after the index was read whole made %d requests (%v), want 0", got, f.RequestCounts())
	}

	// A block of a small index that fails its check is not kept from the whole
	// read: a lookup there fails as corrupt, a lookup in another block answers.
	raw, _ := tb.bucket.Get(ctx, tb.key(frag.Index.Path))
	top, err := tb.indexTopOf(ctx, frag)
	if err != nil || len(top.blocks) < 2 {
		t.Fatalf("a key index of 2,000 rows: %d blocks, %v; want 2 or more", len(top.blocks), err)
	}
	bad := slices.Clone(raw)
	bad[top.blocks[1].off+2] ^= 0xff
	if err := tb.bucket.Put(ctx, tb.key(frag.Index.Path), bad); err != nil {
		t.Fatal(err)
	}
	cold, err := Open(ctx, tb.bucket, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cold.lookupFragment(ctx, m, frag, []string{top.blocks[1].first}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a lookup in the damaged block: %v, want ErrCorrupt", err)
	}
	if hits, err := cold.lookupFragment(ctx, m, frag, []string{top.blocks[0].first}); err != nil || !hits[0].found {
		t.Fatalf("a lookup in the sound block: %+v, %v", hits, err)
	}

	f, tb, m = faultyTable(t, 1, 100_000)
	if frag = m.Fragments[0]; smallIndex(frag) {
		t.Fatalf("a fragment of 100,000 rows has a key index of %d bytes, at most %d", frag.Index.Bytes, blockGap)
	}
	if _, err := tb.lookupFragment(ctx, m, frag, []string{"f00-00001", "f00-50000", "f00-99999", "x"}); err != nil {
		t.Fatal(err)
	}
	if got := f.Requests(objstore.OpGet); got != 1 {
		t.Fatalf("a lookup of 4 ids in a large index made %d whole-object reads (%v), want its bloom filter's", got, f.RequestCounts())
	}
}

// On file:// (objstore.Bucket.Local) a lookup reads a fragment's key-index blocks
// that lie apart in GetRanges calls of up to localRuns runs (still a ranged read
// each to the counters), and finds every id where it is and none that is not
// there, as the ranged reads sent at once do elsewhere.
func TestALookupOnLocalFilesFindsIdsInBlocksApart(t *testing.T) {
	ctx := context.Background()
	b, err := objstore.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := objstore.NewFaults(rand.NewPCG(1, 2))
	bucket := objstore.WithFaults(b, f)
	if !bucket.Local() {
		t.Fatal("file:// behind a counting Faults is not Local")
	}
	rows := make([]row, 250_000)
	for j := range rows {
		rows[j] = row{fmt.Sprintf("f00-%06d", j), 1, int64(j)}
	}
	mustAppend(t, createTable(t, bucket), rows...)
	tb, err := Open(ctx, bucket, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	m := tb.Latest()
	frag := m.Fragments[0]
	var ids []string
	for j := 0; j < 250_000; j += 15_000 { // blocks more than blockGap apart: a run each, more than localRuns
		ids = append(ids, fmt.Sprintf("f00-%06d", j), fmt.Sprintf("f00-%06d~", j))
	}
	top, err := tb.indexTopOf(ctx, frag)
	if err != nil {
		t.Fatal(err)
	}
	if runs := readRuns(len(ids)/2, func(k int) byteRange {
		b := top.blocks[top.find(ids[2*k])]
		return byteRange{b.off, b.n}
	}, blockGap); len(runs) != len(ids)/2 || len(runs) <= localRuns {
		t.Fatalf("the ids' %d blocks make %d runs, want one each", len(ids)/2, len(runs))
	}
	f.ResetCounters()
	hits, err := tb.lookupSorted(ctx, frag, ids)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Requests(objstore.OpGetRange); got != int64(len(ids)/2) {
		t.Fatalf("a lookup in %d blocks apart counted %d ranged reads, want one each", len(ids)/2, got)
	}
	for i, h := range hits {
		if want := i%2 == 0; h.found != want || want && h.off != uint32(i/2*15_000) {
			t.Fatalf("id %s: %+v, want found %v at row %d", ids[i], h, want, i/2*15_000)
		}
	}
}
