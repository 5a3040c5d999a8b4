package devcluster

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// etcdStartTimeout bounds how long the embedded etcd may take to become ready.
const etcdStartTimeout = 30 * time.Second

// etcdMemberName is the member's name; it is stored in the data directory, so it
// stays the same across runs.
const etcdMemberName = "tidemark-dev"

// EtcdConfig is how to run the embedded etcd.
type EtcdConfig struct {
	// Dir holds etcd's data; an existing one is reused.
	Dir string
	// ClientAddr is the host:port clients connect to; port 0 lets the kernel choose.
	ClientAddr string
	// LogPath is the file etcd logs to (warnings and errors).
	LogPath string
	// UnsafeNoFsync skips fsync: faster, and safe enough for throwaway data.
	UnsafeNoFsync bool
}

// Etcd is a running embedded single-node etcd.
type Etcd struct {
	e        *embed.Etcd
	endpoint string
}

// StartEtcd starts an embedded single-node etcd and waits until it serves.
//
// The peer listener (which a single node never uses) is on a kernel-chosen
// loopback port, so only the client port can collide with something else.
func StartEtcd(cfg EtcdConfig) (*Etcd, error) {
	client := url.URL{Scheme: "http", Host: cfg.ClientAddr}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	ec := embed.NewConfig()
	ec.Name = etcdMemberName
	ec.Dir = cfg.Dir
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	ec.Logger = "zap"
	ec.LogLevel = "warn"
	ec.LogOutputs = []string{cfg.LogPath}
	ec.ListenClientUrls = []url.URL{client}
	ec.AdvertiseClientUrls = []url.URL{client}
	ec.ListenPeerUrls = []url.URL{peer}
	ec.AdvertisePeerUrls = []url.URL{peer}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.ListenMetricsUrls = nil
	ec.EnableGRPCGateway = false

	e, err := embed.StartEtcd(ec)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use") {
			return nil, fmt.Errorf("embedded etcd: client address %s is in use (another etcd, or another master dev?): choose another with --etcd-addr: %w", cfg.ClientAddr, err)
		}
		return nil, fmt.Errorf("embedded etcd in %s (log %s): %w", cfg.Dir, cfg.LogPath, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s failed while starting (log %s): %w", cfg.Dir, cfg.LogPath, err)
	case <-time.After(etcdStartTimeout):
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s not ready after %s (log %s)", cfg.Dir, etcdStartTimeout, cfg.LogPath)
	}
	addr := e.Clients[0].Addr().(*net.TCPAddr)
	return &Etcd{e: e, endpoint: "http://" + addr.String()}, nil
}

// Endpoint is the client URL, with the real port when the configured one was 0.
func (s *Etcd) Endpoint() string { return s.endpoint }

// Err reports a failure of the running server.
func (s *Etcd) Err() <-chan error { return s.e.Err() }

// Close stops the server gracefully.
func (s *Etcd) Close() { s.e.Close() }
