package registry

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// TestOversizedRegistryObjectIsRefusedUnread: a registry object over maxEntryBytes
// fails Get with ErrTooLarge naming the key instead of being read into memory (the
// scanner reads every registry object on every scan), and Create never writes one.
func TestOversizedRegistryObjectIsRefusedUnread(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	r := New(b)
	big := Entry{Name: "g", Kind: KindGeneric, Schema: []byte(`"` + strings.Repeat("x", maxEntryBytes) + `"`)}
	if _, err := r.Create(ctx, big); !errors.Is(err, objstore.ErrTooLarge) {
		t.Fatalf("Create of an oversized entry = %v, want ErrTooLarge", err)
	}
	if err := b.Put(ctx, key(KindGeneric, "g"), bytes.Repeat([]byte(" "), maxEntryBytes+1)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx, KindGeneric, "g"); !errors.Is(err, objstore.ErrTooLarge) || !strings.Contains(err.Error(), key(KindGeneric, "g")) {
		t.Fatalf("Get of an oversized registry object = %v, want ErrTooLarge naming its key", err)
	}
}
