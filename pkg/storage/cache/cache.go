// Package cache is a byte-bounded LRU for immutable objects decoded from object
// storage (fragment key indexes, bloom filters, WAL generations).
//
// Invariants: the sum of the sizes of resident entries never exceeds the budget
// after Add returns; an entry larger than the whole budget is not kept; Get of a
// resident key returns the value that was added for it. Because cached objects are
// immutable and addressed by their object key, a cached value can never be stale.
package cache

import (
	"container/list"
	"sync"
)

// LRU is a least-recently-used cache bounded by the total size of its values,
// as reported by the caller at Add. It is safe for concurrent use.
type LRU[K comparable, V any] struct {
	mu     sync.Mutex
	budget int64
	used   int64
	order  *list.List // front = most recently used; elements hold *entry[K, V]
	items  map[K]*list.Element
	hits   uint64
	misses uint64
}

type entry[K comparable, V any] struct {
	key  K
	val  V
	size int64
}

// New returns an LRU holding at most budget bytes of values. A budget <= 0 caches
// nothing (every Get misses), which is how a caller turns caching off.
func New[K comparable, V any](budget int64) *LRU[K, V] {
	return &LRU[K, V]{budget: budget, order: list.New(), items: map[K]*list.Element{}}
}

// Get returns the value for key and marks it recently used.
func (c *LRU[K, V]) Get(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.order.MoveToFront(el)
		c.hits++
		return el.Value.(*entry[K, V]).val, true
	}
	c.misses++
	var zero V
	return zero, false
}

// Add inserts or replaces key with a value of the given size in bytes, evicting
// least-recently-used entries until the budget holds.
func (c *LRU[K, V]) Add(key K, val V, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.removeElement(el)
	}
	if size > c.budget {
		return
	}
	c.items[key] = c.order.PushFront(&entry[K, V]{key: key, val: val, size: size})
	c.used += size
	for c.used > c.budget {
		c.removeElement(c.order.Back())
	}
}

// Remove drops key if present.
func (c *LRU[K, V]) Remove(key K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.removeElement(el)
	}
}

func (c *LRU[K, V]) removeElement(el *list.Element) {
	e := el.Value.(*entry[K, V])
	c.order.Remove(el)
	delete(c.items, e.key)
	c.used -= e.size
}

// Stats reports resident entries and bytes, and hit/miss counts since creation.
type Stats struct {
	Entries      int
	Bytes        int64
	Hits, Misses uint64
}

// Stats returns a consistent snapshot of the cache's counters.
func (c *LRU[K, V]) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Entries: len(c.items), Bytes: c.used, Hits: c.hits, Misses: c.misses}
}
