package aws

import (
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

// The client CA and CRL change in place through the config, which carries them beside squid.conf under its
// MAC: each change alone is a new config id the guest applies (squid.conf names them by path only), the
// instance stays, and Get reads back what was given without drift.
func TestReconfigureClientCA(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	spec := testSpec(fake, "client-ca")
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	caA, caB := testutil.NewClientCA(t, "client CA A"), testutil.NewClientCA(t, "client CA B")
	withCA := func(ca, crl string) proxyconf.Settings {
		s := testProxy()
		s.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: ca, ClientCRLPEM: crl}
		return s
	}
	spec.Proxy = withCA(caA.PEM, "")
	inst, err := b.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	instanceID := func() string {
		var ids []string
		for _, in := range fake.Instances(testRegion) {
			ids = append(ids, in.ID)
		}
		return strings.Join(ids, ",")
	}
	launched := instanceID()
	if c, format := loadConfig(t, fake, spec.Name); c.ClientCA != caA.PEM || format != guest.FormatParts {
		t.Fatalf("Create's config carries client CA %q (format %d), want CA A, packed", c.ClientCA, format)
	}
	previous := applied(t, fake, spec.Name).ConfigID
	for _, step := range []struct {
		name, ca, crl string
	}{
		{"another CA", caB.PEM, ""}, {"the first CA again", caA.PEM, ""}, {"a CRL", caA.PEM, caA.CRL(t, 1)},
		{"another CRL", caA.PEM, caA.CRL(t, 2)}, {"the CA removed", "", ""},
	} {
		got, err := b.Reconfigure(t.Context(), inst.ID, withCA(step.ca, step.crl))
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if c, _ := loadConfig(t, fake, spec.Name); c.ClientCA != step.ca || c.ClientCRL != step.crl {
			t.Errorf("%s: the guest's config carries CA %.40q and CRL %.40q", step.name, c.ClientCA, c.ClientCRL)
		}
		// Reconfigure returns once the guest reports the new config applied: the id must be new, or the guest
		// would keep the files it has.
		if now := applied(t, fake, spec.Name).ConfigID; now == previous {
			t.Errorf("%s: the config id %s is the one before: the guest would not apply the change", step.name, now)
		} else {
			previous = now
		}
		for when, inst := range map[string]backend.Instance{"Reconfigure": got, "Get": mustGet(t, b, inst.ID)} {
			if p := inst.Proxy; p == nil || p.TLS == nil || p.TLS.ClientCAPEM != step.ca || p.TLS.ClientCRLPEM != step.crl || inst.Drift != "" {
				t.Errorf("%s: %s reads back TLS %+v, drift %q", step.name, when, inst.Proxy, inst.Drift)
			}
		}
	}
	if now := instanceID(); now != launched {
		t.Errorf("the instances are %s, were %s: a client CA change must not replace the proxy", now, launched)
	}
}

// A proxy whose guest was launched before the agent installed a client CA (guest.FormatParts) would find a
// config that carries one not authenticated (its MAC leaves the CA out) and never apply it: Reconfigure
// refuses before writing anything, advising a replacement, and takes the same proxy's other changes.
func TestOlderGuestRefusesClientCA(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	spec := testSpec(fake, "older-agent")
	inst, err := b.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	r, o, err := b.resolve(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	p, err := renderParameters(spec.Name, spec.Proxy, guest.FormatParts)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.putParameters(t.Context(), r, spec, newStoredSpec(spec.Proxy, o, p), p, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return applied(t, fake, spec.Name).ConfigID == p.configID })
	before := proxyParameters(fake, spec.Name)[guest.ParameterConfig].Version
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	withCA := testProxy()
	withCA.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: testutil.NewClientCA(t, "client CA").PEM}
	_, err = b.Reconfigure(t.Context(), inst.ID, withCA)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "client CA") || !strings.Contains(backend.AdviceOf(err), "-replace") {
		t.Fatalf("Reconfigure with a client CA on an older guest = %v, want Permanent advising a replacement", err)
	}
	if after := proxyParameters(fake, spec.Name)[guest.ParameterConfig].Version; after != before {
		t.Errorf("the refused Reconfigure wrote the config (version %d, was %d)", after, before)
	}
	withCA.TLS.ClientCAPEM = ""
	if _, err := b.Reconfigure(t.Context(), inst.ID, withCA); err != nil {
		t.Errorf("Reconfigure without a client CA on an older guest: %v", err)
	}
}

func mustGet(t *testing.T, b *Backend, id backend.ProviderID) backend.Instance {
	t.Helper()
	inst, err := b.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return inst
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

// The largest policy aws takes (rule sets, the deny list and users at their limits, certificate subjects with
// a client CA and its CRL, an ECDSA key) passes the plan-time check and is created: the plan and the apply
// agree on what SSM holds.
func TestLargestPolicyCreate(t *testing.T) {
	t.Parallel()
	s := proxyconftest.LargestPolicySettings(t)
	// A key SSM's secrets parameter holds (LargestSettings' key of MaxPEMBytes never fits aws, whose plan says so).
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	ca := testutil.NewClientCA(t, "client CA")
	s.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: ca.PEM, ClientCRLPEM: ca.CRL(t, 1)}
	// IPv4 client ranges of the same count: the fake models no IPv6 rule in a security group.
	s.AllowedClientCIDRs = []string{"198.151.0.0/16"}
	n := 0
	for i := range s.RuleSets {
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
