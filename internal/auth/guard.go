package auth

import (
	"crypto/tls"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons a call is refused, the reason label of tidemark_auth_failures_total.
const (
	ReasonMissingToken = "missing_token"  // no bearer token presented
	ReasonInvalidToken = "invalid_token"  // a token that is not one of the configured ones
	ReasonNoClientCert = "no_client_cert" // a client CA is configured and no certificate verified against it
)

// Surfaces, the surface label of tidemark_auth_failures_total.
const (
	SurfaceHTTP = "http"
	SurfaceGRPC = "grpc"
)

// Metrics are the credential check's series.
type Metrics struct {
	// Failures counts refused calls by surface (http, grpc) and reason.
	Failures *prometheus.CounterVec
}

// NewMetrics registers the series in reg (a process registers them once and
// shares them between its HTTP and gRPC guards).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_auth_failures_total",
			Help: "Calls refused for a missing or wrong credential, by surface (http, grpc) and reason (missing_token, invalid_token, no_client_cert).",
		}, []string{"surface", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.Failures)
	}
	return m
}

// GuardConfig is what a Guard checks.
type GuardConfig struct {
	// Tokens, if set, are the bearer tokens accepted.
	Tokens *Tokens
	// RequireClientCert requires a client certificate that verified against the
	// server's client CA (tls.Config.ClientCAs with VerifyClientCertIfGiven: the
	// handshake verifies a certificate when one is given, the Guard requires it
	// on protected calls, so probes without one still reach health and metrics).
	RequireClientCert bool
	// Metrics count failures (not counted when nil).
	Metrics *Metrics
	// Logger gets a warn line per refused call (discarded when nil).
	Logger *slog.Logger
}

// Guard checks the credential of protected calls. A nil *Guard accepts every
// call (authentication disabled).
type Guard struct {
	cfg GuardConfig
}

// NewGuard returns a guard for cfg, or nil (accept everything) if cfg requires
// nothing.
func NewGuard(cfg GuardConfig) *Guard {
	if cfg.Tokens.Len() == 0 && !cfg.RequireClientCert {
		return nil
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Guard{cfg: cfg}
}

// check returns "" if the credential presented passes, else the reason it does
// not. header is the authorization value ("Bearer <token>"), state the
// connection's TLS state (nil on plaintext).
func (g *Guard) check(header string, state *tls.ConnectionState) string {
	if g.cfg.RequireClientCert && (state == nil || len(state.VerifiedChains) == 0) {
		return ReasonNoClientCert
	}
	if g.cfg.Tokens.Len() == 0 {
		return ""
	}
	tok, ok := bearer(header)
	if !ok {
		return ReasonMissingToken
	}
	if !g.cfg.Tokens.Valid(tok) {
		return ReasonInvalidToken
	}
	return ""
}

// refused counts and logs a refused call. Never the token: only where the call
// came from and what it asked for.
func (g *Guard) refused(surface, reason, remote, route string) {
	if g.cfg.Metrics != nil {
		g.cfg.Metrics.Failures.WithLabelValues(surface, reason).Inc()
	}
	g.cfg.Logger.Warn("unauthenticated call refused", "surface", surface, "reason", reason, "remote", remote, "route", route)
}

// message is what the refused caller is told: what to present, not what was wrong
// with what it presented beyond the reason.
func message(reason string) string {
	switch reason {
	case ReasonNoClientCert:
		return "a client certificate signed by the server's client CA is required"
	case ReasonInvalidToken:
		return "the bearer token is not valid"
	default:
		return "a bearer token is required (Authorization: Bearer <token>; AUTH_TOKEN_FILE for the CLIs)"
	}
}

// bearer extracts the token of an "Authorization: Bearer <token>" value (the
// scheme is case-insensitive, RFC 6750).
func bearer(header string) (string, bool) {
	const scheme = "bearer "
	if len(header) <= len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return "", false
	}
	return header[len(scheme):], true
}
