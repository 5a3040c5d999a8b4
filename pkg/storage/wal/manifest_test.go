package wal_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// TestUndecodableManifestsAreRefusedClearly: a torn or foreign manifest halts with
// the object's name; a newer format is refused with "upgrade", not misread.
func TestUndecodableManifestsAreRefusedClearly(t *testing.T) {
	key := testDir + "/_wal/" + testShard + "/_manifests/00000000000000000001.json"
	for _, c := range []struct {
		name, body string
		want       error
	}{
		{"garbage", "{not json", wal.ErrCorrupt},
		{"wrong version number", `{"format_version":1,"version":7,"shard":"w1","writer_epoch":1}`, wal.ErrCorrupt},
		{"another shard's", `{"format_version":1,"version":1,"shard":"w2","writer_epoch":1}`, wal.ErrCorrupt},
		{"generation above current", `{"format_version":1,"version":1,"shard":"w1","writer_epoch":1,"current_generation":1,
			"generations":[{"generation":2,"path":"x"}]}`, wal.ErrCorrupt},
		{"newer format", `{"format_version":99,"version":1}`, wal.ErrUnsupportedFormat},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			b := objstoretest.Mem(t)
			if err := b.Put(ctx, key, []byte(c.body)); err != nil {
				t.Fatal(err)
			}
			_, err := wal.LoadShard(ctx, b, testDir, testShard)
			if !errors.Is(err, c.want) {
				t.Fatalf("load: %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), key) {
				t.Errorf("error %q does not name %s", err, key)
			}
			if _, err := wal.OpenWriter(ctx, b, testDir, testShard, inputSchema); !errors.Is(err, c.want) {
				t.Errorf("open: %v, want %v", err, c.want)
			}
		})
	}
}
