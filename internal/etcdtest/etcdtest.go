// Package etcdtest runs a real single-node etcd inside a test process
// (go.etcd.io/etcd/server/v3/embed), so packages that coordinate through etcd are
// tested against the server they run against in production, not a fake.
//
// Each server listens on loopback ports chosen by the kernel, keeps its data in
// t.TempDir() without fsync, logs only to a file in that directory (printed when
// the test fails), and is stopped by t.Cleanup. A test can Stop and Restart a server
// on the same ports and data, to prove what a client does while etcd is gone.
package etcdtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startTimeout bounds how long a server may take to become ready.
const startTimeout = 30 * time.Second

// Server is one embedded etcd member. Its client address stays the same across
// Stop and Restart, so clients created before a Stop reconnect after a Restart.
type Server struct {
	dir     string
	logPath string
	client  url.URL // fixed after the first start
	peer    url.URL

	mu   sync.Mutex
	etcd *embed.Etcd // nil while stopped
}

// Start starts an embedded etcd for t and returns a client connected to it and its
// client endpoints. Both are closed when t ends.
func Start(t testing.TB) (*clientv3.Client, []string) {
	t.Helper()
	s := StartServer(t)
	return s.Client(t), s.Endpoints()
}

// StartServer starts an embedded etcd for t, stopped when t ends.
func StartServer(t testing.TB) *Server {
	t.Helper()
	dir := t.TempDir()
	s := &Server{
		dir:     dir,
		logPath: filepath.Join(dir, "etcd.log"),
		client:  url.URL{Scheme: "http", Host: "127.0.0.1:0"},
		peer:    url.URL{Scheme: "http", Host: "127.0.0.1:0"},
	}
	if err := s.start(); err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			s.dumpLog(t)
		}
	})
	return s
}

// Endpoints are the server's client URLs, the same before and after a Restart.
func (s *Server) Endpoints() []string { return []string{s.client.String()} }

// Client returns a new client of the server, closed when t ends. Its logger is
// silent: a test that stops the server would otherwise fill the output with retries.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   s.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcdtest: client of %v: %v", s.Endpoints(), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop stops the server, keeping its data and ports for Restart. Stopping a
// stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.etcd == nil {
		return
	}
	s.etcd.Close()
	s.etcd = nil
}

// Restart starts a stopped server again on the same ports with the same data.
// Leases survive a restart (their TTL is reset), as they do in a real cluster.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatalf("etcdtest: restart: %v", err)
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.etcd != nil {
		return fmt.Errorf("server at %v is already running", s.Endpoints())
	}
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = filepath.Join(s.dir, "data")
	cfg.UnsafeNoFsync = true
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{s.logPath}
	cfg.ListenClientUrls = []url.URL{s.client}
	cfg.AdvertiseClientUrls = []url.URL{s.client}
	cfg.ListenPeerUrls = []url.URL{s.peer}
	cfg.AdvertisePeerUrls = []url.URL{s.peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// No metrics or gateway listeners: nothing else needs a port.
	cfg.ListenMetricsUrls = nil
	cfg.EnableGRPCGateway = false

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start embedded etcd in %s: %w", s.dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("embedded etcd in %s failed while starting: %w", s.dir, err)
	case <-time.After(startTimeout):
		e.Close()
		return fmt.Errorf("embedded etcd in %s not ready after %v", s.dir, startTimeout)
	}
	// Pin the kernel-chosen ports, so a restart listens where clients already dial.
	s.client.Host = e.Clients[0].Addr().String()
	s.peer.Host = e.Peers[0].Listener.Addr().String()
	s.etcd = e
	return nil
}

// Ping reports whether c's server answers a linearizable read within timeout.
func Ping(ctx context.Context, c *clientv3.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := c.Get(ctx, "etcdtest-ready")
	return err
}

func (s *Server) dumpLog(t testing.TB) {
	data, err := os.ReadFile(s.logPath)
	if err != nil || len(data) == 0 {
		return
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	t.Logf("etcdtest: last lines of %s:\n%s", s.logPath, strings.Join(lines, "\n"))
}
