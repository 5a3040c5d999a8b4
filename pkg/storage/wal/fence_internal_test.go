package wal

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

var internalSchema = arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}}, nil)

func idBatch(ids ...string) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, internalSchema)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).AppendValues(ids, nil)
	return b.NewRecordBatch()
}

func memBucket(t *testing.T) *objstore.Bucket {
	t.Helper()
	b, err := objstore.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func openInternal(t *testing.T, b *objstore.Bucket, opts ...Option) *Writer {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	opts = append([]Option{WithLogger(quiet)}, opts...)
	w, err := OpenWriter(context.Background(), b, "rollout/t", "w1", internalSchema, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	return w
}

func appendInternal(ctx context.Context, w *Writer, ids ...string) error {
	rec := idBatch(ids...)
	defer rec.Release()
	return w.Append(ctx, rec)
}

func sealedIDs(t *testing.T, w *Writer) map[string]int {
	t.Helper()
	if _, err := w.Seal(context.Background()); err != nil {
		t.Fatal(err)
	}
	m, err := w.sh.loadLatest(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, g := range m.Generations {
		data, err := readGeneration(context.Background(), w.sh.bucket, GenerationKey(w.sh.dir, g))
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range data.Records {
			ids := rec.Column(0).(*array.String)
			for i := range ids.Len() {
				out[ids.Value(i)]++
			}
		}
	}
	return out
}

// TestFenceOvertakesAStaleWriterThatKeepsWinning: the stale writer takes the first
// position the new writer tries, and the next; the new writer must adopt both and
// claim a wider range above them instead of losing one race after another (which is
// what happened against Azurite with a fence of one position at a time).
func TestFenceOvertakesAStaleWriterThatKeepsWinning(t *testing.T) {
	ctx := context.Background()
	b := memBucket(t)
	a := openInternal(t, b)                              // fence at 1
	if err := appendInternal(ctx, a, "a1"); err != nil { // 2
		t.Fatal(err)
	}
	raced := false
	nb := openInternal(t, b, WithBeforeFence(func() {
		// B has replayed up to 2; A writes 3, 4 and 5 before B's fences. Round 1
		// claims 3 and loses it; round 2 claims 4..5 and loses its top; round 3
		// claims 6..9 and holds it.
		for _, id := range []string{"a2", "a3", "a4"} {
			if err := appendInternal(ctx, a, id); err != nil {
				t.Errorf("stale append before the fence: %v", err)
			}
		}
		raced = true
	}))
	if !raced {
		t.Fatal("hook did not run")
	}
	if got := nb.Stats().LastEntryPosition; got != 9 {
		t.Errorf("new writer's top fence at %d, want 9 (ranges of 1, 2, 4 positions)", got)
	}
	if err := appendInternal(ctx, a, "a-late"); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale append after the fence: %v, want ErrFenced", err)
	}
	got := sealedIDs(t, nb)
	for _, id := range []string{"a1", "a2", "a3", "a4"} {
		if got[id] != 1 {
			t.Errorf("%s sealed %d times, want 1", id, got[id])
		}
	}
	if got["a-late"] != 0 {
		t.Error("a-late was written after the fence")
	}
}

// TestHolesOfAnInterruptedFenceAreFilled: a writer that died after writing the top
// of its fence range but before the positions below leaves holes that its gap_from
// explains. The next writer fills them; a stale writer's entries that landed in them
// meanwhile are replayed, not lost.
func TestHolesOfAnInterruptedFenceAreFilled(t *testing.T) {
	for _, staleWritesIntoHoles := range []bool{false, true} {
		t.Run(map[bool]string{false: "holes stay empty", true: "stale writer fills them"}[staleWritesIntoHoles], func(t *testing.T) {
			ctx := context.Background()
			b := memBucket(t)
			a := openInternal(t, b)                              // epoch 1, fence at 1
			if err := appendInternal(ctx, a, "a1"); err != nil { // 2
				t.Fatal(err)
			}
			// An epoch-2 writer claimed (3, 5] and died after writing only 5.
			sh := a.sh
			if _, err := sh.edit(ctx, nil, "open-dead", func(m *Manifest) (*Manifest, error) {
				n := m.clone()
				n.WriterEpoch++
				return n, nil
			}); err != nil {
				t.Fatal(err)
			}
			data, err := encodeEntry(a.schema, nil, sh.name, "dead-writer", 2, 3)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.PutIfAbsent(ctx, entryKey(sh.dir, sh.name, 5), data); err != nil {
				t.Fatal(err)
			}
			if staleWritesIntoHoles {
				// A is stale but does not know: 3 and 4 are free, its appends land there.
				for _, id := range []string{"a2", "a3"} {
					if err := appendInternal(ctx, a, id); err != nil {
						t.Fatal(err)
					}
				}
			}
			c := openInternal(t, b) // epoch 3
			if err := appendInternal(ctx, a, "a-late"); !errors.Is(err, ErrFenced) {
				t.Fatalf("stale append after the new writer's open: %v, want ErrFenced", err)
			}
			if err := appendInternal(ctx, c, "c1"); err != nil {
				t.Fatal(err)
			}
			got := sealedIDs(t, c)
			want := []string{"a1", "c1"}
			if staleWritesIntoHoles {
				want = append(want, "a2", "a3")
			}
			for _, id := range want {
				if got[id] != 1 {
					t.Errorf("%s sealed %d times, want 1 (all: %v)", id, got[id], got)
				}
			}
			if len(got) != len(want) {
				t.Errorf("sealed %v, want exactly %v", got, want)
			}
		})
	}
}
