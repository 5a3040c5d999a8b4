package table

import (
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark-io/tidemark/pkg/storage/cache"
)

// Decoded row groups of the id-ordered walk (Iter), kept across walks.
//
// A list read by cursor pages starts each page where the last one stopped: in the
// middle of a row group of every fragment the walk passes through. Without a
// cache each page decodes those groups again, about 1.4x the rows it returns in a
// leveled store; with it, the next page finds them decoded. Fragments are never
// rewritten (a path names one immutable file), so a decoded group never goes
// stale. Point lookups (readRowsAt) and full scans read around it: they would
// only push the walk's groups out.
//
// The budget is an eighth of CacheBytes, taken from the share of the objects read
// for whole fragments: room for the last groups of the fragments a page ends in,
// never the store.

// groupKey names one decoded row group: its fragment, its number and the
// columns read.
type groupKey struct {
	path  string
	group int
	cols  string
}

// decodedGroup is a row group's batches and the fragment row each starts at.
// The cache holds a reference to every batch and never gives it back: an evicted
// group is freed by the garbage collector once no walk holds it, and a batch a
// walk retains from it can never see its buffers released under it.
type decodedGroup struct {
	recs   []arrow.RecordBatch
	starts []int64
}

func newGroupCache(cacheBytes int64) *cache.LRU[groupKey, *decodedGroup] {
	return cache.New[groupKey, *decodedGroup](cacheBytes / 8)
}

func groupKeyOf(path string, group int, cols []string) groupKey {
	return groupKey{path: path, group: group, cols: strings.Join(cols, "\x00")}
}

// cacheGroup keeps l's batches for the next walk.
func (t *Table) cacheGroup(k groupKey, l *groupLoad) {
	dg := &decodedGroup{recs: make([]arrow.RecordBatch, len(l.recs)), starts: l.starts}
	var size int64
	for i, r := range l.recs {
		r.Retain()
		dg.recs[i] = r
		for _, c := range r.Columns() {
			size += dataSize(c.Data())
		}
	}
	t.groups.Add(k, dg, size)
}

// cachedGroup fills l with a cached decoded group, retained for l.
func (t *Table) cachedGroup(k groupKey, l *groupLoad) bool {
	dg, ok := t.groups.Get(k)
	if !ok {
		return false
	}
	l.recs = make([]arrow.RecordBatch, len(dg.recs))
	for i, r := range dg.recs {
		r.Retain()
		l.recs[i] = r
	}
	l.starts = dg.starts
	return true
}

// dataSize is the bytes of an array's buffers and its children's.
func dataSize(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += dataSize(c)
	}
	return n
}
