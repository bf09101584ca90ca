package gcp

import (
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
