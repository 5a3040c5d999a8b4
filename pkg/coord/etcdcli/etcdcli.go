// Package etcdcli builds the etcd client the Tidemark binaries share, from settings
// that are both flags and environment variables: endpoints, the key prefix,
// username/password authentication, TLS files and the dial timeout.
//
// New fails fast and clearly: an etcd that cannot be reached within the dial
// timeout is an error that names every endpoint tried, never a client that hangs on
// its first request, and says why when a plain connection shows it (refused,
// untrusted server certificate, client certificate rejected, TLS expected) or etcd
// says it (authentication failed).
package etcdcli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/tidemark-io/tidemark/internal/auth"
	"github.com/tidemark-io/tidemark/internal/cli"
	"github.com/tidemark-io/tidemark/pkg/coord/keys"
)

// DefaultDialTimeout is ETCD_DIAL_TIMEOUT's default. ETCD_PREFIX's is
// keys.DefaultPrefix, the key schema's.
const DefaultDialTimeout = 5 * time.Second

// Config is how to reach etcd.
type Config struct {
	// Endpoints are client URLs (http://host:2379, https://host:2379) or host:port.
	// None means etcd is not used.
	Endpoints []string
	// Prefix is the key prefix P every Tidemark key lives under.
	Prefix string
	// Username and Password authenticate to etcd (both or neither).
	Username, Password string
	// CACert verifies the server's certificate; ClientCert and ClientKey (both or
	// neither) are this client's certificate. Any of them turns TLS on.
	CACert, ClientCert, ClientKey string
	// DialTimeout bounds connecting and the reachability probe of New.
	DialTimeout time.Duration
	// Logger is the etcd client's own logger; nil keeps the client's default
	// (JSON lines on stderr).
	Logger *zap.Logger
}

// AddFlags defines the etcd flags on fs, each bound to its environment variable:
// --etcd-endpoints ETCD_ENDPOINTS (comma-separated), --etcd-prefix ETCD_PREFIX,
// --etcd-username ETCD_USERNAME, --etcd-password ETCD_PASSWORD, --etcd-ca-cert
// ETCD_CA_CERT, --etcd-client-cert ETCD_CLIENT_CERT, --etcd-client-key
// ETCD_CLIENT_KEY, --etcd-dial-timeout ETCD_DIAL_TIMEOUT. endpointsUsage says what
// an empty endpoint list means for the binary.
func (c *Config) AddFlags(fs *pflag.FlagSet, endpointsUsage string) {
	bind := func(name, env string) { cli.BindEnv(fs, name, env) }
	fs.StringSliceVar(&c.Endpoints, "etcd-endpoints", nil, "etcd client URLs, comma-separated; "+endpointsUsage)
	bind("etcd-endpoints", "ETCD_ENDPOINTS")
	fs.StringVar(&c.Prefix, "etcd-prefix", keys.DefaultPrefix, "key prefix of every Tidemark key in etcd")
	bind("etcd-prefix", "ETCD_PREFIX")
	fs.StringVar(&c.Username, "etcd-username", "", "etcd user (with --etcd-password)")
	bind("etcd-username", "ETCD_USERNAME")
	fs.StringVar(&c.Password, "etcd-password", "", "etcd password (prefer the environment variable: flags show in ps)")
	bind("etcd-password", "ETCD_PASSWORD")
	fs.StringVar(&c.CACert, "etcd-ca-cert", "", "PEM file of the CA that signed etcd's server certificate (turns TLS on)")
	bind("etcd-ca-cert", "ETCD_CA_CERT")
	fs.StringVar(&c.ClientCert, "etcd-client-cert", "", "PEM client certificate for etcd (with --etcd-client-key; turns TLS on)")
	bind("etcd-client-cert", "ETCD_CLIENT_CERT")
	fs.StringVar(&c.ClientKey, "etcd-client-key", "", "PEM key of --etcd-client-cert")
	bind("etcd-client-key", "ETCD_CLIENT_KEY")
	fs.DurationVar(&c.DialTimeout, "etcd-dial-timeout", DefaultDialTimeout, "bound on connecting to etcd at startup")
	bind("etcd-dial-timeout", "ETCD_DIAL_TIMEOUT")
}

// Enabled reports whether any endpoint is configured.
func (c *Config) Enabled() bool { return len(c.endpoints()) > 0 }

