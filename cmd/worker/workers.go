package main

import (
	"context"
	"time"

	"github.com/tidemark-io/tidemark/pkg/coord/etcdcli"
	"github.com/tidemark-io/tidemark/tools/loadgen"
)

// discoverTimeout bounds the read of the workers registered in etcd.
const discoverTimeout = 10 * time.Second

// registeredWorkers returns the HTTP addresses (host:port) of the workers
// registered in etcd under P/workers/ (pkg/coord/membership), in instance
// order: live ones, since a record lives as long as its worker's lease.
func registeredWorkers(ctx context.Context, cfg etcdcli.Config) ([]string, error) {
	client, err := etcdcli.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = client.Close() }()
	ctx, cancel := context.WithTimeout(ctx, discoverTimeout)
	defer cancel()
	return loadgen.DiscoverWorkers(ctx, client, cfg.NormalizedPrefix())
}

// healthTimeout bounds the health check of a worker found in etcd.
const healthTimeout = 5 * time.Second
