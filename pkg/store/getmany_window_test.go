package store

import (
	"context"
	"testing"

	"github.com/tidemark-io/tidemark/pkg/data/schema"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore/objstoretest"
)

// A GetMany that reads a blob column reads one id at a time, so a batch of ids
// holds one blob (up to a request body's size) as a single get does, never a
// window of them; one that reads no blob column overlaps a window of reads.
func TestGetManyReadsOneIDAtATimeWhenItReadsABlob(t *testing.T) {
	ss := newStores(t, objstoretest.Mem(t), "w1")
	spec, err := schema.ParseSpec([]byte(`{"columns":[["id",{"type":"string"}],["v",{"type":"int64","nullable":true}],["img",{"type":"binary","blob":true}]]}`))
	if err != nil {
		t.Fatal(err)
	}
	canon, _ := spec.MarshalJSON()
	if _, err := ss.Create(context.Background(), registry.Entry{Kind: registry.KindGeneric, Name: "b", Schema: canon}); err != nil {
		t.Fatal(err)
	}
	blobs := open(t, ss, "b")
	createGeneric(t, ss, "plain")
	plain := open(t, ss, "plain")
	for _, c := range []struct {
		s    *Store
		cols []string
		want bool
	}{
		{blobs, nil, true},
		{blobs, []string{"id", "img"}, true},
		{blobs, []string{"id", "v"}, false},
		{blobs, []string{}, false},
		{plain, nil, false},
	} {
		if got := c.s.readsBlob(c.cols); got != c.want {
			t.Errorf("store %s, columns %q: readsBlob %v, want %v", c.s.entry.Name, c.cols, got, c.want)
		}
	}
}
