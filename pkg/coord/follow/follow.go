// Package follow keeps a process's copy of an etcd prefix current: it lists the
// prefix, then applies one watch from the listing's revision on, and lists again
// from scratch when the watch breaks (etcd away, history compacted, leader lost).
//
// Invariant: the copy a Handler holds is, between calls, the prefix as of one etcd
// revision: a listing replaces it whole (Reset) and each watch response is applied
// whole (Apply), in revision order. A change made while the watch was broken arrives
// with the next listing: late, never lost.
package follow

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"
)

// Handler holds the copy.
type Handler interface {
	// Reset replaces the copy by kvs, the whole prefix at revision rev.
	Reset(kvs []*mvccpb.KeyValue, rev int64)
	// Apply applies the events of one watch response, current to revision rev.
	Apply(events []*clientv3.Event, rev int64)
}

const (
	// listTimeout bounds each listing.
	listTimeout = 5 * time.Second
	// relistWait is the wait before listing again after etcd refused a listing.
	relistWait = time.Second
)

// Run follows prefix into h until ctx is done. what names the copy in logs.
func Run(ctx context.Context, client *clientv3.Client, prefix string, h Handler, clk clock.Clock, log *slog.Logger, what string) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log == nil {
		log = slog.Default()
	}
	for ctx.Err() == nil {
		rev, err := list(ctx, client, prefix, h)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn(what+" not listed; listing again", "err", err, "retry_in", relistWait.String())
			}
			select {
			case <-ctx.Done():
			case <-clk.After(relistWait):
			}
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		watch := client.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for wr := range watch {
			if wr.Err() != nil || wr.Canceled {
				if ctx.Err() == nil {
					log.Info(what+" watch broke; listing again", "err", wr.Err())
				}
				break
			}
			if len(wr.Events) > 0 {
				h.Apply(wr.Events, wr.Header.Revision)
			}
		}
		cancel()
	}
}

func list(ctx context.Context, client *clientv3.Client, prefix string, h Handler) (int64, error) {
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	resp, err := client.Get(lctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", prefix, err)
	}
	h.Reset(resp.Kvs, resp.Header.Revision)
	return resp.Header.Revision, nil
}
