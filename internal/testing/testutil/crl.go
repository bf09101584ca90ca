package testutil

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

// ClientCA is a self-signed CA that may sign certificates and CRLs, as one issuing client certificates does:
// PEM is what a proxy's client CA setting holds.
type ClientCA struct {
	PEM  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewClientCA makes a client CA named name.
func NewClientCA(t testing.TB, name string) ClientCA {
	t.Helper()
	key, cert, p := SignedCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}, nil, nil)
	return ClientCA{PEM: p, cert: cert, key: key}
}

// CRL is a PEM revocation list the CA signs, numbered number and revoking nothing: two numbers give two
// different lists.
func (ca ClientCA) CRL(t testing.TB, number int64) string {
	t.Helper()
	return ca.CRLRevoking(t, number)
}

// CRLRevoking is a PEM revocation list the CA signs, numbered number, that revokes the certificates given
// (ClientCertificate's, by their serial numbers).
func (ca ClientCA) CRLRevoking(t testing.TB, number int64, revoked ...tls.Certificate) string {
	t.Helper()
	now := time.Now()
	var entries []x509.RevocationListEntry
	for _, c := range revoked {
		entries = append(entries, x509.RevocationListEntry{SerialNumber: c.Leaf.SerialNumber, RevocationTime: now.Add(-time.Minute)})
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(number), ThisUpdate: now.Add(-time.Hour),
		NextUpdate: now.Add(24 * time.Hour), RevokedCertificateEntries: entries}, ca.cert, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}))
}

// ClientCertificate is a certificate for TLS clients of common name cn that the CA signs, with its key.
func (ca ClientCA) ClientCertificate(t testing.TB, cn string) tls.Certificate {
	t.Helper()
	key, cert, _ := SignedCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca.cert, ca.key)
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}
