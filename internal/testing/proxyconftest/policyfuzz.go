package proxyconftest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// PolicyFuzzInput is one input of proxyconf's FuzzPolicyDecisions: strings the fuzzer makes hostile, and a
// shape whose bytes switch the policy's parts on and off.
type PolicyFuzzInput struct {
	Name, Dest1, Dest2, CIDR, Subject string
	// Shape[0]: 1 user "u1", 2 a client CA, 4 Dest2 on the deny list, 8 user "u2". Every further byte is a
	// rule set: 1 report mode, 2 source CIDR, 4 a user (u1 for the first, third... rule set, u2 for the others,
	// refused by validation where the proxy lacks it), 8 subject Subject, 16 Dest1, 32 Dest2, 64 port 8443,
	// 128 a name of its own (otherwise Name, so two such rule sets clash).
	Shape []byte
}

// PolicyFuzzSeeds start FuzzPolicyDecisions: valid policies of each kind, and some validation refuses.
var PolicyFuzzSeeds = []PolicyFuzzInput{
	{"ci", "api.example.com", ".evil.example", "10.1.0.0/16", "payments", []byte{2 | 4, 2 | 16 | 64, 1 | 8 | 32 | 128}},
	{"report", ".example.com", "x.example.com", "10.0.0.0/8", "builds", []byte{1 | 2 | 4, 2 | 8 | 32 | 128, 1 | 8 | 128, 1 | 4 | 16 | 128}},
	{"users", "a.io", "b.io", "2001:db8:1::/48", "svc", []byte{1 | 8, 4 | 2 | 16, 1 | 4 | 128, 4 | 128}},
	{"empty-report", "a.io", "b.io", "10.1.0.0/16", "x", []byte{0, 1 | 2}},
	{"no-policy", "a.io", "b.io", "10.1.0.0/16", "x", []byte{0}},
	{"shadowed", "a.io", "b.io", "10.0.0.0/8", "x", []byte{0, 2, 2 | 128}},
	{"Bad Name", "a.io", "b.io", "10.1.0.0/16", "x", []byte{0, 2}},
	{"unknown-user", "a.io", "b.io", "10.1.0.0/16", "x", []byte{1, 2, 4 | 128}},
	{"hostile", "a.io\nhttp_access allow all", "\"/etc/passwd\"", "0.0.0.0/0", "-i x", []byte{255, 255, 255}},
}

// Settings are the settings i stands for. The proxy admits 10.0.0.0/8 and 2001:db8::/32, allows
// fallback.example on 443 and 8080 to the clients no rule set names, and lets 10.20.0.0/16 through the
// private-range guard.
func (i PolicyFuzzInput) Settings() proxyconf.Settings {
	s := proxyconf.Settings{
		Port:                3128,
		AllowedClientCIDRs:  []string{"10.0.0.0/8", "2001:db8::/32"},
		AllowedDestinations: []string{"fallback.example"},
		AllowedPorts:        []int{443, 8080},
		AllowedPrivateCIDRs: []string{"10.20.0.0/16"},
	}
	if len(i.Shape) == 0 {
		return s
	}
	flags := i.Shape[0]
	if flags&1 != 0 {
		s.Users = append(s.Users, proxyconf.BasicAuth{Username: "u1", Password: "password-1"})
	}
	if flags&8 != 0 {
		s.Users = append(s.Users, proxyconf.BasicAuth{Username: "u2", Password: "password-2"})
	}
	if flags&2 != 0 {
		cert, key := TLSPair()
		s.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: clientCAPEM()}
	}
	if flags&4 != 0 {
		s.DeniedDestinations = []string{i.Dest2}
	}
	for n, b := range i.Shape[1:] {
		r := proxyconf.RuleSet{Name: i.Name}
		if b&128 != 0 {
			r.Name = fmt.Sprintf("%s-%d", i.Name, n)
		}
		if b&1 != 0 {
			r.Mode = proxyconf.RuleSetReport
		}
		if b&2 != 0 {
			r.Clients.SourceCIDRs = []string{i.CIDR}
		}
		if b&4 != 0 {
			r.Clients.Users = []string{fmt.Sprintf("u%d", 1+n%2)}
		}
		if b&8 != 0 {
			r.Clients.CertificateSubjects = []string{i.Subject}
		}
		if b&16 != 0 {
			r.Destinations = append(r.Destinations, i.Dest1)
		}
		if b&32 != 0 {
			r.Destinations = append(r.Destinations, i.Dest2)
		}
		if b&64 != 0 {
			r.Ports = []int{8443}
		}
		s.RuleSets = append(s.RuleSets, r)
	}
	return s
}

var (
	clientCAOnce sync.Once
	clientCA     string
)

// clientCAPEM is one valid client CA, made once for the same reason as TLSPair.
func clientCAPEM() string {
	clientCAOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "fuzz clients"}, NotBefore: time.Now().Add(-time.Hour),
			NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			panic(err)
		}
		clientCA = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	})
	return clientCA
}
