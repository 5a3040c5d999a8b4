package store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

func TestAddSealReadAcrossWorkers(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w1, w2 := newStores(t, b, "w1"), newStores(t, b, "w2")
	createGeneric(t, w1, "g")
	s1, s2 := open(t, w1, "g"), open(t, w2, "g")

	first := rows(t, s1, "a", 1, "b", 2)
	defer first.Release()
	token, err := s1.AppendAfter(ctx, first, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := values(t, s1); len(got) != 0 {
		t.Fatalf("unsealed rows visible: %v", got)
	}
	if _, err := s1.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	// A newer b from another shard: newer because its writer saw the first write
	// (the causal token a client passes as ?after=). Without it, two writers in the
	// same millisecond may order the two writes either way.
	second := rows(t, s2, "b", 20, "c", 30)
	defer second.Release()
	if _, err := s2.AppendAfter(ctx, second, token); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*Store{"w1": s1, "w2": s2} {
		got := values(t, s)
		if len(got) != 3 || got["a"] != 1 || got["b"] != 20 || got["c"] != 30 {
			t.Fatalf("%s sees %v, want a=1 b=20 c=30", name, got)
		}
		rec, err := s.Get(ctx, "b")
		if err != nil || rec == nil {
			t.Fatalf("%s get b: %v %v", name, rec, err)
		}
		if v := rec.Column(1).(*array.Int64).Value(0); v != 20 {
			t.Fatalf("%s get b = %d, want 20", name, v)
		}
		rec.Release()
		if rec, err := s.Get(ctx, "zz"); err != nil || rec != nil {
			t.Fatalf("%s get of a missing id: %v %v", name, rec, err)
		}
	}
	// A worker that only reads never creates a shard of its own.
	w3 := newStores(t, b, "w3")
	s3 := open(t, w3, "g")
	values(t, s3)
	if _, ok := s3.Snapshot().WAL.Shards["w3"]; ok {
		t.Fatal("a read-only worker created a WAL shard")
	}
}

func TestListOffsetLimitAndFilter(t *testing.T) {
	ctx := context.Background()
	ss := newStores(t, objstoretest.Mem(t), "w1")
	createGeneric(t, ss, "g")
	s := open(t, ss, "g")
	for i := 0; i < 10; i++ {
		appendRows(t, s, fmt.Sprintf("r%02d", i), i)
	}
	if _, err := s.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	even := func(rec arrow.RecordBatch) ([]bool, error) {
		v := rec.Column(1).(*array.Int64)
		out := make([]bool, v.Len())
		for i := range out {
			out[i] = v.Value(i)%2 == 0
		}
		return out, nil
	}
	recs, err := s.List(ctx, ListOptions{Offset: 1, Limit: 2, Filter: even})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, r := range recs {
		got = append(got, r.Column(1).(*array.Int64).Value(0))
		r.Release()
	}
	if fmt.Sprint(got) != "[2 4]" {
		t.Fatalf("offset 1 limit 2 of even values = %v, want [2 4]", got)
	}
}

func TestReadsRefuseAboveThePendingThreshold(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	ss := NewStores(Config{Bucket: b, Shard: "w1", Logger: quiet(), SnapshotTTL: -1, WarnGenerations: 1, RefuseGenerations: 3}, 0)
	defer ss.Close(ctx)
	createGeneric(t, ss, "g")
	s := open(t, ss, "g")
	for i := 0; i < 4; i++ {
		appendRows(t, s, fmt.Sprint(i), i)
		if _, err := s.Seal(ctx); err != nil {
			t.Fatal(err)
		}
		_, err := s.List(ctx, ListOptions{})
		if i < 3 && err != nil {
			t.Fatalf("%d pending: %v", i+1, err)
		}
		if i == 3 && !errors.Is(err, ErrOverloaded) {
			t.Fatalf("4 pending over a refuse threshold of 3: %v, want ErrOverloaded", err)
		}
	}
	if _, err := s.Get(ctx, "0"); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("get: %v, want ErrOverloaded", err)
	}
}

