package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// TestGetMaxRefusesAnObjectOverTheLimit: a manifest, hint or registry record larger
// than its reader's limit fails with ErrTooLarge naming the key instead of being read
// into memory; at the limit it reads whole, and a missing object is still NotFound.
func TestGetMaxRefusesAnObjectOverTheLimit(t *testing.T) {
	objstoretest.ForEachDriver(t, func(t *testing.T, open func(testing.TB) *objstore.Bucket) {
		t.Parallel()
		ctx := context.Background()
		b := open(t)
		const key = "rollout/s/_versions/00000000000000000001.json"
		data := bytes.Repeat([]byte("x"), 1000)
		if err := b.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
		got, err := b.GetMax(ctx, key, 1000)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("GetMax at the limit = %d bytes, %v", len(got), err)
		}
		_, err = b.GetMax(ctx, key, 999)
		if !errors.Is(err, objstore.ErrTooLarge) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "1000 bytes") {
			t.Fatalf("GetMax over the limit = %v, want ErrTooLarge naming %s and its size", err, key)
		}
		if _, err := b.GetMax(ctx, "rollout/s/missing.json", 10); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("GetMax of a missing object = %v, want ErrNotFound", err)
		}
		if _, err := b.GetMax(ctx, key, -1); !errors.Is(err, objstore.ErrTooLarge) {
			t.Fatalf("GetMax with a negative limit = %v, want ErrTooLarge (a negative limit is 0, not none)", err)
		}
	})
}
