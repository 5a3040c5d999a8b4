package wal

import (
	"context"
	"errors"
	"sync"

	"github.com/tidemark-io/tidemark/pkg/storage/cache"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// GenerationCache keeps decoded generations by object key within a byte budget
// (pkg/storage/cache's LRU, charged with each file's size). Generations are immutable and
// their names are never reused, so a cached generation is never stale.
//
// Release rules: the returned GenerationData and its record batches are shared by
// every reader and by the cache. Do not Release or modify them, and do not Retain them
// expecting to own memory: they reference the generation file's bytes (Go memory),
// which the garbage collector frees once neither the cache nor any reader holds
// them. Eviction only drops the cache's reference.
//
// Concurrent reads of the same uncached key share one GET. It is safe for concurrent
// use.
type GenerationCache struct {
	lru *cache.LRU[string, *GenerationData]

	mu       sync.Mutex
	inflight map[string]*genRead
}

type genRead struct {
	done chan struct{}
	g    *GenerationData
	err  error
}

// NewGenerationCache returns a cache of at most budget bytes of decoded generations
// (<= 0 caches nothing; every Read then reads the object).
func NewGenerationCache(budget int64) *GenerationCache {
	return &GenerationCache{lru: cache.New[string, *GenerationData](budget), inflight: map[string]*genRead{}}
}

// Read returns the decoded generation stored at key in bucket. A generation that was
// deleted (a reader's snapshot predates a drain plus the delete delay) gives an
// error wrapping objstore.ErrNotFound: refresh the snapshot and read again.
func (c *GenerationCache) Read(ctx context.Context, bucket *objstore.Bucket, key string) (*GenerationData, error) {
	ck := bucket.String() + "\x00" + key
	for {
		if g, ok := c.lru.Get(ck); ok {
			return g, nil
		}
		c.mu.Lock()
		if r, ok := c.inflight[ck]; ok {
			c.mu.Unlock()
			select {
			case <-r.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			// The leader's own context may have ended; that is no reason to fail here.
			if r.err != nil && (errors.Is(r.err, context.Canceled) || errors.Is(r.err, context.DeadlineExceeded)) && ctx.Err() == nil {
				continue
			}
			return r.g, r.err
		}
		r := &genRead{done: make(chan struct{})}
		c.inflight[ck] = r
		c.mu.Unlock()

		r.g, r.err = readGeneration(ctx, bucket, key)
		if r.err == nil {
			c.lru.Add(ck, r.g, r.g.Bytes)
		}
		c.mu.Lock()
		delete(c.inflight, ck)
		c.mu.Unlock()
		close(r.done)
		return r.g, r.err
	}
}

// Stats returns the cache's counters.
func (c *GenerationCache) Stats() cache.Stats { return c.lru.Stats() }

func readGeneration(ctx context.Context, bucket *objstore.Bucket, key string) (*GenerationData, error) {
	data, err := bucket.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return decodeGeneration(key, data)
}
