package gcp

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	kvmguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// The stored spec holds no key, yet Reconfigure still tells a new key from the one in place: the same key
// written another way (SEC 1 instead of PKCS #8) under the same certificate is a change the guest must get.
func TestReconfigureNoticesTLSChanges(t *testing.T) {
	t.Parallel()
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	otherCert, otherKey := testutil.SelfSignedPEM(t, "proxy.test")
	for name, tc := range map[string]struct {
		tls   *proxyconf.TLSSettings
		write bool
	}{
		"same certificate and key":    {tls: &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key}},
		"same certificate, key as EC": {tls: &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: asSEC1(t, key)}, write: true},
		"new certificate and key":     {tls: &proxyconf.TLSSettings{CertificatePEM: otherCert, PrivateKeyPEM: otherKey}, write: true},
		"tls removed":                 {write: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b, _ := newTestWithGuest(t)
			ctx := ctxT(t)
			spec := testSpec("uid-tls-change", "us-central1-a")
			fake.MetadataInstance(testProject, "us-central1-a", spec.Name)
			spec.Proxy.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key}
			inst, err := b.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			fake.ResetLog()
			next := spec.Proxy
			next.TLS = tc.tls
			if _, err := b.Reconfigure(ctx, inst.ID, next); err != nil {
				t.Fatal(err)
			}
			if wrote := fake.Count(http.MethodPost, `/setMetadata$`) > 0; wrote != tc.write {
				t.Fatalf("setMetadata sent: %v, want %v", wrote, tc.write)
			}
			got, _ := metadataValue(fake.Instance(testProject, "us-central1-a", spec.Name), gcpguest.MetadataTLSKey)
			if want := ""; tc.tls != nil {
				want = tc.tls.PrivateKeyPEM
				if got != want {
					t.Fatalf("egress-tls-key is not the key asked for")
				}
			} else if got != want {
				t.Fatal("egress-tls-key stayed after TLS was removed")
			}
		})
	}
}

func asSEC1(t *testing.T, pkcs8 string) string {
	t.Helper()
	block, _ := pem.Decode([]byte(pkcs8))
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("the test key is a %T, not an EC key", k)
	}
	der, err := x509.MarshalECPrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
}

// A proxy made by an earlier version of the provider holds its key in egress-spec and its settings and
// secrets in user-data. Get reads it back without the key, and the first reconfiguration rewrites both.
func TestEarlierSpecReadWithoutKeyAndRewritten(t *testing.T) {
	t.Parallel()
	fake, b, _ := newTestWithGuest(t)
	ctx := ctxT(t)
	spec := testSpec("uid-earlier", "us-central1-a")
	fake.MetadataInstance(testProject, "us-central1-a", spec.Name)
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	spec.Proxy.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key}
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}

	// Rewrite the metadata as the earlier version wrote it. Its user-data was the cloud-init seed the kvm guest
	// still renders, the files and their secrets in it.
	earlier := spec.Proxy
	earlier.Users = nil
	settingsJSON, _ := json.Marshal(earlier)
	var settingsMap map[string]any
	if err := json.Unmarshal(settingsJSON, &settingsMap); err != nil {
		t.Fatal(err)
	}
	delete(settingsMap, "Users")
	settingsMap["Auth"] = map[string]any{"Username": "u", "Password": ""} // one user, as it was then
	specJSON, _ := json.Marshal(map[string]any{"settings": settingsMap, "image": DefaultImage})
	oldUserData, err := kvmguest.RenderUserData(spec.Proxy, proxyconf.RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.clients(ctx, testProject)
	if err != nil {
		t.Fatal(err)
	}
	in := fake.Instance(testProject, "us-central1-a", spec.Name)
	var items []*computepb.Items
	for _, it := range in.GetMetadata().GetItems() {
		switch it.GetKey() {
		case metadataSpec:
			it.Value = proto.String(string(specJSON))
		case gcpguest.MetadataUserData:
			it.Value = proto.String(string(oldUserData))
		}
		items = append(items, it)
	}
	op, err := p.instances.SetMetadata(ctx, &computepb.SetMetadataInstanceRequest{Project: testProject, Zone: "us-central1-a", Instance: spec.Name,
		MetadataResource: &computepb.Metadata{Fingerprint: in.GetMetadata().Fingerprint, Items: items}})
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	got, err := b.Get(ctx, inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Proxy == nil || got.Proxy.TLS == nil || got.Proxy.TLS.CertificatePEM != cert || got.Proxy.TLS.PrivateKeyPEM != "" {
		t.Fatalf("an earlier spec read back as %+v, want the certificate and no key", got.Proxy)
	}
	if users := proxyconf.Usernames(got.Proxy.Users); !slices.Equal(users, []string{"u"}) {
		t.Errorf("an earlier spec's one user read back as %q, want [u]", users)
	}

	// The same settings again: the earlier spec is never "the same", so its key and user-data go.
	if _, err := b.Reconfigure(ctx, inst.ID, spec.Proxy); err != nil {
		t.Fatal(err)
	}
	after := fake.Instance(testProject, "us-central1-a", spec.Name)
	for _, k := range []string{metadataSpec, gcpguest.MetadataUserData} {
		if v, _ := metadataValue(after, k); strings.Contains(v, privateKeyMarker) || len(leaks(v, map[string]string{"the key": key})) > 0 {
			t.Errorf("%s still holds the key after a reconfiguration", k)
		}
	}
}

// A spec written before several users holds its one user as settings.Auth: it reads back as that one user,
// and a spec of today keeps its users as they are.
func TestStoredSpecUsersOfEveryVersion(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		spec string
		want []string
	}{
		"earlier, one user":       {`{"settings":{"Port":3128,"Auth":{"Username":"u","Password":""}},"image":"i"}`, []string{"u"}},
		"earlier, no user":        {`{"settings":{"Port":3128,"Auth":null},"image":"i"}`, nil},
		"earlier, no Auth at all": {`{"settings":{"Port":3128},"image":"i"}`, nil},
		"today, two users":        {`{"settings":{"Port":3128,"Users":[{"Username":"a","Password":""},{"Username":"b","Password":""}]},"image":"i"}`, []string{"a", "b"}},
		"today, no users":         {`{"settings":{"Port":3128,"Users":null},"image":"i"}`, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := &computepb.Instance{Metadata: &computepb.Metadata{Items: []*computepb.Items{{Key: proto.String(metadataSpec), Value: proto.String(tc.spec)}}}}
			st, ok := readStoredSpec(in)
			if !ok {
				t.Fatal("the spec did not read")
			}
			s := st.settings(in)
			if got := proxyconf.Usernames(s.Users); !slices.Equal(got, tc.want) {
				t.Errorf("users %q, want %q", got, tc.want)
			}
			for _, u := range s.Users {
				if u.Password != "" {
					t.Errorf("user %q read back with a password", u.Username)
				}
			}
		})
	}
}
