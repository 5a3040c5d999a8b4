package etcdcli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/tidemark-io/tidemark/internal/cli"
	"github.com/tidemark-io/tidemark/pkg/coord/keys"
	"github.com/tidemark-io/tidemark/testutil/etcdtest"
	"github.com/tidemark-io/tidemark/testutil/testcerts"
)

func TestFlagsComeFromTheEnvironment(t *testing.T) {
	var c Config
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.AddFlags(fs, "empty: no etcd")
	env := map[string]string{
		"ETCD_ENDPOINTS":    "http://a:2379, http://b:2379",
		"ETCD_PREFIX":       "/custom/",
		"ETCD_USERNAME":     "u",
		"ETCD_PASSWORD":     "p",
		"ETCD_DIAL_TIMEOUT": "7s",
		"ETCD_CA_CERT":      "/ca.pem",
	}
	if err := cli.ApplyEnv(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if got := c.endpoints(); len(got) != 2 || got[0] != "http://a:2379" || got[1] != "http://b:2379" {
		t.Errorf("endpoints = %q", got)
	}
	if c.NormalizedPrefix() != "/custom" || c.Username != "u" || c.Password != "p" || c.DialTimeout != 7*time.Second || c.CACert != "/ca.pem" {
		t.Errorf("config = %+v (prefix %q)", c, c.NormalizedPrefix())
	}
	for _, env := range []string{"ETCD_ENDPOINTS", "ETCD_PREFIX", "ETCD_USERNAME", "ETCD_PASSWORD", "ETCD_CA_CERT",
		"ETCD_CLIENT_CERT", "ETCD_CLIENT_KEY", "ETCD_DIAL_TIMEOUT"} {
		if !strings.Contains(fs.FlagUsages(), env) {
			t.Errorf("flag usages do not mention %s", env)
		}
	}
}

func TestEmptyEndpointsDisableEtcd(t *testing.T) {
	c := Config{Endpoints: []string{"", " "}}
	if c.Enabled() {
		t.Error("blank endpoints count as configured")
	}
	if _, err := New(context.Background(), c); err == nil || !strings.Contains(err.Error(), "ETCD_ENDPOINTS") {
		t.Errorf("New without endpoints: %v", err)
	}
	if (&Config{}).NormalizedPrefix() != keys.DefaultPrefix {
		t.Error("empty prefix is not the default")
	}
}

// An etcd that is not there must be a startup error naming where it was looked
// for, not a client that hangs on its first request.
func TestUnreachableEtcdIsAnErrorNamingTheEndpoints(t *testing.T) {
	c := Config{Endpoints: []string{"http://127.0.0.1:1", "127.0.0.1:2"}, DialTimeout: 300 * time.Millisecond, Logger: zap.NewNop()}
	_, err := New(context.Background(), c)
	if err == nil {
		t.Fatal("New succeeded with nothing listening")
	}
	for _, want := range []string{"http://127.0.0.1:1", "127.0.0.1:2", "unreachable", "ETCD_ENDPOINTS"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestNewConnectsWithAndWithoutAuthentication(t *testing.T) {
	srv := etcdtest.StartServer(t)
	admin := srv.Client(t)
	ctx := context.Background()

	c, err := New(ctx, Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()

	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	c, err = New(ctx, Config{Endpoints: srv.Endpoints(), Username: "root", Password: "rootpw", Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("with the right password: %v", err)
	}
	if _, err := c.Get(ctx, "/k"); err != nil {
		t.Fatalf("authenticated read: %v", err)
	}
	_ = c.Close()

	_, err = New(ctx, Config{Endpoints: srv.Endpoints(), Username: "root", Password: "wrong", DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err == nil || !strings.Contains(err.Error(), srv.Endpoints()[0]) {
		t.Fatalf("wrong password: %v; want an error naming the endpoint", err)
	}
	if _, err := New(ctx, Config{Endpoints: srv.Endpoints(), Username: "root"}); err == nil || !strings.Contains(err.Error(), "ETCD_PASSWORD") {
		t.Fatalf("username without password: %v", err)
	}
}

func TestTLSConfigFromFiles(t *testing.T) {
	dir := t.TempDir()
	certs := testcerts.New(t, dir)
	ca, cert, key := certs.CA, certs.ClientCert, certs.ClientKey

	if cfg, err := (&Config{}).TLS(); cfg != nil || err != nil {
		t.Errorf("no files: %v, %v; want no TLS", cfg, err)
	}
	cfg, err := (&Config{CACert: ca, ClientCert: cert, ClientKey: key}).TLS()
	if err != nil || cfg.RootCAs == nil || len(cfg.Certificates) != 1 {
		t.Fatalf("all files: %+v, %v", cfg, err)
	}
	if _, err := (&Config{ClientCert: cert}).TLS(); err == nil || !strings.Contains(err.Error(), "ETCD_CLIENT_KEY") {
		t.Errorf("cert without key: %v", err)
	}
	if _, err := (&Config{CACert: filepath.Join(dir, "missing.pem")}).TLS(); err == nil || !strings.Contains(err.Error(), "ETCD_CA_CERT") {
		t.Errorf("missing CA file: %v", err)
	}
	if _, err := (&Config{CACert: key}).TLS(); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("CA file without a certificate: %v", err)
	}
}
