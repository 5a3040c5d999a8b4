package store

import (
	"container/heap"
	"slices"
)

// idSelection keeps the smallest n ids added to it (every id when n is 0): a
// bounded top-n by id for List, whose memory is the page and its offset, never
// the store.
type idSelection struct {
	n   int
	ids maxIDs
}

func newIDSelection(n int) *idSelection { return &idSelection{n: n} }

// add offers id (each id at most once) and reports whether it is kept for now;
// an id kept now may be pushed out by smaller ones later.
func (s *idSelection) add(id string) bool {
	if s.n == 0 || len(s.ids) < s.n {
		heap.Push(&s.ids, id)
		return true
	}
	if id >= s.ids[0] {
		return false
	}
	s.ids[0] = id
	heap.Fix(&s.ids, 0)
	return true
}

// sorted returns the kept ids in ascending order.
func (s *idSelection) sorted() []string {
	out := slices.Clone([]string(s.ids))
	slices.Sort(out)
	return out
}

// maxIDs is a max-heap of ids: the root is the largest kept id, the first to go.
type maxIDs []string

func (h maxIDs) Len() int           { return len(h) }
func (h maxIDs) Less(i, j int) bool { return h[i] > h[j] }
func (h maxIDs) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *maxIDs) Push(x any)        { *h = append(*h, x.(string)) }
func (h *maxIDs) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
