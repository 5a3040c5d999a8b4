// Package testcerts writes a throwaway certificate authority and certificates
// signed by it into a test's directory, for tests of TLS and mutual TLS between
// real processes and servers (etcd with client-cert auth, worker and master).
//
// Invariants: every file New returns exists and is PEM; the server certificate is
// valid for 127.0.0.1, ::1 and localhost (so any loopback URL verifies); the client
// certificate is for client authentication only and its common name, ClientName,
// is not a user of any server, so a test cannot pass by the certificate's name
// alone; keys are ECDSA P-256 and certificates are valid from an hour ago to a day
// from now. Two calls of New make two unrelated authorities: certificates of one
// do not verify against the other, which is how a test builds a CA mismatch.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ClientName is the common name of the client certificate.
const ClientName = "tidemark-test-client"

// Files are the paths of the PEM files New wrote.
type Files struct {
	// CA is the authority's certificate: the trust root of servers and clients.
	CA string
	// ServerCert and ServerKey are a server certificate for the loopback names.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client certificate signed by the same CA.
	ClientCert, ClientKey string
}

// New writes a new CA, a server certificate and a client certificate, with their
// keys, into dir (ca.pem, server.pem, server-key.pem, client.pem, client-key.pem)
// and returns their paths. It fails t on any error.
func New(t testing.TB, dir string) Files {
	t.Helper()
	f := Files{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"),
		ServerKey:  filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client-key.pem"),
	}
	now := time.Now()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tidemark-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER := sign(t, caTmpl, caTmpl, caKey, caKey)
	writeCert(t, f.CA, caDER)
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("testcerts: parse CA: %v", err)
	}

	serverKey := newKey(t)
	serverTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// ClientAuth too: etcd dials itself with its server certificate (gateway,
		// peers), as etcd's own documentation generates them.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	writeCert(t, f.ServerCert, sign(t, serverTmpl, ca, serverKey, caKey))
	writeKey(t, f.ServerKey, serverKey)

	clientKey := newKey(t)
	clientTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: ClientName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	writeCert(t, f.ClientCert, sign(t, clientTmpl, ca, clientKey, caKey))
	writeKey(t, f.ClientKey, clientKey)
	return f
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testcerts: generate key: %v", err)
	}
	return k
}

func sign(t testing.TB, tmpl, parent *x509.Certificate, key, parentKey *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatalf("testcerts: sign %s: %v", tmpl.Subject.CommonName, err)
	}
	return der
}

func writeCert(t testing.TB, path string, der []byte) {
	t.Helper()
	writePEM(t, path, &pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func writeKey(t testing.TB, path string, k *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatalf("testcerts: marshal key for %s: %v", path, err)
	}
	writePEM(t, path, &pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func writePEM(t testing.TB, path string, b *pem.Block) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(b), 0o600); err != nil {
		t.Fatalf("testcerts: %v", err)
	}
}
