package table

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"k8s.io/utils/clock"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/rowkey"
)

// setClock is the real clock (timers, sleeps) with a settable Now: object ages are
// the store's modification times, which tests cannot set, so tests move "now"
// instead.
type setClock struct {
	clock.RealClock
	mu  sync.Mutex
	now time.Time
}

func newSetClock(now time.Time) *setClock { return &setClock{now: now} }

func (c *setClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *setClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// cleaner opens a handle on the table at dir whose clock says now.
func cleaner(t testing.TB, b *objstore.Bucket, dir string, now time.Time) *Table {
	t.Helper()
	tb, err := Open(context.Background(), b, dir, WithClock(newSetClock(now)), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// tableFiles lists the objects under dir's data/ and _deletions/, relative to dir.
func tableFiles(t testing.TB, b *objstore.Bucket, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, sub := range []string{dataDir, deletesDir} {
		objs, err := b.List(context.Background(), dir+"/"+sub+"/")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			out[strings.TrimPrefix(o.Key, dir+"/")] = o.Size
		}
	}
	return out
}

// references is the union of the paths versions vs reference.
func references(t testing.TB, tb *Table, vs []uint64) map[string]bool {
	t.Helper()
	refs := &refSet{paths: map[string]bool{}}
	for _, v := range vs {
		m, err := tb.Load(context.Background(), v)
		if err != nil {
			t.Fatal(err)
		}
		refs.add(m)
	}
	return refs.paths
}

func versionRange(from, to uint64) []uint64 {
	var out []uint64
	for v := from; v <= to; v++ {
		out = append(out, v)
	}
	return out
}

func mustVersions(t testing.TB, tb *Table) []uint64 {
	t.Helper()
	vs, err := tb.Versions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func mustCleanup(t testing.TB, tb *Table, r Retention) CleanupResult {
	t.Helper()
	res, err := tb.Cleanup(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// scanRows is liveRows returning its error, for goroutines.
func scanRows(ctx context.Context, tb *Table, m *Manifest) (map[string]row, error) {
	out := map[string]row{}
	err := tb.Scan(ctx, m, ScanOptions{Columns: []string{rowkey.IDColumn, rowkey.SeqColumn, "value"}}, func(rec arrow.RecordBatch, _ string) error {
		ids := rec.Column(0).(*array.String)
		seqs := rec.Column(1).(*array.Uint64)
		vals := rec.Column(2).(*array.Int64)
		for i := 0; i < ids.Len(); i++ {
			id := ids.Value(i)
			if _, dup := out[id]; dup {
				return fmt.Errorf("id %s is live twice", id)
			}
			out[id] = row{id: id, seq: seqs.Value(i), value: vals.Value(i)}
		}
		return nil
	})
	return out, err
}

// Retention keeps the newest KeepVersions, every version younger than KeepAge and
// the one that was the newest when the age window opened; it prunes the rest bottom
// first, and deletes exactly the old files that no kept version references.
func TestCleanupKeepsTheNewestAndRecentVersionsAndDeletesWhatOnlyPrunedOnesReference(t *testing.T) {
	for _, d := range []objstoretest.Driver{{Name: "mem", Open: objstoretest.Mem}, {Name: "file", Open: objstoretest.File}} {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			b := d.Open(t)
			tb := createTable(t, b)
			states := map[uint64]map[string]row{1: {}}
			commit := func(rows ...row) {
				m := mustAppend(t, tb, rows...)
				states[m.Version] = liveRows(t, tb, m)
				time.Sleep(3 * time.Millisecond) // distinct modification times on any file system
			}
			// Version 2 writes k1..k9; every later version rewrites one of them,
			// so each supersedes the deletion vector of version 2's fragment.
			var first []row
			for i := range 10 {
				first = append(first, row{fmt.Sprint("k", i), 0, 0})
			}
			commit(first...)
			next := func(seq uint64) {
				commit(row{fmt.Sprint("k", seq), seq, int64(seq)}, row{fmt.Sprint("id", seq), seq, int64(seq)})
			}
			for seq := uint64(2); seq <= 6; seq++ { // versions 3..7
				next(seq)
			}
			time.Sleep(20 * time.Millisecond)
			boundary := time.Now()
			time.Sleep(20 * time.Millisecond)
			for seq := uint64(7); seq <= 9; seq++ { // versions 8..10
				next(seq)
			}
			before := tableFiles(t, b, "rollout/t")

			// The age window opens at the boundary: 8..10 are younger, 7 was the
			// newest then (a reader may have loaded it within the window), 1..6 go
			// although KeepVersions alone would keep only 9 and 10.
			c := cleaner(t, b, "rollout/t", boundary.Add(time.Hour))
			res := mustCleanup(t, c, Retention{KeepVersions: 2, KeepAge: time.Hour, SafetyWindow: time.Hour})
			if got := mustVersions(t, c); !slices.Equal(got, versionRange(7, 10)) || res.OldestVersion != 7 || res.ManifestsDeleted != 6 {
				t.Fatalf("versions %v after %+v; want 7..10 kept, 6 manifests deleted", got, res)
			}
			kept := references(t, c, versionRange(7, 10))
			after := tableFiles(t, b, "rollout/t")
			var wantDeleted int
			var wantBytes int64
			for p, size := range before {
				_, left := after[p]
				switch {
				case kept[p] && !left:
					t.Fatalf("%s is referenced by a kept version and was deleted", p)
				case !kept[p] && left:
					t.Fatalf("%s is referenced only by pruned versions and older than the window, and was kept", p)
				case !kept[p]:
					wantDeleted++
					wantBytes += size
				}
			}
			if wantDeleted == 0 || res.FilesDeleted != wantDeleted || res.BytesDeleted != wantBytes {
				t.Fatalf("result %+v, want %d files of %d bytes deleted (and some)", res, wantDeleted, wantBytes)
			}
			for v := uint64(7); v <= 10; v++ {
				m, err := c.Load(ctx, v)
				if err != nil {
					t.Fatal(err)
				}
				if got := liveRows(t, c, m); !maps.Equal(got, states[v]) {
					t.Fatalf("version %d reads %v, want %v", v, got, states[v])
				}
			}
			if again := mustCleanup(t, c, Retention{KeepVersions: 2, KeepAge: time.Hour, SafetyWindow: time.Hour}); again != (CleanupResult{OldestVersion: 7}) {
				t.Fatalf("a second cleanup at the same time did %+v, want nothing", again)
			}

			// Much later only the count protects versions: the newest 3, then the
			// newest alone (it is always kept, whatever KeepVersions says).
			later := cleaner(t, b, "rollout/t", boundary.Add(10*time.Hour))
			res = mustCleanup(t, later, Retention{KeepVersions: 3, KeepAge: time.Hour, SafetyWindow: time.Hour})
			if got := mustVersions(t, later); !slices.Equal(got, versionRange(8, 10)) || res.ManifestsDeleted != 1 {
				t.Fatalf("versions %v after %+v; want 8..10", got, res)
			}
			res = mustCleanup(t, later, Retention{KeepVersions: 1, KeepAge: time.Hour, SafetyWindow: time.Hour})
			if got := mustVersions(t, later); !slices.Equal(got, []uint64{10}) || res.OldestVersion != 10 {
				t.Fatalf("versions %v after %+v; want 10 alone", got, res)
			}
			kept = references(t, later, []uint64{10})
			for p := range tableFiles(t, b, "rollout/t") {
				if !kept[p] {
					t.Fatalf("%s left, referenced by no version", p)
				}
			}
			if got := liveRows(t, later, later.Latest()); !maps.Equal(got, states[10]) {
				t.Fatalf("newest version reads %v, want %v", got, states[10])
			}
		})
	}
}

// A transaction stages its files before any manifest references them. One that
// prepared before a cleanup and commits after it must stay readable as long as it
// is shorter than the safety window; the control shows the window is what saves it.
func TestCleanupKeepsFilesOfATransactionThatCommitsAfterIt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		window   time.Duration
		readable bool
	}{{"window longer than the transaction", time.Hour, true}, {"window shorter than the transaction", 10 * time.Minute, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			b := memBucket(t)
			tb := createTable(t, b)
			mustAppend(t, tb, row{"a", 1, 1}, row{"b", 1, 1})
			base := mustAppend(t, tb, row{"a", 2, 2})
			rec := batch(row{"a", 3, 3}, row{"c", 3, 3}) // replaces a: stages a deletion vector too
			defer rec.Release()
			x, err := tb.Prepare(ctx, base, Append{Records: []arrow.RecordBatch{rec}})
			if err != nil {
				t.Fatal(err)
			}
			// The cleanup runs 30 minutes after the staging.
			mustCleanup(t, cleaner(t, b, "rollout/t", time.Now().Add(30*time.Minute)),
				Retention{KeepVersions: 1, KeepAge: time.Nanosecond, SafetyWindow: tc.window})
			m, err := x.Commit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			fresh, err := Open(ctx, b, "rollout/t")
			if err != nil {
				t.Fatal(err)
			}
			got, err := scanRows(ctx, fresh, m)
			switch {
			case tc.readable && err != nil:
				t.Fatalf("version %d committed after the cleanup is unreadable: %v", m.Version, err)
			case tc.readable && (len(got) != 3 || got["a"].value != 3):
				t.Fatalf("rows %v", got)
			case !tc.readable && !errors.Is(err, objstore.ErrNotFound):
				t.Fatalf("read with the staged files deleted: %v, want not found", err)
			}
		})
	}
}

