package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/membership"
	"github.com/tidemark-io/tidemark/pkg/coord/pending"
	"github.com/tidemark-io/tidemark/pkg/merge"
	"github.com/tidemark-io/tidemark/pkg/registry"
	"github.com/tidemark-io/tidemark/pkg/storage/objstore"
	"github.com/tidemark-io/tidemark/pkg/store"
)

// recordingWorker is a benchWorker that publishes its pending record
// (P/pending/<id>) as a registered worker does (pkg/worker.New): under a lease of
// its own on the master's etcd, from store.Stores.Pending, woken by every new
// snapshot of its stores. Without it the master's merges on demand see nothing and
// only its stats scan and merge sweep merge.
type recordingWorker struct {
	*benchWorker
	client    *clientv3.Client
	lease     clientv3.LeaseID
	publisher *pending.Publisher
	// peers follows every worker's entries: the store-wide pending count its add
	// backpressure decides on, as a registered worker's does.
	peers *pending.View
}

// newRecordingWorker returns a worker on bucket whose record goes under prefix
// (the master's), its lease granted and not yet kept alive (run does that).
func newRecordingWorker(ctx context.Context, client *clientv3.Client, b *objstore.Bucket, id, prefix string, mc merge.Config) (*recordingWorker, error) {
	resp, err := client.Grant(ctx, int64(membership.DefaultLeaseTTL/time.Second))
	if err != nil {
		return nil, fmt.Errorf("lease of %s: %w", id, err)
	}
	w := &recordingWorker{client: client, lease: resp.ID}
	// The source is read only in Run, after the worker exists.
	w.publisher = pending.NewPublisher(client, func() []pending.Entry { return w.stores.Pending() },
		func() clientv3.LeaseID { return w.lease }, pending.PublisherConfig{Prefix: prefix, Instance: id, Logger: quiet})
	w.peers = pending.NewView(client, prefix, nil, quiet)
	w.benchWorker = newWorker(b, id, store.Config{OnSnapshot: func(registry.Target) { w.publisher.Notify() },
		StorePending: w.peers.Generations}, mc)
	return w, nil
}

// run keeps the lease alive and publishes until ctx ends.
func (w *recordingWorker) run(ctx context.Context) {
	alive, err := w.client.KeepAlive(ctx, w.lease)
	if err == nil {
		go func() {
			for range alive { // drained, or the client logs that the channel is full
			}
		}()
	}
	var peers sync.WaitGroup
	peers.Go(func() { w.peers.Run(ctx) })
	w.publisher.Run(ctx)
	peers.Wait()
}

// close revokes the lease (the record goes with it) and closes the stores.
func (w *recordingWorker) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = w.client.Revoke(ctx, w.lease)
	w.benchWorker.close()
}

// demandEnqueues reads from the master's registry how many merge_wal tasks merges
// on demand enqueued, by reason: enough generations, or the oldest too old.
func demandEnqueues(reg *prometheus.Registry) (byGenerations, byAge int, err error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, 0, fmt.Errorf("ingest: master metrics: %w", err)
	}
	for _, f := range families {
		if f.GetName() != "tidemark_merge_demand_targets_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["outcome"] != "enqueued" {
				continue
			}
			switch n := int(m.GetCounter().GetValue()); labels["reason"] {
			case "generations":
				byGenerations += n
			case "age":
				byAge += n
			}
		}
	}
	return byGenerations, byAge, nil
}
