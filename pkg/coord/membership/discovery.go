package membership

import (
	"context"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/pkg/coord/keys"
)

// Discovery lists the workers registered under P/workers/ (each under its own
// lease, so a dead worker disappears when its lease expires).
type Discovery struct {
	Client *clientv3.Client
	Prefix string // P, e.g. /tidemark (keys.DefaultPrefix when empty)
}

// Workers returns the registered workers in instance order. A record that does
// not decode or has no gRPC address is left out: a worker is never called at a
// guessed address.
func (d *Discovery) Workers(ctx context.Context) ([]Worker, error) {
	workers, _, err := d.list(ctx)
	return workers, err
}

// list is Workers and the revision it read at.
func (d *Discovery) list(ctx context.Context) ([]Worker, int64, error) {
	prefix := keys.Under(d.Prefix).WorkersPrefix()
	resp, err := d.Client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", prefix, err)
	}
	out := make([]Worker, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		w, err := Parse(string(kv.Key), kv.Value)
		if err != nil || w.GRPCAddr == "" {
			continue
		}
		if w.InstanceID == "" {
			w.InstanceID = strings.TrimPrefix(string(kv.Key), prefix)
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].InstanceID < out[j].InstanceID })
	return out, resp.Header.Revision, nil
}
