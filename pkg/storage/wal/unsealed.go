package wal

import (
	"context"
	"errors"

	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
)

// errFound stops a listing at the first match.
var errFound = errors.New("found")

// HasUnsealed reports whether shard holds entries above its replay_after: rows a
// writer acknowledged and never sealed, which no reader sees until a writer opens
// the shard (replaying them) and seals. A shard without a manifest has none. It
// reads the latest manifest and lists the shard's entries once.
func HasUnsealed(ctx context.Context, bucket *objstore.Bucket, dir, shard string) (bool, error) {
	m, err := LoadShard(ctx, bucket, dir, shard)
	if errors.Is(err, ErrNoShard) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	err = bucket.Walk(ctx, entriesPrefix(dir, shard), "", func(o objstore.Object) error {
		if pos, ok := parseEntryPos(o.Key); ok && pos > m.ReplayAfter {
			return errFound
		}
		return nil
	})
	if errors.Is(err, errFound) {
		return true, nil
	}
	return false, err
}
