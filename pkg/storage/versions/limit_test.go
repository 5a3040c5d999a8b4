package versions

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// TestOversizedVersionIsRefusedUnread: a manifest object over MaxVersionBytes (a
// damaged object, or someone else's) fails its reader with ErrTooLarge naming the
// key, instead of a 64 MiB+ allocation per reader; a version that large is never
// written; an oversized hint is ignored like any unreadable hint.
func TestOversizedVersionIsRefusedUnread(t *testing.T) {
	ctx := context.Background()
	// No per-operation timeout: a 64 MiB put under -race on a loaded machine
	// outlasted the default 60 s, and the time it takes is not what this guards.
	b, err := objstore.Open(ctx, "mem://", objstore.WithOpTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	l := New(b, "t/_versions", "t/_latest_version")
	if _, err := l.Create(ctx, 1, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	huge := bytes.Repeat([]byte(" "), MaxVersionBytes+1)
	if _, err := l.Create(ctx, 2, huge); !errors.Is(err, objstore.ErrTooLarge) {
		t.Fatalf("Create of %d bytes = %v, want ErrTooLarge", len(huge), err)
	}
	if err := b.Put(ctx, l.Key(2), huge); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get(ctx, 2); !errors.Is(err, objstore.ErrTooLarge) || !strings.Contains(err.Error(), l.Key(2)) {
		t.Fatalf("Get of an oversized version = %v, want ErrTooLarge naming %s", err, l.Key(2))
	}
	if err := b.Put(ctx, "t/_latest_version", append([]byte("1"), bytes.Repeat([]byte(" "), maxHintBytes)...)); err != nil {
		t.Fatal(err)
	}
	if v, err := l.Latest(ctx, 0); err != nil || v != 2 {
		t.Fatalf("Latest with an oversized hint = %d, %v; want 2 (found by listing and probing)", v, err)
	}
}
