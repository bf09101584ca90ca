package proxyconf

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// crlPEM is a CRL signed by issuer revoking serials.
func crlPEM(t testing.TB, issuer *x509.Certificate, key *ecdsa.PrivateKey, serials ...*big.Int) string {
	t.Helper()
	var revoked []x509.RevocationListEntry
	for _, s := range serials {
		revoked = append(revoked, x509.RevocationListEntry{SerialNumber: s, RevocationTime: time.Now().Add(-time.Minute)})
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: big.NewInt(1), ThisUpdate: time.Now().Add(-time.Hour), NextUpdate: time.Now().Add(24 * time.Hour),
		RevokedCertificateEntries: revoked,
	}, issuer, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}))
}

// clientCA is a CA that may sign certificates and CRLs, as one issuing client certificates does.
type clientCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string
}

func newClientCA(t testing.TB, name string) clientCA {
	t.Helper()
	key, cert, p := testutil.SignedCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}, nil, nil)
	return clientCA{cert: cert, key: key, pem: p}
}

func TestValidateRuleSets(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	issuer, other := newClientCA(t, "clients"), newClientCA(t, "other clients")
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	withCA := &TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: ca.InterPEM}
	base := func(sets ...RuleSet) Settings {
		return Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8", "192.168.0.0/16"}, AllowedDestinations: []string{"a.io"},
			Users: []BasicAuth{{Username: "alice", Password: "password"}}, RuleSets: sets}
	}
	twoUsers := func(sets ...RuleSet) Settings {
		s := base(sets...)
		s.Users = append(s.Users, BasicAuth{Username: "bob", Password: "password"})
		return s
	}
	src := func(c ...string) RuleSetClients { return RuleSetClients{SourceCIDRs: c} }
	users := func(u ...string) RuleSetClients { return RuleSetClients{Users: u} }
	subjects := func(s ...string) RuleSetClients { return RuleSetClients{CertificateSubjects: s} }
	tests := map[string]struct {
		s       Settings
		wantErr string // a substring of the error; "" for valid
	}{
		"no rule sets":                      {s: base()},
		"one by range":                      {s: base(RuleSet{Name: "ci", Clients: src("10.1.0.0/16"), Destinations: []string{".github.com"}, Ports: []int{443, 22}})},
		"one by user, report":               {s: base(RuleSet{Name: "alice-report", Clients: users("alice"), Mode: RuleSetReport})},
		"range and user together":           {s: base(RuleSet{Name: "a", Clients: RuleSetClients{SourceCIDRs: []string{"10.1.0.0/16"}, Users: []string{"alice"}}})},
		"narrower before wider":             {s: base(RuleSet{Name: "a", Clients: src("10.1.0.0/16")}, RuleSet{Name: "b", Clients: src("10.0.0.0/8")})},
		"range across two allowed ranges":   {s: Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/9", "10.128.0.0/9"}, RuleSets: []RuleSet{{Name: "a", Clients: src("10.0.0.0/8")}}}},
		"a user's range then a wider range": {s: base(RuleSet{Name: "a", Clients: RuleSetClients{SourceCIDRs: []string{"10.1.0.0/16"}, Users: []string{"alice"}}}, RuleSet{Name: "b", Clients: src("10.0.0.0/8")})},
		"subjects with a client CA":         {s: Settings{Port: 3128, TLS: withCA, AllowedClientCIDRs: []string{"10.0.0.0/8"}, RuleSets: []RuleSet{{Name: "svc", Clients: subjects("payments", "svc@example.com")}}}},
		"subject then a narrower subject":   {s: Settings{Port: 3128, TLS: withCA, AllowedClientCIDRs: []string{"10.0.0.0/8"}, RuleSets: []RuleSet{{Name: "a", Clients: RuleSetClients{CertificateSubjects: []string{"x"}, SourceCIDRs: []string{"10.1.0.0/16"}}}, {Name: "b", Clients: subjects("x")}}}},
		"denied destinations":               {s: Settings{Port: 3128, DeniedDestinations: []string{".evil.example", "x.io"}}},
		"empty mode is enforce":             {s: base(RuleSet{Name: "a", Clients: users("alice"), Mode: ""})},
		"name with uppercase":               {s: base(RuleSet{Name: "CI", Clients: users("alice")}), wantErr: "lowercase"},
		"name with a space":                 {s: base(RuleSet{Name: "c i", Clients: users("alice")}), wantErr: "rule set name"},
		"name starting with a digit":        {s: base(RuleSet{Name: "1ci", Clients: users("alice")}), wantErr: "starting with a letter"},
		"empty name":                        {s: base(RuleSet{Clients: users("alice")}), wantErr: "rule set name"},
		"duplicate names":                   {s: base(RuleSet{Name: "a", Clients: src("10.1.0.0/16")}, RuleSet{Name: "a", Clients: src("10.2.0.0/16")}), wantErr: "both named"},
		"unknown mode":                      {s: base(RuleSet{Name: "a", Clients: users("alice"), Mode: "audit"}), wantErr: `mode "audit"`},
		"no clients":                        {s: base(RuleSet{Name: "a"}), wantErr: "names no clients"},
		"invalid range":                     {s: base(RuleSet{Name: "a", Clients: src("10.0.0.1/8")}), wantErr: "host bits"},
		"range outside the admitted":        {s: base(RuleSet{Name: "a", Clients: src("172.16.0.0/12")}), wantErr: "not within allowed_client_cidrs"},
		"range partly outside":              {s: base(RuleSet{Name: "a", Clients: src("0.0.0.0/0")}), wantErr: "not within allowed_client_cidrs"},
		"unknown user":                      {s: base(RuleSet{Name: "a", Clients: users("bob")}), wantErr: `user "bob", who is not one of the proxy's users`},
		"user in another case":              {s: base(RuleSet{Name: "a", Clients: users("Alice")}), wantErr: "case-sensitive"},
		"users without auth":                {s: Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, RuleSets: []RuleSet{{Name: "a", Clients: users("alice")}}}, wantErr: "the proxy has no users"},
		"subjects without TLS":              {s: base(RuleSet{Name: "a", Clients: subjects("x"), Mode: RuleSetReport}), wantErr: "(mode report) matches certificate subjects, but the proxy asks for no client certificate"},
		"subjects without a client CA":      {s: Settings{Port: 3128, TLS: &TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key}, RuleSets: []RuleSet{{Name: "a", Clients: subjects("x")}}}, wantErr: "set tls's client CA"},
		"subject with a space":              {s: Settings{Port: 3128, TLS: withCA, RuleSets: []RuleSet{{Name: "a", Clients: subjects("my service")}}}, wantErr: "certificate subject"},
		"subject as a squid file":           {s: Settings{Port: 3128, TLS: withCA, RuleSets: []RuleSet{{Name: "a", Clients: subjects(`"/etc/passwd"`)}}}, wantErr: "certificate subject"},
		"subject as a flag":                 {s: Settings{Port: 3128, TLS: withCA, RuleSets: []RuleSet{{Name: "a", Clients: subjects("-i")}}}, wantErr: "certificate subject"},
		"invalid destination":               {s: base(RuleSet{Name: "a", Clients: users("alice"), Destinations: []string{"a.io\nhttp_access allow all"}}), wantErr: `rule set "a": destination`},
		"IP destination":                    {s: base(RuleSet{Name: "a", Clients: users("alice"), Destinations: []string{"127.0.0.1"}}), wantErr: "not an IP address"},
		"invalid port":                      {s: base(RuleSet{Name: "a", Clients: users("alice"), Ports: []int{0}}), wantErr: "between 1 and 65535"},
		"invalid denied destination":        {s: Settings{Port: 3128, DeniedDestinations: []string{"*.evil.example"}}, wantErr: "denied destinations: destination"},
		"shadowed by the same range":        {s: base(RuleSet{Name: "a", Clients: src("10.0.0.0/8")}, RuleSet{Name: "b", Clients: src("10.1.0.0/16")}), wantErr: `rule set "b" can never match: every client it names is matched first by rule set "a"`},
		"shadowed by a rule set of users":   {s: base(RuleSet{Name: "a", Clients: users("alice")}, RuleSet{Name: "b", Clients: src("10.1.0.0/16")}), wantErr: `matched first by rule set "a"`},
		"shadowed by every admitted range":  {s: base(RuleSet{Name: "a", Clients: src("10.0.0.0/8", "192.168.0.0/16")}, RuleSet{Name: "b", Clients: users("alice")}), wantErr: `matched first by rule set "a"`},
		"shadowed by the same subjects":     {s: Settings{Port: 3128, TLS: withCA, RuleSets: []RuleSet{{Name: "a", Clients: subjects("x", "y")}, {Name: "b", Clients: RuleSetClients{CertificateSubjects: []string{"y"}}}}}, wantErr: `"b" can never match`},
		"one rule set a user":               {s: twoUsers(RuleSet{Name: "a", Clients: users("alice")}, RuleSet{Name: "b", Clients: users("bob")})},
		"a user, then both":                 {s: twoUsers(RuleSet{Name: "a", Clients: users("alice")}, RuleSet{Name: "b", Clients: users("alice", "bob")})},
		"both users, then one":              {s: twoUsers(RuleSet{Name: "a", Clients: users("alice", "bob")}, RuleSet{Name: "b", Clients: users("bob")}), wantErr: `"b" can never match: every client it names is matched first by rule set "a"`},
		"every user shadows a range":        {s: twoUsers(RuleSet{Name: "a", Clients: users("bob", "alice")}, RuleSet{Name: "b", Clients: src("10.1.0.0/16")}), wantErr: `"b" can never match`},
		"too many rule sets": {s: func() Settings {
			s := base()
			for i := range MaxRuleSets + 1 {
				s.RuleSets = append(s.RuleSets, RuleSet{Name: "r" + strings.Repeat("x", i), Clients: src("10.0.0.0/8")})
			}
			return s
		}(), wantErr: "at most 32 rule sets"},
		"too many user names together": {s: func() Settings {
			s := base()
			for i := range 29 {
				s.RuleSets = append(s.RuleSets, RuleSet{Name: fmt.Sprintf("r%d", i), Clients: RuleSetClients{
					SourceCIDRs: []string{fmt.Sprintf("10.%d.0.0/16", i)}, Users: slices.Repeat([]string{"alice"}, 7)}})
			}
			return s
		}(), wantErr: "at most 200 user names in every rule set together, got 203"},
		"too many destinations together": {s: func() Settings {
			s := base(RuleSet{Name: "a", Clients: users("alice")})
			for i := range MaxAllowedDestinations {
				s.RuleSets[0].Destinations = append(s.RuleSets[0].Destinations, "d"+strings.Repeat("x", i%60)+string(rune('a'+i/60))+".io")
			}
			return s
		}(), wantErr: "destinations in allowed and denied destinations and every rule set together"},
		"client CA that is a leaf":  {s: Settings{Port: 3128, TLS: &TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: cert}}, wantErr: "not a CA certificate"},
		"client CA not PEM":         {s: Settings{Port: 3128, TLS: &TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: "MIIB..."}}, wantErr: "something other than PEM"},
		"client CA holding a key":   {s: Settings{Port: 3128, TLS: &TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: ca.RootPEM + key}}, wantErr: `"PRIVATE KEY" block`},
		"root and intermediate":     {s: Settings{Port: 3128, TLS: &TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: ca.RootPEM + ca.InterPEM}}},
		"CRL of the CA":             {s: Settings{Port: 3128, TLS: &TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: issuer.pem, ClientCRLPEM: crlPEM(t, issuer.cert, issuer.key, big.NewInt(7))}}},
		"CRL of another CA":         {s: Settings{Port: 3128, TLS: &TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: issuer.pem, ClientCRLPEM: crlPEM(t, other.cert, other.key)}}, wantErr: "not signed by a certificate of the client CA"},
		"CRL without a CA":          {s: Settings{Port: 3128, TLS: &TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCRLPEM: crlPEM(t, issuer.cert, issuer.key)}}, wantErr: "needs the client CA"},
		"CRL that is a certificate": {s: Settings{Port: 3128, TLS: &TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: ca.InterPEM, ClientCRLPEM: ca.InterPEM}}, wantErr: `only "X509 CRL" blocks`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := tc.s.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("valid settings refused: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("accepted, want an error with %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("error %q lacks %q", err, tc.wantErr)
			}
		})
	}
}

