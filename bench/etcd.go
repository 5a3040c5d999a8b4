package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tidemark-io/tidemark/tools/devcluster"
)

// Etcd is the embedded single-node etcd of `master dev` (devcluster.StartEtcd) on a
// kernel-chosen loopback port, with its data under a scratch directory and fsync off,
// plus a client. The master's task queue measured against it is therefore measured
// without disk syncs, like the task-store benchmark of pkg/tasks.
type Etcd struct {
	Client    *clientv3.Client
	Endpoints []string

	server *devcluster.Etcd
}

// StartEtcd starts an embedded etcd keeping its data and log in dir.
func StartEtcd(dir string) (*Etcd, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	srv, err := devcluster.StartEtcd(devcluster.EtcdConfig{
		Dir:           filepath.Join(dir, "data"),
		ClientAddr:    "127.0.0.1:0",
		LogPath:       filepath.Join(dir, "etcd.log"),
		UnsafeNoFsync: true,
	})
	if err != nil {
		return nil, err
	}
	endpoints := []string{srv.Endpoint()}
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("embedded etcd client of %v: %w", endpoints, err)
	}
	return &Etcd{Client: c, Endpoints: endpoints, server: srv}, nil
}

// Close closes the client and stops the server.
func (e *Etcd) Close() {
	_ = e.Client.Close()
	e.server.Close()
}
