package wal

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// refreshConcurrency bounds the shards a Snapshot refresh probes at once.
const refreshConcurrency = 16

// ListShards returns the names of the shards of the store in dir, sorted.
func ListShards(ctx context.Context, bucket *objstore.Bucket, dir string) ([]string, error) {
	prefix := cleanDir(dir) + "/" + walDir + "/"
	names, err := bucket.ListDirs(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list WAL shards of %s: %w", dir, err)
	}
	sort.Strings(names)
	return names, nil
}

// LoadShard returns the latest manifest of shard, or an error wrapping ErrNoShard.
func LoadShard(ctx context.Context, bucket *objstore.Bucket, dir, shard string) (*Manifest, error) {
	sh, err := newShard(bucket, dir, shard, buildOptions(nil))
	if err != nil {
		return nil, err
	}
	return sh.loadLatest(ctx, nil)
}

// Snapshot is the latest manifest of every shard of one store, as of one refresh. It
// is an immutable value: share it freely, and swap a store's snapshot pointer under a
// lock held for nanoseconds, never across the I/O of Refresh.
type Snapshot struct {
	Dir    string
	Shards map[string]*Manifest // do not modify
}

// LoadSnapshot reads the latest manifest of every shard of the store in dir.
func LoadSnapshot(ctx context.Context, bucket *objstore.Bucket, dir string) (*Snapshot, error) {
	return (&Snapshot{Dir: cleanDir(dir)}).Refresh(ctx, bucket)
}

// Refresh returns a snapshot with the latest manifest of every shard, reusing this
// snapshot's manifests where nothing changed: an unchanged shard costs a read of its
// latest-version hint and one existence probe, never a manifest read. Shards that
// disappeared are dropped. On error the caller keeps its old snapshot.
func (s *Snapshot) Refresh(ctx context.Context, bucket *objstore.Bucket) (*Snapshot, error) {
	names, err := ListShards(ctx, bucket, s.Dir)
	if err != nil {
		return nil, err
	}
	o := buildOptions(nil)
	out := &Snapshot{Dir: s.Dir, Shards: make(map[string]*Manifest, len(names))}
	var mu sync.Mutex
	err = forEach(ctx, len(names), refreshConcurrency, func(ctx context.Context, i int) error {
		sh, err := newShard(bucket, s.Dir, names[i], o)
		if err != nil {
			return nil // not a shard directory (a stray object); nothing to read
		}
		m, err := sh.loadLatest(ctx, s.Shards[names[i]])
		if errors.Is(err, ErrNoShard) {
			return nil // being created, or being deleted
		}
		if err != nil {
			return err
		}
		mu.Lock()
		out.Shards[names[i]] = m
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PendingGeneration is one generation a read must consult: above its shard's merged
// watermark.
type PendingGeneration struct {
	Shard string
	Generation
	// Key is the object key of the generation file (for GenerationCache.Read).
	Key string
}

// Pending returns the generations above each shard's watermark (the base manifest's
// merged_generations; a missing shard counts as 0), by shard name, then generation.
func (s *Snapshot) Pending(watermarks map[string]uint64) []PendingGeneration {
	var out []PendingGeneration
	for _, name := range s.shardNames() {
		for _, g := range s.Shards[name].Pending(watermarks[name]) {
			out = append(out, PendingGeneration{Shard: name, Generation: g, Key: GenerationKey(s.Dir, g)})
		}
	}
	return out
}

// PendingGenerations counts the generations above each shard's watermark: the
// fan-out of a read, and the pending-generation metric.
func (s *Snapshot) PendingGenerations(watermarks map[string]uint64) int {
	n := 0
	for name, m := range s.Shards {
		n += len(m.Pending(watermarks[name]))
	}
	return n
}

func (s *Snapshot) shardNames() []string {
	names := make([]string, 0, len(s.Shards))
	for name := range s.Shards {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
