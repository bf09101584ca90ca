package kubernetes

import (
	"reflect"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// The client CA and CRL, the rule sets, the deny list and the users change in place: the ConfigMap carries
// the CA files the pods mount (not the Secret: they are no secret), the pods roll out, and Get reads back
// what the pods enforce. A CA read back from the ConfigMap is what shows drift when someone edits it there.
func TestReconfigurePolicyInPlace(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b, cs := newFake(t)
	controller(ctx, t, cs, nil)
	spec := testSpec("p1")
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	caA, caB := testutil.NewClientCA(t, "client CA A"), testutil.NewClientCA(t, "client CA B")
	caOne, caTwo := caA.PEM, caB.PEM
	crlTwo := caB.CRL(t, 1)
	spec.Proxy.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: caOne}
	created, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if created.Proxy == nil || created.Proxy.TLS == nil || created.Proxy.TLS.ClientCAPEM != caOne || created.Proxy.TLS.PrivateKeyPEM != "" {
		t.Fatalf("created proxy reads back TLS %+v, want the client CA and no key", created.Proxy)
	}
	d0, _ := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})

	next := spec.Proxy
	next.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: caTwo, ClientCRLPEM: crlTwo}
	next.Users = []proxyconf.BasicAuth{{Username: "a", Password: "a's password"}, {Username: "b", Password: "b's password"}}
	next.DeniedDestinations = []string{"bad.example.com"}
	next.RuleSets = []proxyconf.RuleSet{{Name: "ci", Clients: proxyconf.RuleSetClients{Users: []string{"b"}}, Destinations: []string{".example.org"}, Mode: proxyconf.RuleSetReport}}
	after, err := b.Reconfigure(ctx, testID(), next)
	if err != nil {
		t.Fatal(err)
	}
	cm, _ := cs.CoreV1().ConfigMaps(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if cm.Data[guest.ClientCAKey] != caTwo || cm.Data[guest.ClientCRLKey] != crlTwo {
		t.Errorf("the ConfigMap holds client CA %q and CRL %q, want the new ones", cm.Data[guest.ClientCAKey], cm.Data[guest.ClientCRLKey])
	}
	secret, _ := cs.CoreV1().Secrets(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if _, ok := secret.Data[guest.ClientCAKey]; ok {
		t.Error("the client CA is in the Secret: it belongs with the config")
	}
	d1, _ := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if d1.Spec.Template.Annotations[annotationChecksum] == d0.Spec.Template.Annotations[annotationChecksum] {
		t.Error("the pod template's checksum did not change: no rollout")
	}
	p := after.Proxy
	switch {
	case p == nil || p.TLS == nil:
		t.Fatalf("settings read back %+v", p)
	case p.TLS.ClientCAPEM != caTwo || p.TLS.ClientCRLPEM != crlTwo:
		t.Errorf("client CA read back %q, CRL %q", p.TLS.ClientCAPEM, p.TLS.ClientCRLPEM)
	case !slices.Equal(proxyconf.Usernames(p.Users), []string{"a", "b"}):
		t.Errorf("users read back %q", proxyconf.Usernames(p.Users))
	case !reflect.DeepEqual(p.RuleSets, next.RuleSets) || !slices.Equal(p.DeniedDestinations, next.DeniedDestinations):
		t.Errorf("rule sets %+v and denied destinations %q read back", p.RuleSets, p.DeniedDestinations)
	}
}
