package testcerts

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"testing"
)

// A client holding the client certificate and trusting the CA completes a mutual
// TLS handshake with a server holding the server certificate, on a loopback IP.
func TestFilesCompleteAMutualTLSHandshakeOnLoopback(t *testing.T) {
	f := New(t, t.TempDir())
	pool := certPool(t, f.CA)
	serverCert, err := tls.LoadX509KeyPair(f.ServerCert, f.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	peer := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			peer <- err.Error()
			return
		}
		defer func() { _ = c.Close() }()
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			peer <- err.Error()
			return
		}
		peer <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
		_, _ = io.WriteString(c, "ok")
	}()

	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer func() { _ = conn.Close() }()
	if got := <-peer; got != ClientName {
		t.Fatalf("server saw client %q, want %q", got, ClientName)
	}
}

// Certificates of one New do not verify against another's CA: the CA mismatch
// tests rely on it.
func TestTwoAuthoritiesDoNotTrustEachOther(t *testing.T) {
	a, b := New(t, t.TempDir()), New(t, t.TempDir())
	pem, err := os.ReadFile(b.ServerCert)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pem, mustRead(t, b.ServerKey))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: certPool(t, a.CA), DNSName: "localhost"}); err == nil {
		t.Fatal("a server certificate of one CA verified against another")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: certPool(t, b.CA), DNSName: net.IPv6loopback.String()}); err != nil {
		t.Fatalf("server certificate does not verify for ::1 against its own CA: %v", err)
	}
}

func certPool(t *testing.T, path string) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(mustRead(t, path)) {
		t.Fatalf("%s: no certificate", path)
	}
	return pool
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
