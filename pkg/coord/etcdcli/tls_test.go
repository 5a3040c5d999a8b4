package etcdcli

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testcerts"
)

// securedEtcd starts an etcd that requires a client certificate of certs' CA and
// a user (root / rootpw), the way a production cluster is run.
func securedEtcd(t *testing.T) (*etcdtest.Server, testcerts.Files) {
	t.Helper()
	certs := testcerts.New(t, t.TempDir())
	return etcdtest.StartServer(t, etcdtest.WithTLS(certs), etcdtest.WithAuth("rootpw")), certs
}

func TestNewWithCertificateAndPasswordReadsAndWritesUnderThePrefix(t *testing.T) {
	srv, certs := securedEtcd(t)
	cfg := Config{
		Endpoints: srv.Endpoints(), Prefix: "/tls-test/",
		Username: etcdtest.RootUser, Password: "rootpw",
		CACert: certs.CA, ClientCert: certs.ClientCert, ClientKey: certs.ClientKey,
		Logger: zap.NewNop(),
	}
	ctx := context.Background()
	c, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	key := cfg.NormalizedPrefix() + "/k"
	if _, err := c.Put(ctx, key, "v"); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	resp, err := c.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get %s: %v %v", key, resp, err)
	}
}

// Each way of getting the credentials wrong is a startup error that says which
// part is wrong and names the endpoint, within the dial timeout: an operator
// fixing a deployment must not stare at a worker that hangs at startup.
func TestWrongCredentialsAreClearErrorsWithinTheDialTimeout(t *testing.T) {
	srv, certs := securedEtcd(t)
	other := testcerts.New(t, t.TempDir()) // an unrelated CA
	good := Config{
		Endpoints: srv.Endpoints(),
		Username:  etcdtest.RootUser, Password: "rootpw",
		CACert: certs.CA, ClientCert: certs.ClientCert, ClientKey: certs.ClientKey,
		DialTimeout: 3 * time.Second,
		Logger:      zap.NewNop(),
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		wants []string
	}{
		{"no client certificate", func(c *Config) { c.ClientCert, c.ClientKey = "", "" }, []string{"certificate"}},
		{"wrong password", func(c *Config) { c.Password = "wrong" }, []string{"authentication", "ETCD_PASSWORD"}},
		{"server certificate of another CA", func(c *Config) { c.CACert = other.CA }, []string{"certificate", "x509"}},
		{"client certificate of another CA", func(c *Config) { c.ClientCert, c.ClientKey = other.ClientCert, other.ClientKey }, []string{"certificate"}},
		{"plain http to the TLS port", func(c *Config) {
			c.Endpoints = []string{strings.Replace(srv.Endpoints()[0], "https://", "http://", 1)}
			c.CACert, c.ClientCert, c.ClientKey = "", "", ""
		}, []string{"https://"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			start := time.Now()
			c, err := New(context.Background(), cfg)
			took := time.Since(start)
			if err == nil {
				_ = c.Close()
				t.Fatal("New succeeded")
			}
			t.Logf("after %v: %v", took.Round(time.Millisecond), err)
			if took > cfg.DialTimeout+2*time.Second { // slack for a loaded machine
				t.Errorf("New took %v, dial timeout %v", took, cfg.DialTimeout)
			}
			for _, want := range append(tc.wants, cfg.Endpoints[0]) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not mention %q", want)
				}
			}
		})
	}
}
