package proxyconf_test

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/proxyconftest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// TestVocabularyAdmitsEveryRenderedConfig checks each parse case, and one with a client CA, the way a guest
// that is handed its config checks it (the aws guest's agent): every directive known, pinned ones as pinned,
// every acl type and listening option one the renderer uses. A policy config (issue 39) passes as an old one
// does, and the old logformat stays admitted beside the policy's.
func TestVocabularyAdmitsEveryRenderedConfig(t *testing.T) {
	t.Parallel()
	opts := vmguest.RenderOptions()
	v := proxyconf.VocabularyOf(opts)
	cert, key := proxyconftest.TLSPair()
	ca := newCAForVocabulary(t)
	cases := proxyconftest.ParseCases()
	withCA := cases["rule sets and a deny list"]
	withCA.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: ca.pem, ClientCRLPEM: ca.crl}
	withCA.RuleSets = append(withCA.RuleSets, proxyconf.RuleSet{Name: "svc", Clients: proxyconf.RuleSetClients{CertificateSubjects: []string{"svc"}}})
	cases["client certificates"] = withCA
	for name, s := range proxyconftest.ParseCases() {
		s.LogFormat = proxyconf.LogFormatJSON
		cases[name+" json"] = s
	}
	for name, s := range cases {
		conf, err := proxyconf.RenderSquidConf(s, opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, l := range strings.Split(string(conf), "\n") {
			f := strings.Fields(l)
			if len(f) == 0 || strings.HasPrefix(f[0], "#") {
				continue
			}
			d := f[0]
			switch {
			case !slices.Contains(v.Directives, d):
				t.Errorf("%s: directive %q is not in the vocabulary", name, d)
			case v.Pinned[d] != nil && !slices.Contains(v.Pinned[d], strings.Join(f, " ")):
				t.Errorf("%s: %q is not a pinned line of %s: %q", name, l, d, v.Pinned[d])
			case d == "acl" && (len(f) < 4 || !slices.Contains(v.ACLTypes, f[2])):
				t.Errorf("%s: acl type of %q is not in the vocabulary %q", name, l, v.ACLTypes)
			case d == "http_port" || d == "https_port":
				for _, o := range f[2:] {
					if !slices.Contains(v.PortOptions, o) {
						t.Errorf("%s: listening option %q is not in the vocabulary %q", name, o, v.PortOptions)
					}
				}
			}
		}
	}
	if len(v.Pinned["logformat"]) != 3 {
		t.Errorf("logformat is pinned to %q, want the text line without a policy, the one with, and the JSON line", v.Pinned["logformat"])
	}
}

type vocabularyCA struct{ pem, crl string }

// newCAForVocabulary is a client CA and its empty CRL.
func newCAForVocabulary(t *testing.T) vocabularyCA {
	t.Helper()
	key, cert, caPEM := testutil.SignedCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: "clients"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}, nil, nil)
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(1), ThisUpdate: time.Now(), NextUpdate: time.Now().Add(time.Hour)}, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return vocabularyCA{pem: caPEM, crl: string(pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}))}
}
