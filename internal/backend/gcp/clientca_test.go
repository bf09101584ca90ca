package gcp

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// The client CA and CRL change in place through metadata keys of their own (no secrets, so on every VM): a
// new CA alone is a new config id the guest applies, Get reads back the CA the metadata holds, the same
// settings again write nothing, and a CA removed takes its key with it.
func TestReconfigureClientCA(t *testing.T) {
	t.Parallel()
	fake, b, _ := newTestWithGuest(t)
	ctx := ctxT(t)
	const zone = "us-central1-a"
	spec := testSpec("uid-client-ca", zone)
	fake.MetadataInstance(testProject, zone, spec.Name)
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	caA, caB := testutil.NewClientCA(t, "client CA A"), testutil.NewClientCA(t, "client CA B")
	caOne, caTwo := caA.PEM, caB.PEM
	crlOne, crlOneAgain := caA.CRL(t, 1), caA.CRL(t, 2)
	withCA := func(ca, crl string) proxyconf.Settings {
		s := spec.Proxy
		s.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: ca, ClientCRLPEM: crl}
		return s
	}
	// No users: a new htpasswd is salted anew, which would make every config id new whatever else changed.
	spec.Proxy.Users = nil
	spec.Proxy = withCA(caOne, "")
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	configID := func() string {
		v, _ := metadataValue(fake.Instance(testProject, zone, spec.Name), gcpguest.MetadataConfigID)
		return v
	}
	// Each step changes the CA or the CRL alone, which squid.conf names only by path.
	previous := configID()
	for _, step := range []struct {
		name, ca, crl string
	}{{"another CA", caTwo, ""}, {"the first CA again", caOne, ""}, {"a CRL", caOne, crlOne}, {"another CRL", caOne, crlOneAgain}, {"the CA removed", "", ""}} {
		got, err := b.Reconfigure(ctx, inst.ID, withCA(step.ca, step.crl))
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		in := fake.Instance(testProject, zone, spec.Name)
		for k, want := range map[string]string{gcpguest.MetadataClientCA: step.ca, gcpguest.MetadataClientCRL: step.crl} {
			if v, ok := metadataValue(in, k); v != want || ok != (want != "") {
				t.Errorf("%s: metadata %s = %q (present %v), want %q", step.name, k, v, ok, want)
			}
		}
		if configID() == previous {
			t.Errorf("%s: the config id %s is the one before: the guest would not apply the change", step.name, previous)
		}
		previous = configID()
		if got.Proxy == nil || got.Proxy.TLS == nil || got.Proxy.TLS.ClientCAPEM != step.ca || got.Proxy.TLS.ClientCRLPEM != step.crl {
			t.Errorf("%s: Get reads back TLS %+v", step.name, got.Proxy)
		}
	}
	fake.ResetLog()
	if _, err := b.Reconfigure(ctx, inst.ID, withCA("", "")); err != nil {
		t.Fatal(err)
	}
	if n := fake.Count("POST", `/setMetadata$`); n != 0 {
		t.Errorf("the same settings again set metadata %d times, want none", n)
	}
}

// Users, rule sets and the deny list change in place, through the stored spec, and Get reads them back as
// given (names only for the users): what the plan compares for drift.
func TestReconfigurePolicyReadBack(t *testing.T) {
	t.Parallel()
	fake, b, _ := newTestWithGuest(t)
	ctx := ctxT(t)
	const zone = "us-central1-a"
	spec := testSpec("uid-policy", zone)
	fake.MetadataInstance(testProject, zone, spec.Name)
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	next := spec.Proxy
	next.Users = []proxyconf.BasicAuth{{Username: "a", Password: "a's password"}, {Username: "b", Password: "b's password"}}
	next.DeniedDestinations = []string{"bad.example.com"}
	next.RuleSets = []proxyconf.RuleSet{
		{Name: "ci", Clients: proxyconf.RuleSetClients{Users: []string{"b"}}, Destinations: []string{".example.org"}, Mode: proxyconf.RuleSetReport},
		{Name: "office", Clients: proxyconf.RuleSetClients{SourceCIDRs: []string{"10.1.0.0/16"}}, Destinations: []string{"a.example.com"}, Ports: []int{443}},
	}
	got, err := b.Reconfigure(ctx, inst.ID, next)
	if err != nil {
		t.Fatal(err)
	}
	p := got.Proxy
	switch {
	case p == nil:
		t.Fatal("no settings read back")
	case !slices.Equal(proxyconf.Usernames(p.Users), []string{"a", "b"}) || p.Users[0].Password != "" || p.Users[1].Password != "":
		t.Errorf("users read back %+v", p.Users)
	case !reflect.DeepEqual(p.RuleSets, next.RuleSets) || !slices.Equal(p.DeniedDestinations, next.DeniedDestinations):
		t.Errorf("rule sets %+v and denied destinations %q read back", p.RuleSets, p.DeniedDestinations)
	}
	conf, _ := metadataValue(fake.Instance(testProject, zone, spec.Name), gcpguest.MetadataSquidConf)
	if !strings.Contains(conf, "office") || !strings.Contains(conf, "bad.example.com") {
		t.Errorf("the guest's squid.conf does not carry the rule sets and the deny list:\n%s", conf)
	}
	// A rule set's mode alone is a change made in place.
	enforce := next
	enforce.RuleSets = slices.Clone(next.RuleSets)
	enforce.RuleSets[0].Mode = proxyconf.RuleSetEnforce
	if got, err = b.Reconfigure(ctx, inst.ID, enforce); err != nil {
		t.Fatal(err)
	}
	if got.Proxy == nil || got.Proxy.RuleSets[0].Mode != proxyconf.RuleSetEnforce {
		t.Errorf("after the mode change, rule sets read back %+v", got.Proxy)
	}
}