func TestCreateOpenDelete(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	ss := newStores(t, b, "w1")
	createGeneric(t, ss, "g")
	if _, err := ss.Create(ctx, registry.Entry{Kind: registry.KindGeneric, Name: "g", Schema: []byte(testSpec)}); !errors.Is(err, registry.ErrExists) {
		t.Fatalf("duplicate create: %v, want ErrExists", err)
	}
	if _, _, err := ss.Open(ctx, registry.KindRollout, "g"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("open of the other kind: %v, want ErrNotFound", err)
	}
	s := open(t, ss, "g")
	appendRows(t, s, "a", 1)
	other := newStores(t, b, "w2")
	so := open(t, other, "g")
	if err := ss.Delete(ctx, registry.KindGeneric, "g"); err != nil {
		t.Fatal(err)
	}
	rec := rows(t, s, "b", 2)
	defer rec.Release()
	if err := s.Append(ctx, rec); !errors.Is(err, ErrDeleted) {
		t.Fatalf("append through the deleting worker's old handle: %v, want ErrDeleted", err)
	}
	// Another worker's handle learns of the delete at its next refresh.
	if _, err := so.List(ctx, ListOptions{}); !errors.Is(err, ErrDeleted) {
		t.Fatalf("read through another worker's handle: %v, want ErrDeleted", err)
	}
	if err := so.Append(ctx, rec); !errors.Is(err, ErrDeleted) {
		t.Fatalf("append through another worker's handle: %v, want ErrDeleted", err)
	}
	if objs, _ := b.List(ctx, "generic/g@"); len(objs) != 0 {
		t.Fatalf("objects left after delete: %v", objs)
	}
	if _, _, err := ss.Open(ctx, registry.KindGeneric, "g"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("open after delete: %v", err)
	}
	// The name can be created again, empty.
	createGeneric(t, ss, "g")
	if got := values(t, open(t, ss, "g")); len(got) != 0 {
		t.Fatalf("recreated store has rows %v", got)
	}
}

func TestEvictedHandlesCloseAfterTheirLastUser(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	ss := NewStores(Config{Bucket: b, Shard: "w1", Logger: quiet(), SnapshotTTL: -1}, 1)
	defer ss.Close(ctx)
	createGeneric(t, ss, "a")
	createGeneric(t, ss, "b")
	sa, relA, err := ss.Open(ctx, registry.KindGeneric, "a")
	if err != nil {
		t.Fatal(err)
	}
	appendRows(t, sa, "x", 1)
	_, relB, err := ss.Open(ctx, registry.KindGeneric, "b") // evicts a, still in use
	if err != nil {
		t.Fatal(err)
	}
	defer relB()
	appendRows(t, sa, "y", 2) // a's handle keeps working until released
	relA()                    // now a is sealed and closed
	again := open(t, ss, "a")
	if got := values(t, again); len(got) != 2 {
		t.Fatalf("rows after eviction and reopen: %v, want x and y (sealed on close)", got)
	}
}

// Memory is bounded between flush sweeps: a memtable past SealAfterBytes is sealed
// by the add that filled it.
func TestAddsSealOnceTheMemtableIsFull(t *testing.T) {
	ctx := context.Background()
	ss := NewStores(Config{Bucket: objstoretest.Mem(t), Shard: "w1", Logger: quiet(), SnapshotTTL: -1, SealAfterBytes: 1}, 0)
	defer ss.Close(ctx)
	createGeneric(t, ss, "g")
	s := open(t, ss, "g")
	appendRows(t, s, "a", 1)
	appendRows(t, s, "b", 2)
	if got := values(t, s); len(got) != 2 {
		t.Fatalf("rows visible without an explicit seal: %v, want both (each add filled the memtable)", got)
	}
}

// TestAHandleOfAStoreCreatedAgainRefusesAppends deletes a store through one worker
// and creates it again while another worker holds a handle of the first store.
// Production failure (found by the churn test): the old handle's appends landed in
// the new store's directory, and the next writer of that shard replayed them, so
// rows of the deleted store came back in the new one.
func TestAHandleOfAStoreCreatedAgainRefusesAppends(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	w1, w2 := newStores(t, b, "w1"), newStores(t, b, "w2")
	createGeneric(t, w1, "g")
	stale := open(t, w2, "g")
	appendRows(t, stale, "old", 1)
	if err := w1.Delete(ctx, registry.KindGeneric, "g"); err != nil {
		t.Fatal(err)
	}
	createGeneric(t, w1, "g")
	rec := rows(t, stale, "older", 2)
	defer rec.Release()
	if err := stale.Append(ctx, rec); !errors.Is(err, ErrDeleted) {
		t.Fatalf("append through a handle of the deleted store: %v, want ErrDeleted", err)
	}
	fresh := open(t, w1, "g")
	if got := values(t, fresh); len(got) != 0 {
		t.Fatalf("the store created again holds %v", got)
	}
}
