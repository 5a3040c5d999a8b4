package etcdtest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tidemark-io/tidemark/testutil/testcerts"
	"github.com/tidemark-io/tidemark/testutil/testwait"
)

func TestStartServesReadsAndWrites(t *testing.T) {
	c, endpoints := Start(t)
	if len(endpoints) != 1 || endpoints[0] == "http://127.0.0.1:0" {
		t.Fatalf("endpoints %v: want the kernel-chosen address", endpoints)
	}
	ctx := context.Background()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get k: %v %v", resp, err)
	}
}

// A client made before a Stop fails while the server is gone and works again, with
// the data intact, after Restart: what "etcd lost while running" tests rely on.
func TestRestartKeepsDataAndEndpoints(t *testing.T) {
	s := StartServer(t)
	c := s.Client(t)
	ctx := context.Background()
	if _, err := c.Put(ctx, "k", "before"); err != nil {
		t.Fatal(err)
	}
	before := s.Endpoints()

	s.Stop()
	if err := Ping(ctx, c, 300*time.Millisecond); err == nil {
		t.Fatal("read succeeded while the server was stopped")
	}

	s.Restart(t)
	if got := s.Endpoints(); got[0] != before[0] {
		t.Fatalf("endpoints moved from %v to %v", before, got)
	}
	testwait.For(t, 15*time.Second, "the client to reconnect after restart", func() (bool, string) {
		if err := Ping(ctx, c, time.Second); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	resp, err := c.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "before" {
		t.Fatalf("get k after restart: %v %v", resp, err)
	}
}

// A secured server (client certificates required, authentication on) serves the
// client it hands out, and refuses a client with the certificate but no user: what
// the etcdcli and end-to-end TLS tests build on.
func TestSecuredServerRequiresCertificateAndUser(t *testing.T) {
	certs := testcerts.New(t, t.TempDir())
	s := StartServer(t, WithTLS(certs), WithAuth("rootpw"))
	if ep := s.Endpoints()[0]; !strings.HasPrefix(ep, "https://127.0.0.1:") {
		t.Fatalf("endpoint %s: want https on loopback", ep)
	}
	ctx := context.Background()
	c := s.Client(t)
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put as %s with the client certificate: %v", RootUser, err)
	}

	cfg, err := s.clientConfig(false)
	if err != nil {
		t.Fatal(err)
	}
	anon, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = anon.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = anon.Get(ctx, "k")
	if !errors.Is(err, rpctypes.ErrUserEmpty) && !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("get without a user: %v; want it refused by authentication", err)
	}
}
