package etcdcli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// alertWait bounds how long diagnose waits, without a deadline in its context,
// for etcd to refuse a connection that looks fine to the client: after a TLS 1.3
// handshake etcd checks the client's certificate and says no in an alert; a
// TLS-only etcd closes a plain connection.
const alertWait = time.Second

// diagnose connects to endpoint ep the way the etcd client does (TCP, then TLS
// with tlsCfg when the endpoint or the settings ask for it) and returns why that
// connection fails, or nil when it works. The etcd client itself retries a
// failing connection until its context ends and then reports only "context
// deadline exceeded", which hides a refused port, an untrusted server certificate
// or a client certificate etcd rejects.
func diagnose(ctx context.Context, ep string, tlsCfg *tls.Config) error {
	host, useTLS := hostOf(ep, tlsCfg != nil)
	if host == "" {
		return nil // unix sockets and the like: the client's own error stands
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = conn.Close() }()
	// Closing on ctx's end interrupts the wait for an alert below.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if !useTLS {
		return plainAnswers(ctx, conn)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if tlsCfg != nil {
		cfg = tlsCfg.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(host)
	}
	// The etcd client speaks gRPC over HTTP/2: offer what it offers, so a server
	// that insists on ALPN does not fail this probe alone.
	cfg.NextProtos = []string{"h2"}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("TLS handshake (--etcd-ca-cert, --etcd-client-cert, --etcd-client-key): %w", err)
	}
	_ = tc.SetReadDeadline(alertDeadline(ctx))
	_, err = tc.Read(make([]byte, 1))
	switch {
	case err == nil || errors.Is(err, os.ErrDeadlineExceeded):
		return nil // etcd waits for the client to speak: the connection is fine
	case errors.Is(err, io.EOF):
		return errors.New("TLS: etcd closed the connection after the handshake")
	default:
		return fmt.Errorf("TLS handshake (--etcd-ca-cert, --etcd-client-cert, --etcd-client-key): %w", err)
	}
}

// plainAnswers sends what a gRPC client sends first on a plain connection (the
// HTTP/2 preface) and fails when the server closes the connection instead of
// answering or waiting: what a TLS-only etcd does with an http:// client.
func plainAnswers(ctx context.Context, conn net.Conn) error {
	_ = conn.SetDeadline(alertDeadline(ctx))
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	_, err := conn.Read(make([]byte, 1))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	return fmt.Errorf("etcd closed a plain connection (%w): if it serves TLS, use https:// and --etcd-ca-cert", err)
}

// alertDeadline is when to stop waiting for the server to refuse a connection:
// the end of ctx, since nothing waits for a diagnosis of a working connection,
// and a loaded etcd may take long to say no.
func alertDeadline(ctx context.Context) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(alertWait)
}

// diagnoses are the results of diagnose for each endpoint, run in the background.
type diagnoses map[string]chan error

// startDiagnoses diagnoses every endpoint in the background, bounded by ctx.
func startDiagnoses(ctx context.Context, eps []string, tlsCfg *tls.Config) diagnoses {
	d := diagnoses{}
	for _, ep := range eps {
		ch := make(chan error, 1)
		d[ep] = ch
		go func() {
			err := diagnose(ctx, ep, tlsCfg)
			if ctx.Err() != nil {
				err = nil // cut short by the deadline: it shows nothing
			}
			ch <- err
			ch <- err // of and all may both ask
		}()
	}
	return d
}

// of waits for the diagnosis of endpoint ep.
func (d diagnoses) of(ep string) error {
	if ch, ok := d[ep]; ok {
		return <-ch
	}
	return nil
}

// all waits for every diagnosis; the error names the endpoint when there are
// several. It is nil when no connection showed a problem.
func (d diagnoses) all() error {
	var errs []error
	for ep := range d {
		if err := d.of(ep); err != nil {
			if len(d) > 1 {
				err = fmt.Errorf("%s: %w", ep, err)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// hostOf is the host:port of endpoint ep and whether the client uses TLS for it:
// https:// always, http:// never, and a bare host:port when TLS settings are
// given. It is "" for endpoints that are not TCP (unix://).
func hostOf(ep string, tlsSettings bool) (host string, useTLS bool) {
	if !strings.Contains(ep, "://") {
		return ep, tlsSettings
	}
	u, err := url.Parse(ep)
	if err != nil {
		return "", false
	}
	switch u.Scheme {
	case "https":
		return u.Host, true
	case "http":
		return u.Host, false
	default:
		return "", false
	}
}
