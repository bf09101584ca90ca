package provider

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"time"
)

const upstreamEnvVar = "EGRESS_E2E_UPSTREAM"

// serveUpstreams answers every request on addr:80 (HTTP) and addr:443 (HTTPS, self-signed) with 200 and the
// host it was asked for, so a test can tell which destination a proxied request reached.
func serveUpstreams(addr string) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "upstream %s\n", r.Host) // a failed write shows in the client's check
	})
	cert, err := selfSigned()
	if err != nil {
		log.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() {
		srv := &http.Server{Addr: net.JoinHostPort(addr, "80"), Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		errs <- srv.ListenAndServe()
	}()
	go func() {
		srv := &http.Server{Addr: net.JoinHostPort(addr, "443"), Handler: handler, ReadHeaderTimeout: 10 * time.Second,
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
		errs <- srv.ListenAndServeTLS("", "")
	}()
	log.Fatal(<-errs)
}

func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upstream.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"allowed.test", "denied.test", "other.test"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
