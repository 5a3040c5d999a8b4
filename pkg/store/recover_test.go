package store

import (
	"context"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// TestSealLeftoversMakesRowsOfACrashedRunVisible: w1 acknowledges rows in two
// stores and dies before sealing them; a new process of w1 runs SealLeftovers at
// startup and is asked nothing else. Production failure: a worker restarted under
// its id replayed a shard only when a request made it open the store's writer, so
// acknowledged rows of an idle store stayed invisible for as long as nobody wrote
// it through that worker. Invariant: after startup every acknowledged row is read
// through another worker, once; a store this worker never wrote is left alone.
func TestSealLeftoversMakesRowsOfACrashedRunVisible(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	crashed := NewStores(Config{Bucket: b, Shard: "w1", Logger: quiet(), SnapshotTTL: -1}, 0) // never closed: the crash
	createGeneric(t, crashed, "a")
	createGeneric(t, crashed, "b")
	createGeneric(t, crashed, "untouched")
	appendRows(t, open(t, crashed, "a"), "x", 1, "y", 2)
	appendRows(t, open(t, crashed, "b"), "z", 3)

	reader := newStores(t, b, "w2")
	for _, name := range []string{"a", "b"} {
		if got := values(t, open(t, reader, name)); len(got) != 0 {
			t.Fatalf("store %s before the restart: %v; its rows are not sealed yet", name, got)
		}
	}
	restarted := newStores(t, b, "w1")
	stores, rows, err := restarted.SealLeftovers(ctx)
	if err != nil || stores != 2 || rows != 3 {
		t.Fatalf("SealLeftovers = %d stores, %d rows, %v; want 2 stores, 3 rows", stores, rows, err)
	}
	want := map[string]map[string]int64{"a": {"x": 1, "y": 2}, "b": {"z": 3}, "untouched": {}}
	for name, w := range want {
		got := values(t, open(t, reader, name))
		if len(got) != len(w) {
			t.Fatalf("store %s after the restart: %v, want %v", name, got, w)
		}
		for id, v := range w {
			if got[id] != v {
				t.Fatalf("store %s after the restart: %v, want %v", name, got, w)
			}
		}
	}
	// Nothing left: a second call seals nothing.
	if stores, rows, err := restarted.SealLeftovers(ctx); err != nil || stores != 0 || rows != 0 {
		t.Fatalf("second SealLeftovers = %d stores, %d rows, %v; want nothing", stores, rows, err)
	}
}