// endpoints are the configured endpoints, trimmed, without empty ones.
func (c *Config) endpoints() []string {
	var out []string
	for _, e := range c.Endpoints {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// NormalizedPrefix is Prefix without trailing slashes, keys.DefaultPrefix if
// empty (keys.NormalizePrefix).
func (c *Config) NormalizedPrefix() string { return keys.NormalizePrefix(c.Prefix) }

// TLS returns the TLS configuration of the settings, nil when no TLS file is set.
func (c *Config) TLS() (*tls.Config, error) {
	if c.CACert == "" && c.ClientCert == "" && c.ClientKey == "" {
		return nil, nil
	}
	if (c.ClientCert == "") != (c.ClientKey == "") {
		return nil, errors.New("etcd TLS: --etcd-client-cert (ETCD_CLIENT_CERT) and --etcd-client-key (ETCD_CLIENT_KEY) go together")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CACert != "" {
		pool, err := auth.LoadCertPool(c.CACert)
		if err != nil {
			return nil, fmt.Errorf("etcd CA certificate (--etcd-ca-cert, ETCD_CA_CERT): %w", err)
		}
		cfg.RootCAs = pool
	}
	if c.ClientCert != "" {
		cert, err := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("etcd client certificate %s / key %s: %w", c.ClientCert, c.ClientKey, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// New connects to etcd and checks that at least one endpoint answers within the
// dial timeout (a status request, which needs authentication but no permission).
// An unreachable etcd, bad credentials or bad TLS files are errors naming the
// endpoints tried.
func New(ctx context.Context, c Config) (*clientv3.Client, error) {
	eps := c.endpoints()
	if len(eps) == 0 {
		return nil, errors.New("etcd: no endpoints (--etcd-endpoints, ETCD_ENDPOINTS)")
	}
	if (c.Username == "") != (c.Password == "") {
		return nil, errors.New("etcd: --etcd-username (ETCD_USERNAME) and --etcd-password (ETCD_PASSWORD) go together")
	}
	tlsCfg, err := c.TLS()
	if err != nil {
		return nil, err
	}
	timeout := c.DialTimeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	where := strings.Join(eps, ",")
	// Diagnose every endpoint's connection alongside the client's own dial, so
	// that a failing New explains itself and still returns within the timeout.
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	diag := startDiagnoses(dctx, eps, tlsCfg)
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		Username:    c.Username,
		Password:    c.Password,
		TLS:         tlsCfg,
		DialTimeout: timeout,
		Logger:      c.Logger,
		// No Context: the client must outlive the command's context, so that a
		// worker can still revoke its lease after a shutdown signal.
		// Keep connections to etcd probed, so a dead endpoint is noticed within
		// seconds rather than at the next request.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		// Reconnect within seconds once etcd is back: gRPC's default backoff grows
		// to 120 s, and after a 30 s outage the processes found etcd 10-25 s late
		// (registrations, claims and finishes waited on the reconnect; the etcd
		// outage chaos campaign, e2e/chaos_etcd_test.go).
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		})},
	})
	if err != nil {
		// With a user, clientv3.New authenticates, and fails with the bare
		// deadline when it cannot connect.
		if d := diag.all(); d != nil {
			err = fmt.Errorf("%w (%w)", d, err)
		}
		if errors.Is(err, rpctypes.ErrAuthFailed) {
			err = fmt.Errorf("%w (--etcd-username, ETCD_USERNAME; --etcd-password, ETCD_PASSWORD)", err)
		}
		return nil, fmt.Errorf("etcd at %s: %w", where, err)
	}
	if err := probe(ctx, client, eps, diag, timeout); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("etcd at %s unreachable within %s (--etcd-endpoints, ETCD_ENDPOINTS): %w", where, timeout, err)
	}
	return client, nil
}

// probe asks every endpoint for its status at once and succeeds with the first
// answer; it fails with every endpoint's error when none answers within timeout.
// An endpoint's error says why its connection fails when diag found out.
func probe(ctx context.Context, client *clientv3.Client, eps []string, diag diagnoses, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errs := make(chan error, len(eps))
	for _, ep := range eps {
		go func() {
			_, err := client.Status(ctx, ep)
			if err == nil {
				errs <- nil
				return
			}
			if d := diag.of(ep); d != nil {
				err = fmt.Errorf("%w (%w)", d, err)
			}
			errs <- fmt.Errorf("%s: %w", ep, err)
		}()
	}
	var all []error
	for range eps {
		err := <-errs
		if err == nil {
			return nil // the others end with ctx
		}
		all = append(all, err)
	}
	return errors.Join(all...)
}
