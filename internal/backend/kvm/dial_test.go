package kvm

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
)

// selfSigned writes a self-signed certificate and its key as PEM files in dir and returns their paths.
func selfSigned(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// A TLS server this client cannot trust, or one that refuses this client's certificate, fails the dial at
// once and Permanent: no dial retry, no "unreachable" after the DialTimeout, Unauthorized in a health check.
func TestTLSRefusalsArePermanentAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clientCert, clientKey := selfSigned(t, dir, "client")
	otherCA, _ := selfSigned(t, dir, "other-ca")

	// The server asks for a client certificate signed by a CA the client's is not.
	strict := httptest.NewUnstartedServer(http.NotFoundHandler())
	strictPool := x509.NewCertPool()
	otherPEM, err := os.ReadFile(otherCA)
	if err != nil {
		t.Fatal(err)
	}
	strictPool.AppendCertsFromPEM(otherPEM)
	strict.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: strictPool, MinVersion: tls.VersionTLS12}
	strict.StartTLS()
	t.Cleanup(strict.Close) // after the parallel subtests, which run once this function has returned
	// httptest's own certificate, written out so the client can trust it.
	serverCA := filepath.Join(dir, "server-ca.pem")
	if err := os.WriteFile(serverCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: strict.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		ca   string
		want string
	}{
		"server certificate not trusted":  {otherCA, "certificate"},
		"client certificate not accepted": {serverCA, "remote error"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, port, _ := net.SplitHostPort(strict.Listener.Addr().String())
			h := HostConfig{
				URI: "qemu+tls://127.0.0.1:" + port + "/system", BaseVolume: "b", DialTimeout: time.Minute,
				TLSCACertFile: tc.ca, TLSClientCertFile: clientCert, TLSClientKeyFile: clientKey,
			}
			b, err := New(Config{Hosts: map[string]HostConfig{"h": h}})
			if err != nil {
				t.Fatal(err)
			}
			// A refusal retried as if the host were down would end as unreachable after the DialTimeout.
			_, err = b.Get(context.Background(), backend.ProviderID{Backend: Kind, Target: "h", Name: "x"})
			var ue *libvirtconn.UnreachableError
			if backend.ClassOf(err) != backend.ClassPermanent || errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Get = %v, want Permanent at once, mentioning %q", err, tc.want)
			}
			if hs := b.Check(context.Background()); hs[0].Reason != backend.HealthUnauthorized {
				t.Errorf("Check = %+v, want Unauthorized", hs)
			}
		})
	}
}
