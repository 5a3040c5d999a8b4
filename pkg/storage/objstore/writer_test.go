package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// TestAStreamedObjectAppearsWholeAtCloseOnly guards an export's commit point: a
// reader listing or reading the destination while a Parquet file is being
// streamed must not find part of it, and a stream that is aborted, cancelled or
// fails leaves no object a reader would take for a file.
func TestAStreamedObjectAppearsWholeAtCloseOnly(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(t testing.TB) *objstore.Bucket) {
		ctx := context.Background()
		b := open(t)
		// Several MiB in odd-sized pieces: more than one multipart part on the
		// cloud drivers and more than one buffer on file://.
		rng := rand.New(rand.NewPCG(1, 2))
		want := make([]byte, 7<<20+13)
		for i := range want {
			want[i] = byte(rng.IntN(256))
		}
		w, err := b.NewWriter(ctx, "exp/part-00000.parquet")
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(want); {
			n := min(len(want)-off, 1+rng.IntN(900<<10))
			if _, err := w.Write(want[off : off+n]); err != nil {
				t.Fatal(err)
			}
			off += n
			if ok, err := b.Exists(ctx, "exp/part-00000.parquet"); err != nil || ok {
				t.Fatalf("object visible (%v, %v) before Close", ok, err)
			}
		}
		if w.Written() != int64(len(want)) {
			t.Fatalf("Written %d, want %d", w.Written(), len(want))
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := b.Get(ctx, "exp/part-00000.parquet")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read back %d bytes, not the %d written", len(got), len(want))
		}

		// Aborted, and cancelled before Close: nothing appears.
		w, err = b.NewWriter(ctx, "exp/aborted")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(want[:1<<20]); err != nil {
			t.Fatal(err)
		}
		w.Abort()
		cctx, cancel := context.WithCancel(ctx)
		w, err = b.NewWriter(cctx, "exp/cancelled")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(want[:1<<20]); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := w.Close(); err == nil {
			t.Fatal("Close after the context was cancelled succeeded")
		}
		keys := objstoretest.Keys(t, b)
		if len(keys) != 1 || !keys["exp/part-00000.parquet"] {
			t.Fatalf("objects after an aborted and a cancelled stream: %v", keys)
		}
	})
}

// TestAStreamIsOneWriteRequestToTheFaults checks that the fault wrapper sees a
// stream as one put: a rule on the key fails it before anything is written, and
// an error after the write is reported by Close with the object in place (the
// ambiguous outcome a lost answer produces).
func TestAStreamIsOneWriteRequestToTheFaults(t *testing.T) {
	ctx := context.Background()
	f := objstore.NewFaults(rand.NewPCG(5, 6))
	b := objstore.WithFaults(objstoretest.Mem(t), f)
	h := f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPut}, KeyPrefix: "refused"})
	if _, err := b.NewWriter(ctx, "refused/x"); !errors.Is(err, objstore.ErrInjected) {
		t.Fatalf("NewWriter under a failing rule: %v", err)
	}
	h.Remove()
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPut}, KeyPrefix: "ambiguous", AfterWrite: true})
	w, err := b.NewWriter(ctx, "ambiguous/x")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(w, "bytes")
	if err := w.Close(); !errors.Is(err, objstore.ErrInjected) {
		t.Fatalf("Close under an after-write fault: %v", err)
	}
	if got, err := b.Get(ctx, "ambiguous/x"); err != nil || string(got) != "bytes" {
		t.Fatalf("after an after-write fault: %q, %v", got, err)
	}
	if n := f.Requests(objstore.OpPut); n != 2 {
		t.Fatalf("%d put requests counted, want 2 (one per stream)", n)
	}
}
