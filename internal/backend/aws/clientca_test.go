package aws

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/proxyconftest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// A client CA is refused on aws, Permanent and saying why, before anything is made: the agent does not
// install it, and a config that names it would only be refused in the guest.
func TestClientCARefusedBeforeAnythingIsMade(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	spec := testSpec(fake, "client-ca")
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	spec.Proxy.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: testutil.NewClientCA(t, "client CA").PEM}
	_, err := b.Create(t.Context(), spec)
	if backend.ClassOf(err) != backend.ClassPermanent || !errors.Is(err, guest.ErrClientCA) {
		t.Fatalf("Create with a client CA = %v (class %s), want Permanent with guest.ErrClientCA", err, backend.ClassOf(err))
	}
	if n := len(fake.Requests()); n > 3 {
		t.Errorf("%d requests before the refusal, want none but resolving the image", n)
	}
}

// Users, rule sets and the deny list change in place through the parameters, and Get reads them back as
// given (names only for the users) without drift: what the plan compares.
func TestReconfigurePolicyReadBack(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	spec := testSpec(fake, "policy")
	inst, err := b.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	next := spec.Proxy
	next.Users = []proxyconf.BasicAuth{{Username: "a", Password: "a's password"}, {Username: "b", Password: "b's password"}}
	next.DeniedDestinations = []string{"bad.example.com"}
	next.RuleSets = []proxyconf.RuleSet{
		{Name: "ci", Clients: proxyconf.RuleSetClients{Users: []string{"b"}}, Destinations: []string{".example.org"}, Mode: proxyconf.RuleSetReport},
	}
	if _, err := b.Reconfigure(t.Context(), inst.ID, next); err != nil {
		t.Fatal(err)
	}
	got, err := b.Get(t.Context(), inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	p := got.Proxy
	switch {
	case p == nil || got.Drift != "":
		t.Fatalf("Get = %+v, drift %q", p, got.Drift)
	case !slices.Equal(proxyconf.Usernames(p.Users), []string{"a", "b"}) || p.Users[0].Password != "" || p.Users[1].Password != "":
		t.Errorf("users read back %+v", p.Users)
	case !reflect.DeepEqual(p.RuleSets, next.RuleSets) || !slices.Equal(p.DeniedDestinations, next.DeniedDestinations):
		t.Errorf("rule sets %+v and denied destinations %q read back", p.RuleSets, p.DeniedDestinations)
	}
	if config, _ := loadConfig(t, fake, spec.Name); !strings.Contains(config.SquidConf, "bad.example.com") {
		t.Errorf("the guest's squid.conf does not carry the deny list")
	}
}

// The largest policy aws takes (rule sets, the deny list and users at their limits, an ECDSA key; no client
// CA, which aws refuses, so no certificate subjects) passes the plan-time check and is created: the plan and the apply
// agree on what SSM holds.
func TestLargestPolicyCreate(t *testing.T) {
	t.Parallel()
	s := proxyconftest.LargestPolicySettings(t)
	// A key SSM's secrets parameter holds (LargestSettings' key of MaxPEMBytes never fits aws, whose plan says so).
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	s.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key}
	// IPv4 client ranges of the same count: the fake models no IPv6 rule in a security group.
	s.AllowedClientCIDRs = []string{"198.151.0.0/16"}
	n := 0
	for i := range s.RuleSets {
		s.RuleSets[i].Clients.CertificateSubjects = nil
		for j := range s.RuleSets[i].Clients.SourceCIDRs {
			s.RuleSets[i].Clients.SourceCIDRs[j] = fmt.Sprintf("198.151.%d.%d/32", 100+n/100, 100+n%100)
			n++
		}
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	fake, b := newTest(t, ec2fake.Options{MaxRulesPerGroup: proxyconf.MaxAllowedClientCIDRs})
	fake.PlayGuests()
	spec := testSpec(fake, "largest-policy")
	o := spec.Placement.Options.(*Options) //nolint:forcetypeassert // testSpec's own options
	spec.Proxy = s
	err := CheckParameterSizes(spec.Name, s, *o)
	t.Logf("the plan-time check: %v", err)
	_, createErr := b.Create(t.Context(), spec)
	if (err == nil) != (createErr == nil) {
		t.Fatalf("the plan-time check says %v, Create %v: they must agree", err, createErr)
	}
	if err != nil {
		t.Errorf("the largest policy does not fit aws's parameters: %v", err)
	}
}