// A version that lands while Cleanup lists the files is read after the listing, so
// files only it references survive even when they look old (here: a transaction
// staged two hours before, by the cleaner's clock).
func TestCleanupReadsVersionsCommittedWhileItListsFiles(t *testing.T) {
	ctx := context.Background()
	clean := memBucket(t)
	tb := createTable(t, clean)
	mustAppend(t, tb, row{"a", 1, 1}, row{"b", 1, 1})
	mustAppend(t, tb, row{"a", 2, 2})
	base := mustAppend(t, tb, row{"b", 3, 3}) // supersedes a deletion vector: garbage
	rec := batch(row{"a", 4, 4}, row{"c", 4, 4})
	defer rec.Release()
	x, err := tb.Prepare(ctx, base, Append{Records: []arrow.RecordBatch{rec}})
	if err != nil {
		t.Fatal(err)
	}
	faults := objstore.NewFaults(nil)
	var committed *Manifest
	hook := faults.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpList}, KeyPrefix: "rollout/t/" + deletesDir + "/", Times: 1,
		Before: func(context.Context, objstore.Op, string) {
			if committed, err = x.Commit(ctx); err != nil {
				t.Error(err)
			}
		}})
	c := cleaner(t, objstore.WithFaults(clean, faults), "rollout/t", time.Now().Add(2*time.Hour))
	res := mustCleanup(t, c, Retention{KeepVersions: 1, KeepAge: time.Hour, SafetyWindow: time.Hour})
	if hook.Fired() != 1 || committed == nil {
		t.Fatalf("the commit did not land during the listing (fired %d)", hook.Fired())
	}
	if res.FilesDeleted == 0 || res.ManifestsDeleted == 0 {
		t.Fatalf("cleanup %+v deleted nothing: the test proves nothing", res)
	}
	fresh, err := Open(ctx, clean, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	if got := liveRows(t, fresh, committed); len(got) != 3 || got["a"].value != 4 || got["b"].value != 3 {
		t.Fatalf("rows %v", got)
	}
}

