// Package etcdtest runs a real single-node etcd inside a test process
// (go.etcd.io/etcd/server/v3/embed), so packages that coordinate through etcd are
// tested against the server they run against in production, not a fake.
//
// Each server listens on loopback ports chosen by the kernel, keeps its data in
// t.TempDir() without fsync, logs only to a file in that directory (printed when
// the test fails), and is stopped by t.Cleanup. A test can Stop and Restart a server
// on the same ports and data, to prove what a client does while etcd is gone.
//
// Options make the server look like a secured production cluster: WithTLS serves
// clients on https:// only and requires a client certificate signed by the test CA
// (ClientCertAuth); WithAuth turns etcd authentication on with a root user, so
// every request needs a user's token too. Server.Client always connects with what
// the server requires (client certificate, root credentials).
package etcdtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
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

	"github.com/tidemark-io/tidemark/testutil/testcerts"
)

// RootUser is the user WithAuth creates, with the root role.
const RootUser = "root"

// Option configures a server of StartServer or Start.
type Option func(*options)

type options struct {
	tls          *testcerts.Files
	rootPassword string
	authTokenTTL time.Duration
}

// WithTLS serves clients on https:// with certs.ServerCert and requires every
// client to present a certificate signed by certs.CA (etcd --client-cert-auth).
func WithTLS(certs testcerts.Files) Option {
	return func(o *options) { o.tls = &certs }
}

// WithAuth enables etcd authentication with RootUser and rootPassword: from then
// on every request needs a token of a user (etcd auth enable).
func WithAuth(rootPassword string) Option {
	return func(o *options) { o.rootPassword = rootPassword }
}

// WithAuthTokenTTL sets how long an unused simple auth token stays valid (etcd
// --auth-token-ttl, whole seconds, at least one; etcd's default is 5 minutes), so a
// test can prove that clients survive their token expiring.
func WithAuthTokenTTL(ttl time.Duration) Option {
	return func(o *options) { o.authTokenTTL = ttl }
}

// startTimeout bounds how long a server may take to become ready.
const startTimeout = 30 * time.Second

// Server is one embedded etcd member. Its client address stays the same across
// Stop and Restart, so clients created before a Stop reconnect after a Restart.
type Server struct {
	dir     string
	logPath string
	client  url.URL // fixed after the first start
	peer    url.URL
	opts    options

	mu   sync.Mutex
	etcd *embed.Etcd // nil while stopped
}

// Start starts an embedded etcd for t and returns a client connected to it and its
// client endpoints. Both are closed when t ends.
func Start(t testing.TB, opts ...Option) (*clientv3.Client, []string) {
	t.Helper()
	s := StartServer(t, opts...)
	return s.Client(t), s.Endpoints()
}

// StartServer starts an embedded etcd for t, stopped when t ends.
func StartServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	dir := t.TempDir()
	s := &Server{
		dir:     dir,
		logPath: filepath.Join(dir, "etcd.log"),
		client:  url.URL{Scheme: "http", Host: "127.0.0.1:0"},
		peer:    url.URL{Scheme: "http", Host: "127.0.0.1:0"},
	}
	for _, o := range opts {
		o(&s.opts)
	}
	if s.opts.tls != nil {
		s.client.Scheme = "https"
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
	if s.opts.rootPassword != "" {
		if err := s.enableAuth(); err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
	}
	return s
}

// enableAuth adds RootUser with the root role and turns authentication on, through
// a client that presents the client certificate when the server requires one.
func (s *Server) enableAuth() error {
	cfg, err := s.clientConfig(false)
	if err != nil {
		return err
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return fmt.Errorf("client of %v: %w", s.Endpoints(), err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if _, err := c.UserAdd(ctx, RootUser, s.opts.rootPassword); err != nil {
		return fmt.Errorf("add user %s: %w", RootUser, err)
	}
	// etcd refuses to enable authentication unless root has the root role.
	if _, err := c.UserGrantRole(ctx, RootUser, "root"); err != nil {
		return fmt.Errorf("grant role root to %s: %w", RootUser, err)
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		return fmt.Errorf("enable authentication: %w", err)
	}
	return nil
}

// clientConfig is the configuration of a client with what the server requires:
// the client certificate, and with authenticated the root user's credentials.
func (s *Server) clientConfig(authenticated bool) (clientv3.Config, error) {
	cfg := clientv3.Config{
		Endpoints:   s.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	if certs := s.opts.tls; certs != nil {
		ca, err := os.ReadFile(certs.CA)
		if err != nil {
			return cfg, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return cfg, fmt.Errorf("CA file %s: no certificate", certs.CA)
		}
		cert, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
		if err != nil {
			return cfg, fmt.Errorf("client certificate %s: %w", certs.ClientCert, err)
		}
		cfg.TLS = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if authenticated && s.opts.rootPassword != "" {
		cfg.Username, cfg.Password = RootUser, s.opts.rootPassword
	}
	return cfg, nil
}

// Endpoints are the server's client URLs, the same before and after a Restart.
func (s *Server) Endpoints() []string { return []string{s.client.String()} }

// Client returns a new client of the server, closed when t ends, with the client
// certificate (WithTLS) and as RootUser (WithAuth). Its logger is silent: a test
// that stops the server would otherwise fill the output with retries.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg, err := s.clientConfig(true)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	c, err := clientv3.New(cfg)
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
	if certs := s.opts.tls; certs != nil {
		cfg.ClientTLSInfo.CertFile = certs.ServerCert
		cfg.ClientTLSInfo.KeyFile = certs.ServerKey
		cfg.ClientTLSInfo.TrustedCAFile = certs.CA
		cfg.ClientTLSInfo.ClientCertAuth = true
	}
	// The cheapest password hashing bcrypt allows (bcrypt.MinCost): at etcd's
	// default every authentication costs a second of CPU under -race.
	cfg.BcryptCost = 4
	if ttl := s.opts.authTokenTTL; ttl > 0 {
		cfg.AuthTokenTTL = uint(max(1, math.Ceil(ttl.Seconds())))
	}

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
