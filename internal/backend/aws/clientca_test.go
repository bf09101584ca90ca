package aws

import (
	"errors"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
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