// Cleanup deletes only Tidemark's own unreferenced files under data/ and _deletions/:
// never the WAL, the hint, anything else under the table directory, or another table.
func TestCleanupTouchesOnlyItsOwnFiles(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	tb := createTable(t, b)
	mustAppend(t, tb, row{"a", 1, 1})
	mustAppend(t, tb, row{"a", 2, 2})
	foreign := []string{
		"rollout/t/_wal/w1/entries/00000000000000000001.arrow",
		"rollout/t/_wal/w1/_manifests/00000000000000000001.json",
		"rollout/t/_wal/w1/gen/0123456789abcdef_gen_1.arrow",
		"rollout/t/_wal/w1/data/x.parquet",
		"rollout/t/data/notes.txt",
		"rollout/t/data/sub/x.parquet",
		"rollout/t/data/.parquet",
		"rollout/t/_deletions/x.tmp",
		"rollout/t/other/y.parquet",
		"rollout/t2/data/z.parquet",
		"rollout/t2/_deletions/z.bin",
	}
	orphans := []string{ // a crashed transaction's files
		"rollout/t/data/0b0e8ad2-5d5f-4c48-9f4c-1f1b1f9e0a01.parquet",
		"rollout/t/data/0b0e8ad2-5d5f-4c48-9f4c-1f1b1f9e0a01.bloom",
		"rollout/t/_deletions/5b1d2f0e-8f61-4b7e-a1f4-0c5d3a9b7e11.bin",
	}
	for _, k := range append(slices.Clone(foreign), orphans...) {
		if err := b.Put(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	c := cleaner(t, b, "rollout/t", time.Now().Add(2*time.Hour))
	res := mustCleanup(t, c, Retention{KeepVersions: 1, KeepAge: time.Hour, SafetyWindow: time.Hour})
	for _, k := range append(foreign, "rollout/t/"+latestHint) {
		if ok, err := b.Exists(ctx, k); err != nil || !ok {
			t.Fatalf("%s: exists %v, %v; Cleanup must not touch it", k, ok, err)
		}
	}
	for _, k := range orphans {
		if ok, err := b.Exists(ctx, k); err != nil || ok {
			t.Fatalf("orphan %s: exists %v, %v; want deleted", k, ok, err)
		}
	}
	// Every file of the kept version 3 is referenced: only the orphans go.
	if res.FilesDeleted != 3 || res.BytesDeleted != 3 || res.ManifestsDeleted != 2 {
		t.Fatalf("result %+v, want the 3 orphans and versions 1 and 2 deleted", res)
	}
	if got := liveRows(t, c, c.Latest()); len(got) != 1 || got["a"].value != 2 {
		t.Fatalf("rows %v", got)
	}
}

// A handle whose cached version was pruned, or that starts from a hint below the
// oldest version, still finds the newest; Load of a pruned version says it was
// removed by retention; Create of a pruned table opens it and never writes a new
// version 1.
func TestPrunedTableStillOpensAndFindsTheNewestVersion(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	tb := createTable(t, b)
	stale, err := Open(ctx, b, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 9; seq++ {
		mustAppend(t, tb, row{"a", seq, int64(seq)})
	}
	c := cleaner(t, b, "rollout/t", time.Now().Add(2*time.Hour))
	mustCleanup(t, c, Retention{KeepVersions: 3, KeepAge: time.Hour, SafetyWindow: time.Hour})
	if got := mustVersions(t, c); !slices.Equal(got, versionRange(8, 10)) {
		t.Fatalf("versions %v, want 8..10", got)
	}
	if stale.Latest().Version != 1 {
		t.Fatalf("stale handle at %d", stale.Latest().Version)
	}
	if v, err := stale.LatestVersion(ctx); err != nil || v != 10 {
		t.Fatalf("LatestVersion from a pruned version = %d, %v; want 10", v, err)
	}
	if m, err := stale.Refresh(ctx); err != nil || m.Version != 10 {
		t.Fatalf("Refresh from a pruned version = %v, %v; want version 10", m, err)
	}
	_, err = stale.Load(ctx, 3)
	if !errors.Is(err, ErrVersionRemoved) || !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), "removed by retention") {
		t.Fatalf("Load of a pruned version: %v", err)
	}
	if _, err = stale.Load(ctx, 11); !errors.Is(err, objstore.ErrNotFound) || errors.Is(err, ErrVersionRemoved) {
		t.Fatalf("Load of a version not written yet: %v", err)
	}

	// A hint written late by a stalled committer, below the oldest version, and no
	// hint at all: Open and Create find the newest either way.
	for _, hint := range []string{"2\n", ""} {
		if hint == "" {
			if err := b.Delete(ctx, "rollout/t/"+latestHint); err != nil {
				t.Fatal(err)
			}
		} else if err := b.Put(ctx, "rollout/t/"+latestHint, []byte(hint)); err != nil {
			t.Fatal(err)
		}
		o, err := Open(ctx, b, "rollout/t")
		if err != nil || o.Latest().Version != 10 {
			t.Fatalf("hint %q: Open = %v, %v", hint, o, err)
		}
		cr, err := Create(ctx, b, "rollout/t", testSchema)
		if err != nil || cr.Latest().Version != 10 {
			t.Fatalf("hint %q: Create = %v, %v; want the table at version 10", hint, cr, err)
		}
		if got := mustVersions(t, cr); !slices.Equal(got, versionRange(8, 10)) {
			t.Fatalf("hint %q: versions %v after Create, want 8..10 (no new version 1)", hint, got)
		}
		other := arrow.NewSchema([]arrow.Field{
			{Name: rowkey.IDColumn, Type: arrow.BinaryTypes.String},
			{Name: rowkey.SeqColumn, Type: arrow.PrimitiveTypes.Uint64},
		}, nil)
		if _, err := Create(ctx, b, "rollout/t", other); !errors.Is(err, ErrSchemaMismatch) {
			t.Fatalf("hint %q: Create with another schema: %v", hint, err)
		}
	}
	// The stale handle commits on top of the newest.
	if m := mustAppend(t, stale, row{"b", 1, 1}); m.Version != 11 {
		t.Fatalf("commit through the stale handle made version %d, want 11", m.Version)
	}
}

func TestRetentionDefaultsAndRefusals(t *testing.T) {
	r, err := Retention{}.withDefaults()
	if err != nil || r != (Retention{KeepVersions: 10, KeepAge: time.Hour, SafetyWindow: time.Hour}) {
		t.Fatalf("defaults %+v, %v", r, err)
	}
	tb := createTable(t, memBucket(t))
	for _, bad := range []Retention{{KeepVersions: -1}, {KeepAge: -time.Second}, {SafetyWindow: -time.Second}} {
		if _, err := tb.Cleanup(context.Background(), bad); err == nil {
			t.Fatalf("Cleanup(%+v) accepted", bad)
		}
	}
}

// Committers and a cleaner run at once: every version present at any moment reads
// fully and as the model says, pruning never loses a committed version's files, and
// after a final cleanup (everything old) exactly the referenced files are left.
//
// The safety window must be longer than any transaction. Rather than hope a window
// of real time is long enough on a loaded machine, the cleaner's clock stands a
// window after the start of the oldest transaction in flight: the window is then
// exactly as long as needed, and everything older is deleted at once.
func TestCleanupWithConcurrentCommittersLosesNothing(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	createTable(t, b)
	const window = time.Millisecond
	var (
		seq      atomic.Uint64
		mu       sync.Mutex
		commits  = map[uint64][]row{}  // version -> rows it added
		inFlight = map[int]time.Time{} // committer -> start of its transaction
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	cleanerNow := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		for _, start := range inFlight {
			if start.Before(now) {
				now = start
			}
		}
		return now.Add(window)
	}
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			tb, err := Open(ctx, b, "rollout/t")
			if err != nil {
				t.Error(err)
				return
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				var rows []row
				for range 1 + rng.IntN(3) {
					s := seq.Add(1)
					rows = append(rows, row{fmt.Sprint("id", rng.IntN(20)), s, int64(s)})
				}
				rec := batch(rows...)
				mu.Lock()
				inFlight[w] = time.Now() // before the transaction reads its base
				mu.Unlock()
				m, err := appendRows(ctx, tb, Append{Records: []arrow.RecordBatch{rec}})
				rec.Release()
				mu.Lock()
				delete(inFlight, w)
				if err == nil {
					commits[m.Version] = rows
				}
				mu.Unlock()
				if err != nil && !errors.Is(err, ErrTooManyWriters) {
					t.Errorf("committer %d: %v", w, err)
					return
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			}
		}()
	}
	seen := map[uint64]map[string]row{} // what each version read while it was kept
	var total CleanupResult
	c, err := Open(ctx, b, "rollout/t", WithClock(&funcClock{now: cleanerNow}), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	landed := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(commits)
	}
	giveUp := time.Now().Add(30 * time.Second)
	for round := 0; (round < 20 || landed() < 40) && time.Now().Before(giveUp) && !t.Failed(); round++ {
		res, err := c.Cleanup(ctx, Retention{KeepVersions: 1 + rng.IntN(3), KeepAge: time.Nanosecond, SafetyWindow: window})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		total.ManifestsDeleted += res.ManifestsDeleted
		total.FilesDeleted += res.FilesDeleted
		vs := mustVersions(t, c)
		for _, v := range vs {
			m, err := c.Load(ctx, v)
			if err != nil {
				t.Fatalf("round %d: version %d listed but unreadable: %v", round, v, err)
			}
			got, err := scanRows(ctx, c, m)
			if err != nil {
				t.Fatalf("round %d: version %d (kept: %v) unreadable: %v", round, v, vs, err)
			}
			if prev, ok := seen[v]; ok && !maps.Equal(prev, got) {
				t.Fatalf("version %d read differently", v)
			}
			seen[v] = got
		}
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	if total.ManifestsDeleted == 0 || total.FilesDeleted == 0 {
		t.Fatalf("the cleanups deleted %+v: the test proves nothing", total)
	}

	// The model: version v holds, per id, the newest row of the commits up to v.
	var versions []uint64
	for v := range commits {
		versions = append(versions, v)
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	model := map[uint64]map[string]row{1: {}}
	state := map[string]row{}
	for i, v := range versions {
		if want := uint64(i + 2); v != want {
			t.Fatalf("committed versions %v are not dense from 2", versions)
		}
		for _, r := range commits[v] {
			if cur, ok := state[r.id]; !ok || r.seq > cur.seq {
				state[r.id] = r
			}
		}
		model[v] = maps.Clone(state)
	}
	for v, got := range seen {
		if !maps.Equal(got, model[v]) {
			t.Fatalf("version %d read %v while kept, model %v", v, got, model[v])
		}
	}

	// Everything is old now: the newest 3 versions are left, and exactly the files
	// they reference.
	final := cleaner(t, b, "rollout/t", time.Now().Add(2*time.Hour))
	mustCleanup(t, final, Retention{KeepVersions: 3, KeepAge: time.Hour, SafetyWindow: time.Hour})
	newest := versions[len(versions)-1]
	vs := mustVersions(t, final)
	if !slices.Equal(vs, versionRange(newest-2, newest)) {
		t.Fatalf("versions %v left, want the newest 3 up to %d", vs, newest)
	}
	refs := references(t, final, vs)
	files := tableFiles(t, b, "rollout/t")
	for p := range files {
		if !refs[p] {
			t.Fatalf("unreferenced old file %s left", p)
		}
	}
	for p := range refs {
		if _, ok := files[p]; !ok {
			t.Fatalf("referenced file %s deleted", p)
		}
	}
	for _, v := range vs {
		m, err := final.Load(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		if got := liveRows(t, final, m); !maps.Equal(got, model[v]) {
			t.Fatalf("version %d reads %v, model %v", v, got, model[v])
		}
	}
	t.Logf("%d commits, %d versions read while kept, cleanups deleted %d manifests and %d files",
		len(versions), len(seen), total.ManifestsDeleted, total.FilesDeleted)
}

// funcClock is the real clock with Now from a function.
type funcClock struct {
	clock.RealClock
	now func() time.Time
}

func (c *funcClock) Now() time.Time                  { return c.now() }
func (c *funcClock) Since(t time.Time) time.Duration { return c.now().Sub(t) }

// A transaction holds the version it prepared against as its base and commits the
// next one with put-if-absent. Retention must not prune that next version while the
// transaction may still commit (it is younger than the safety window, whatever
// KeepAge says): the commit would find its key free, write a version below the
// oldest one, and report success for rows no reader ever sees.
func TestCleanupNeverPrunesAVersionATransactionMayCommitOnTopOf(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	tb := createTable(t, b)
	base := mustAppend(t, tb, row{"a", 1, 1})
	rec := batch(row{"b", 10, 10})
	defer rec.Release()
	x, err := tb.Prepare(ctx, base, Append{Records: []arrow.RecordBatch{rec}, Shard: "w1", Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	other, err := Open(ctx, b, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(2); seq <= 5; seq++ {
		mustAppend(t, other, row{"a", seq, int64(seq)}) // versions 3..6
	}
	// Half an hour later, with a retention age of nothing and a one-hour window.
	c := cleaner(t, b, "rollout/t", time.Now().Add(30*time.Minute))
	mustCleanup(t, c, Retention{KeepVersions: 1, KeepAge: time.Nanosecond, SafetyWindow: time.Hour})
	if got := mustVersions(t, c); got[0] > base.Version+1 {
		t.Fatalf("versions %v: version %d, the one after the transaction's base, was pruned", got, base.Version+1)
	}
	m, err := x.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != 7 {
		t.Fatalf("the transaction committed version %d, want 7 (on top of the newest)", m.Version)
	}
	fresh, err := Open(ctx, b, "rollout/t")
	if err != nil {
		t.Fatal(err)
	}
	if got := liveRows(t, fresh, fresh.Latest()); len(got) != 2 || got["b"].value != 10 || fresh.Latest().Watermark("w1") != 1 {
		t.Fatalf("newest version %d: rows %v, watermark %d", fresh.Latest().Version, got, fresh.Latest().Watermark("w1"))
	}
}
