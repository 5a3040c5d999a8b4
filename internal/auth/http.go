package auth

import (
	"crypto/tls"
	"net/http"

	"github.com/tidemark-io/tidemark/internal/httpjson"
)

// CodeUnauthenticated is the error code of a 401 answer.
const CodeUnauthenticated = "UNAUTHENTICATED"

// Require returns next behind the guard: a request without a valid credential is
// answered 401 {"error":{"code":"UNAUTHENTICATED",...}} with
// WWW-Authenticate: Bearer realm="tidemark" before next runs or the body is read.
// A nil guard returns next.
func (g *Guard) Require(next http.Handler) http.Handler {
	if g == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if reason := g.check(r.Header.Get("Authorization"), r.TLS); reason != "" {
			route := r.Pattern
			if route == "" {
				route = r.Method + " " + r.URL.Path
			}
			g.refused(SurfaceHTTP, reason, r.RemoteAddr, route)
			w.Header().Set("WWW-Authenticate", `Bearer realm="tidemark"`)
			// The body is not read: close the connection rather than drain it.
			w.Header().Set("Connection", "close")
			httpjson.WriteError(w, http.StatusUnauthorized, CodeUnauthenticated, message(reason))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Transport is an http.RoundTripper that adds "Authorization: Bearer <token>" to
// every request it sends through Base (http.DefaultTransport when nil). The
// request is cloned, never modified.
type Transport struct {
	Token string
	Base  http.RoundTripper
}

// HTTPClient is an HTTP client that sends token on every request (none when empty)
// and, with tlsCfg, speaks TLS as it says: how the master and its dashboard call
// the workers' data API with the cluster's credential.
func HTTPClient(token string, tlsCfg *tls.Config) *http.Client {
	base := http.DefaultTransport.(*http.Transport).Clone()
	if tlsCfg != nil {
		base.TLSClientConfig = tlsCfg.Clone()
	}
	return &http.Client{Transport: &Transport{Token: token, Base: base}}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if t.Token == "" {
		return base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	SetHeader(r.Header, t.Token)
	return base.RoundTrip(r)
}

// SetHeader sets the bearer token in h (nothing when token is empty).
func SetHeader(h http.Header, token string) {
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
}