// TestShadowingRuleSetNamesTheEarlierOne: the provider points at the rule set that hides another, so the
// index must be the first earlier one that covers it, not merely any.
func TestShadowingRuleSetNamesTheEarlierOne(t *testing.T) {
	t.Parallel()
	s := Settings{AllowedClientCIDRs: []string{"10.0.0.0/8"}, Users: []BasicAuth{{Username: "alice"}}, RuleSets: []RuleSet{
		{Name: "a", Clients: RuleSetClients{SourceCIDRs: []string{"10.1.0.0/16"}}},
		{Name: "b", Clients: RuleSetClients{Users: []string{"alice"}, SourceCIDRs: []string{"10.2.0.0/16"}}},
		{Name: "c", Clients: RuleSetClients{SourceCIDRs: []string{"10.2.0.0/16"}}},
		{Name: "d", Clients: RuleSetClients{SourceCIDRs: []string{"10.2.3.0/24"}, Users: []string{"alice"}}},
		{Name: "e", Clients: RuleSetClients{SourceCIDRs: []string{"10.0.0.0/8"}}},
		{Name: "f", Clients: RuleSetClients{Users: []string{"alice"}}},
	}}
	// alice is the proxy's one user, so naming her narrows nothing: b holds every client of c.
	want := map[int]int{0: -1, 1: -1, 2: 1, 3: 1, 4: -1, 5: 4}
	for i, w := range want {
		j, ok := s.ShadowingRuleSet(i)
		if !ok {
			j = -1
		}
		if j != w {
			t.Errorf("rule set %q: shadowed by %d, want %d", s.RuleSets[i].Name, j, w)
		}
	}
}
