package membership

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/keys"
)

// watchRetry is the wait before listing again after a list that etcd refused.
const watchRetry = time.Second

// Watch calls onChange with the registered workers, as Workers lists them: once
// when it starts, and again after every registration, deregistration (a revoked or
// expired lease deletes the record) and change of a record, until ctx is done.
//
// Each call gets the whole list, read after the change, never a diff: a watch
// that breaks (etcd away, history compacted) is restarted from a fresh list, so a
// change made meanwhile is reported late but never lost. onChange runs on Watch's
// goroutine, one call at a time.
func (d *Discovery) Watch(ctx context.Context, onChange func([]Worker)) {
	prefix := keys.Under(d.Prefix).WorkersPrefix()
	for ctx.Err() == nil {
		workers, rev, err := d.list(ctx)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(watchRetry):
			}
			continue
		}
		onChange(workers)
		wctx, cancel := context.WithCancel(ctx)
		d.follow(wctx, d.Client.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)), onChange)
		cancel()
	}
}

// follow lists the workers after each batch of events of watch, until the watch
// breaks or ctx is done.
func (d *Discovery) follow(ctx context.Context, watch clientv3.WatchChan, onChange func([]Worker)) {
	for wr := range watch {
		if wr.Err() != nil || wr.Canceled {
			return
		}
		if len(wr.Events) == 0 {
			continue // progress notification
		}
		workers, _, err := d.list(ctx)
		if err != nil {
			return // list again from the top, and watch from there
		}
		onChange(workers)
	}
}
