package store

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/wal"
)

// recoverConcurrency bounds the stores SealLeftovers examines at once.
const recoverConcurrency = 4

// SealLeftovers seals, in every registered store, the rows this worker's shard
// acknowledged in an earlier life of the process and never sealed (it crashed
// between an append and the next flush). Durable in WAL entries, they are read by
// no one until a writer of the shard opens and seals them; a restarted worker opens
// a writer only for a store it is asked to write or merge, so without this an idle
// store would hide them for as long as nobody writes it through this worker. A
// worker calls it once at startup. It returns the stores it sealed and the rows
// sealed; the error joins the stores it could not examine or seal.
func (ss *Stores) SealLeftovers(ctx context.Context) (stores int, rows int64, err error) {
	var entries []registry.Entry
	for _, k := range registry.Kinds() {
		es, err := ss.reg.List(ctx, k)
		if err != nil {
			return 0, 0, fmt.Errorf("seal leftovers: list %s stores: %w", k, err)
		}
		entries = append(entries, es...)
	}
	type sealed struct {
		rows int64
		err  error
	}
	out := make([]sealed, len(entries))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(recoverConcurrency)
	for i, e := range entries {
		g.Go(func() error {
			out[i].rows, out[i].err = ss.sealLeftover(gctx, e)
			return nil
		})
	}
	_ = g.Wait()
	var errs []error
	for _, s := range out {
		if s.err != nil {
			errs = append(errs, s.err)
			continue
		}
		if s.rows > 0 {
			stores++
			rows += s.rows
		}
	}
	return stores, rows, errors.Join(errs...)
}

func (ss *Stores) sealLeftover(ctx context.Context, e registry.Entry) (int64, error) {
	has, err := wal.HasUnsealed(ctx, ss.cfg.Bucket, e.URI, ss.cfg.Shard)
	if err != nil || !has {
		return 0, err
	}
	s, release, err := ss.Open(ctx, e.Kind, e.Name)
	if errors.Is(err, registry.ErrNotFound) {
		return 0, nil // deleted meanwhile
	}
	if err != nil {
		return 0, err
	}
	defer release()
	if _, err := s.Writer(ctx); err != nil { // replays the entries
		return 0, err
	}
	g, err := s.Seal(ctx)
	if err != nil || g == nil {
		return 0, err
	}
	return g.Rows, nil
}
