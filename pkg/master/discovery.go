package master

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdDiscovery lists the workers registered under P/workers/ (each under its own
// lease, so a dead worker disappears when its lease expires).
type EtcdDiscovery struct {
	Client *clientv3.Client
	Prefix string // P, e.g. /tidemark
}

// Workers returns the registered workers in instance order.
func (d *EtcdDiscovery) Workers(ctx context.Context) ([]Worker, error) {
	prefix := strings.TrimSuffix(d.Prefix, "/") + "/workers/"
	resp, err := d.Client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	out := make([]Worker, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var w Worker
		if err := json.Unmarshal(kv.Value, &w); err != nil || w.GRPCAddr == "" {
			continue // not a registration we understand; never call a guessed address
		}
		if w.InstanceID == "" {
			w.InstanceID = strings.TrimPrefix(string(kv.Key), prefix)
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].InstanceID < out[j].InstanceID })
	return out, nil
}

// StaticDiscovery is a fixed worker list (WORKER_ENDPOINTS), for deployments whose
// workers do not register in etcd.
type StaticDiscovery []Worker

// Workers returns the list.
func (d StaticDiscovery) Workers(context.Context) ([]Worker, error) { return d, nil }

// ParseEndpoints parses WORKER_ENDPOINTS: a comma-separated list of host:port gRPC
// addresses, each optionally named "instance=host:port".
func ParseEndpoints(s string) (StaticDiscovery, error) {
	var out StaticDiscovery
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, addr, named := strings.Cut(part, "=")
		if !named {
			name, addr = part, part
		}
		if !strings.Contains(addr, ":") {
			return nil, fmt.Errorf("worker endpoint %q: want host:port or instance=host:port", part)
		}
		out = append(out, Worker{InstanceID: name, GRPCAddr: addr})
	}
	return out, nil
}
