package bench

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// etcdStartTimeout bounds how long the embedded server may take to become ready.
const etcdStartTimeout = 30 * time.Second

// Etcd is an embedded single-node etcd on loopback ports chosen by the kernel, with
// its data under a scratch directory and fsync off: the setup internal/etcdtest gives
// tests, for a command that has no testing.TB. The master's task store measured
// against it is therefore measured without disk syncs, like the task-store
// benchmark of pkg/tasks.
type Etcd struct {
	Client    *clientv3.Client
	Endpoints []string

	server *embed.Etcd
}

// StartEtcd starts an embedded etcd keeping its data and log in dir.
func StartEtcd(dir string) (*Etcd, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	local := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := embed.NewConfig()
	cfg.Name = "tidemark-bench"
	cfg.Dir = filepath.Join(dir, "data")
	cfg.UnsafeNoFsync = true
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	cfg.ListenClientUrls = []url.URL{local}
	cfg.AdvertiseClientUrls = []url.URL{local}
	cfg.ListenPeerUrls = []url.URL{local}
	cfg.AdvertisePeerUrls = []url.URL{local}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ListenMetricsUrls = nil
	cfg.EnableGRPCGateway = false

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd in %s: %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s failed while starting: %w", dir, err)
	case <-time.After(etcdStartTimeout):
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s not ready after %s", dir, etcdStartTimeout)
	}
	endpoints := []string{"http://" + e.Clients[0].Addr().String()}
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("embedded etcd client of %v: %w", endpoints, err)
	}
	return &Etcd{Client: c, Endpoints: endpoints, server: e}, nil
}

// Close closes the client and stops the server.
func (e *Etcd) Close() {
	_ = e.Client.Close()
	e.server.Close()
}
