package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"
)

// SignedCert makes a key and a certificate from tmpl, valid from an hour ago for a day, signed with parentKey
// or self-signed when parent is nil. It returns the key, the parsed certificate and the certificate as PEM.
func SignedCert(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, *x509.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// SelfSignedPEM is a server certificate for host and its key, both PEM: what a user gives the proxy's tls
// block. A client that trusts the certificate itself can verify the proxy.
func SelfSignedPEM(t testing.TB, host string) (certPEM, keyPEM string) {
	t.Helper()
	key, _, certPEM := SignedCert(t, &x509.Certificate{
		Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, nil, nil)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

// CA is a root and an intermediate CA; leaves are signed by the intermediate, so a client trusting only the
// root verifies a leaf only when the server also sends the intermediate.
type CA struct {
	Root, Inter       *x509.Certificate
	RootPEM, InterPEM string
	InterKey          *ecdsa.PrivateKey
}

// NewCA makes a root and an intermediate signed by it.
func NewCA(t testing.TB) *CA {
	t.Helper()
	rootKey, rootCert, rootPEM := SignedCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: "egress test root"}, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, nil, nil)
	interKey, interCert, interPEM := SignedCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: "egress test intermediate"}, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, rootCert, rootKey)
	return &CA{Root: rootCert, Inter: interCert, RootPEM: rootPEM, InterPEM: interPEM, InterKey: interKey}
}

// Leaf returns a server certificate chain (leaf, then intermediate) for 127.0.0.1 and proxy.test, and its
// PKCS #8 key.
func (ca *CA) Leaf(t testing.TB) (chainPEM, keyPEM string) {
	t.Helper()
	key, _, certPEM := SignedCert(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "egress proxy"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:    []string{"proxy.test"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}, ca.Inter, ca.InterKey)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM + ca.InterPEM, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}
