package table

import "github.com/tidemark-io/tidemark/pkg/storage/cache"

// A table handle caches the immutable objects it decodes within CacheBytes: the
// objects read for a whole fragment (key-index tops, bloom filters, deletion
// vectors, Parquet footers, the in-memory key indexes of unsorted fragments) share
// three quarters, the least recently used going whatever its kind, rather than
// each kind thrashing in a fixed share while another's sits unused (a store of
// many fragments needs more bloom filters and footers, one of unsorted fragments
// more key indexes); key-index blocks, one per id a lookup reads and cheap to read
// again, have the last quarter, so a stream of lookups never pushes out what a
// merge needs for every fragment.

// objectKind tells the kinds of cached objects apart in the shared cache.
type objectKind uint8

const (
	kindKeyIndex objectKind = iota
	kindTop
	kindBlock
	kindRawBlock
	kindBloom
	kindDeletions
	kindFooter
)

// objectKey names one cached object: its kind, its path in the table directory,
// and for a key-index block its number.
type objectKey struct {
	kind  objectKind
	path  string
	block int
}

// objectView is the shared cache seen as holding one kind of object, by path.
type objectView[V any] struct {
	lru  *cache.LRU[objectKey, any]
	kind objectKind
}

func (v objectView[V]) Get(path string) (V, bool) { return v.GetBlock(path, 0) }

func (v objectView[V]) Add(path string, val V, size int64) { v.AddBlock(path, 0, val, size) }

// GetBlock and AddBlock address one block of the object at path.
func (v objectView[V]) GetBlock(path string, block int) (V, bool) {
	if got, ok := v.lru.Get(objectKey{v.kind, path, block}); ok {
		return got.(V), true
	}
	var zero V
	return zero, false
}

func (v objectView[V]) AddBlock(path string, block int, val V, size int64) {
	v.lru.Add(objectKey{v.kind, path, block}, val, size)
}
