package auth

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/tidemark-io/tidemark/internal/cli"
)

// Flags are the credential settings of a binary, each a flag and an environment
// variable.
type Flags struct {
	TokenFile string // --auth-token-file AUTH_TOKEN_FILE: one token per line, the first is sent
	Token     string // --auth-token AUTH_TOKEN
	CertFile  string // --tls-cert TLS_CERT
	KeyFile   string // --tls-key TLS_KEY
	CAFile    string // --tls-ca TLS_CA: the CA of the servers this process calls
	ClientCA  string // --tls-client-ca TLS_CLIENT_CA (servers only)
	Disabled  bool   // --auth-disabled AUTH_DISABLED (servers only)
}

// AddServerFlags defines the settings of a server (worker serve, master serve) on
// fs: what it requires of callers, its TLS certificate, and what it presents
// when it calls others.
func (f *Flags) AddServerFlags(fs *pflag.FlagSet) {
	f.addCommon(fs, "file of the bearer tokens accepted, one per line (list the new and the old token during a rotation); the first is also sent on outgoing calls",
		"PEM certificate this server presents on HTTP and gRPC (with --tls-key; turns TLS on), and its client certificate on outgoing calls")
	fs.StringVar(&f.ClientCA, "tls-client-ca", "", "PEM CA file: protected calls must present a client certificate signed by it (mutual TLS; needs --tls-cert)")
	cli.BindEnv(fs, "tls-client-ca", "TLS_CLIENT_CA")
	fs.BoolVar(&f.Disabled, "auth-disabled", false, "serve without authentication (no token, no client CA): only on a trusted network; logged loudly")
	cli.BindEnv(fs, "auth-disabled", "AUTH_DISABLED")
}

// AddClientFlags defines the settings of a client (master admin, worker load):
// the token it sends and the TLS it dials with.
func (f *Flags) AddClientFlags(fs *pflag.FlagSet) {
	f.addCommon(fs, "file holding the bearer token to send (the first line of a server's token file)",
		"PEM client certificate to present (with --tls-key; mutual TLS)")
}

// AddTokenFlags defines only the token settings of a client that speaks plain
// HTTP (worker load).
func (f *Flags) AddTokenFlags(fs *pflag.FlagSet) {
	f.addToken(fs, "file holding the bearer token to send (the first line of a server's token file)")
}

func (f *Flags) addToken(fs *pflag.FlagSet, tokenFileUsage string) {
	fs.StringVar(&f.TokenFile, "auth-token-file", "", tokenFileUsage)
	cli.BindEnv(fs, "auth-token-file", "AUTH_TOKEN_FILE")
	fs.StringVar(&f.Token, "auth-token", "", "the bearer token itself, instead of --auth-token-file (prefer the environment variable: flags show in ps)")
	cli.BindEnv(fs, "auth-token", "AUTH_TOKEN")
}

func (f *Flags) addCommon(fs *pflag.FlagSet, tokenFileUsage, certUsage string) {
	f.addToken(fs, tokenFileUsage)
	fs.StringVar(&f.CertFile, "tls-cert", "", certUsage)
	cli.BindEnv(fs, "tls-cert", "TLS_CERT")
	fs.StringVar(&f.KeyFile, "tls-key", "", "PEM key of --tls-cert")
	cli.BindEnv(fs, "tls-key", "TLS_KEY")
	fs.StringVar(&f.CAFile, "tls-ca", "", "PEM CA file that verifies the certificates of the servers called (turns TLS on for outgoing calls)")
	cli.BindEnv(fs, "tls-ca", "TLS_CA")
}

// tokens loads the configured tokens; nil when none is configured.
func (f *Flags) tokens() (*Tokens, error) {
	switch {
	case f.TokenFile != "" && f.Token != "":
		return nil, errors.New("--auth-token-file (AUTH_TOKEN_FILE) and --auth-token (AUTH_TOKEN): give one, not both")
	case f.TokenFile != "":
		return LoadTokenFile("--auth-token-file (AUTH_TOKEN_FILE)", f.TokenFile)
	case f.Token != "":
		return NewTokens("--auth-token (AUTH_TOKEN)", f.Token)
	}
	return nil, nil
}

// Server is what a server's settings build.
type Server struct {
	// Guard checks the credential of protected calls; nil when authentication is
	// disabled.
	Guard *Guard
	// TLS is the server's TLS configuration for HTTP and gRPC; nil: plaintext.
	TLS *tls.Config
	// Client is the credential of the server's own outgoing calls.
	Client Client
}

// Client is the credential a process calls others with.
type Client struct {
	// Token is sent on every call; empty: none.
	Token string
	// TLS is the TLS configuration of outgoing connections; nil: plaintext.
	TLS *tls.Config
}

// Server checks the settings and builds the server's guard and TLS
// configuration. It refuses to run with no credential at all unless
// --auth-disabled says so (then it logs a warning on log). metrics may be nil.
func (f *Flags) Server(log *slog.Logger, reg prometheus.Registerer) (Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tokens, err := f.tokens()
	if err != nil {
		return Server{}, err
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return Server{}, errors.New("--tls-cert (TLS_CERT) and --tls-key (TLS_KEY): give both or neither")
	}
	if f.ClientCA != "" && f.CertFile == "" {
		return Server{}, errors.New("--tls-client-ca (TLS_CLIENT_CA) needs TLS: give --tls-cert (TLS_CERT) and --tls-key (TLS_KEY) too")
	}
	credentialed := tokens != nil || f.ClientCA != ""
	switch {
	case f.Disabled && credentialed:
		return Server{}, errors.New("--auth-disabled (AUTH_DISABLED) with a token or --tls-client-ca configured: choose one")
	case !f.Disabled && !credentialed:
		return Server{}, errors.New("no credential configured: give --auth-token-file (AUTH_TOKEN_FILE) or --tls-client-ca (TLS_CLIENT_CA), " +
			"or --auth-disabled (AUTH_DISABLED=true) to serve without authentication on a trusted network")
	}
	var s Server
	if f.CertFile != "" {
		if s.TLS, err = ServerTLS(f.CertFile, f.KeyFile, f.ClientCA); err != nil {
			return Server{}, err
		}
	}
	if f.CAFile != "" {
		if s.Client.TLS, err = ClientTLS(f.CAFile, f.CertFile, f.KeyFile); err != nil {
			return Server{}, err
		}
	}
	s.Client.Token = tokens.Outgoing()
	if f.Disabled {
		log.Warn("AUTHENTICATION DISABLED (--auth-disabled): anyone who can reach this process can merge, flush and operate it; use only on a trusted network")
		return s, nil
	}
	s.Guard = NewGuard(GuardConfig{
		Tokens: tokens, RequireClientCert: f.ClientCA != "",
		Metrics: NewMetrics(reg), Logger: log,
	})
	log.Info("authentication on", "tokens", tokens.Len(), "client_ca", f.ClientCA != "", "tls", s.TLS != nil)
	return s, nil
}

// Client checks a client's settings and builds its credential. No token and no
// TLS is allowed: the server will say if it wants one.
func (f *Flags) Client() (Client, error) {
	tokens, err := f.tokens()
	if err != nil {
		return Client{}, err
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return Client{}, errors.New("--tls-cert (TLS_CERT) and --tls-key (TLS_KEY): give both or neither")
	}
	c := Client{Token: tokens.Outgoing()}
	if f.CAFile != "" || f.CertFile != "" {
		if c.TLS, err = ClientTLS(f.CAFile, f.CertFile, f.KeyFile); err != nil {
			return Client{}, fmt.Errorf("client TLS: %w", err)
		}
	}
	return c, nil
}
