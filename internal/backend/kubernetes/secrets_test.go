package kubernetes

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// bcryptHash matches any bcrypt hash, whichever variant the htpasswd renderer picks.
var bcryptHash = regexp.MustCompile(`\$2[aby]\$`)

// testTLS is a self-signed server certificate and its key, made once: key generation is the slow part.
var testTLS = sync.OnceValue(func() proxyconf.TLSSettings {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "proxy.test"}, DNSNames: []string{"proxy.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		panic(err)
	}
	return proxyconf.TLSSettings{
		CertificatePEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		PrivateKeyPEM:  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})),
	}
})

// exposedText is every piece of text of o that people without access to Secrets can read: the ConfigMap's
// data, every object's labels and annotations, and the pod template the Deployment (and its ReplicaSets and
// pods) carries. Everything but the Secret.
func exposedText(o objects) map[string]string {
	out := map[string]string{}
	addMeta := func(kind string, m metav1.ObjectMeta) {
		for k, v := range m.Labels {
			out[kind+" label "+k] = v
		}
		for k, v := range m.Annotations {
			out[kind+" annotation "+k] = v
		}
	}
	addMeta("ConfigMap", o.configMap.ObjectMeta)
	for k, v := range o.configMap.Data {
		out["ConfigMap data "+k] = v
	}
	for k, v := range o.configMap.BinaryData {
		out["ConfigMap binaryData "+k] = string(v)
	}
	addMeta("Deployment", o.deployment.ObjectMeta)
	addMeta("pod template", o.deployment.Spec.Template.ObjectMeta)
	addMeta("Service", o.service.ObjectMeta)
	if o.networkPolicy != nil {
		addMeta("NetworkPolicy", o.networkPolicy.ObjectMeta)
	}
	pod := o.deployment.Spec.Template.Spec
	for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
		out["container "+c.Name+" command"] = strings.Join(c.Command, "\x00")
		out["container "+c.Name+" args"] = strings.Join(c.Args, "\x00")
		for _, e := range c.Env {
			out["container "+c.Name+" env "+e.Name] = e.Value
		}
	}
	return out
}

// assertNoSecrets fails when any exposed text of o holds the password, a bcrypt hash, the private key or any
// PEM private key block. baseline is the exposed text of the same proxy without credentials (nil for none):
// what it holds already came from elsewhere (a user name that happens to contain the password) and is no leak.
func assertNoSecrets(t testing.TB, o objects, baseline map[string]string, s proxyconf.Settings) {
	t.Helper()
	leaks := func(text, base string, holds func(string) bool) bool { return holds(text) && !holds(base) }
	for where, text := range exposedText(o) {
		base := baseline[where]
		for _, u := range s.Users {
			if u.Password != "" && leaks(text, base, func(x string) bool { return strings.Contains(x, u.Password) }) {
				t.Errorf("%s holds user %s's password", where, u.Username)
			}
		}
		if leaks(text, base, bcryptHash.MatchString) {
			t.Errorf("%s holds a bcrypt hash", where)
		}
		if s.TLS != nil && leaks(text, base, func(x string) bool { return strings.Contains(x, strings.TrimSpace(s.TLS.PrivateKeyPEM)) }) {
			t.Errorf("%s holds the private key", where)
		}
		if leaks(text, base, func(x string) bool { return strings.Contains(x, "PRIVATE KEY") }) {
			t.Errorf("%s holds a PEM private key block", where)
		}
	}
}

func TestCreateKeepsSecretsInTheSecret(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b, cs := newFake(t)
	controller(ctx, t, cs, nil)
	spec := testSpec("p1")
	tlsSettings := testTLS()
	// Several users: assertNoSecrets looks for each one's password.
	spec.Proxy.Users = []proxyconf.BasicAuth{{Username: "alice", Password: "s3cret-Pa55word"}, {Username: "bob", Password: "b0b-s3cret-Pa55"}}
	spec.Proxy.TLS = &tlsSettings
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	// Read back what the fake holds, as a reader with the view role would.
	var o objects
	var err error
	if o.configMap, err = cs.CoreV1().ConfigMaps(testNS).Get(ctx, "p1", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if o.deployment, err = cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if o.service, err = cs.CoreV1().Services(testNS).Get(ctx, "p1", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if o.networkPolicy, err = cs.NetworkingV1().NetworkPolicies(testNS).Get(ctx, "p1", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	assertNoSecrets(t, o, nil, spec.Proxy)
	secret, err := cs.CoreV1().Secrets(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(secret.Data[guest.TLSKeyKey]) != tlsSettings.PrivateKeyPEM {
		t.Error("the Secret lacks the private key")
	}
	if !proxyconf.HtpasswdMatches(secret.Data[guest.SecretKey], spec.Proxy.Users) {
		t.Error("the Secret's htpasswd does not admit exactly the users: the scan would prove nothing")
	}
	// Get still reports what Read needs: TLS on, and the users, without the secrets.
	inst, err := b.Get(ctx, testID())
	if err != nil {
		t.Fatal(err)
	}
	if inst.Proxy == nil || inst.Proxy.TLS == nil || !slices.Equal(proxyconf.Usernames(inst.Proxy.Users), []string{"alice", "bob"}) {
		t.Fatalf("settings read back %+v: want TLS and the users", inst.Proxy)
	}
	if inst.Proxy.TLS.PrivateKeyPEM != "" || slices.ContainsFunc(inst.Proxy.Users, func(u proxyconf.BasicAuth) bool { return u.Password != "" }) {
		t.Error("Get returns a secret")
	}
}

// FuzzObjectsKeepSecretsInTheSecret renders the objects of proxies with any credentials and proves none of
// them leaves the Secret. The seed corpus runs in every `go test`.
func FuzzObjectsKeepSecretsInTheSecret(f *testing.F) {
	f.Add("alice", "s3cret-Pa55word", true)
	f.Add("bob", "$2y$05$notreallyahash", false)
	f.Add("u", "-----BEGIN PRIVATE KEY-----", true)
	f.Fuzz(func(t *testing.T, user, password string, withTLS bool) {
		spec := testSpec("p1")
		spec.Proxy.Users = []proxyconf.BasicAuth{{Username: user, Password: password}}
		if withTLS {
			s := testTLS()
			spec.Proxy.TLS = &s
		}
		b, _ := newFake(t)
		o, err := b.render(spec, testID())
		if err != nil {
			t.Skip("settings refused:", err)
		}
		// The same proxy with a user but a stand-in password and no key: what it exposes is not a leak. The
		// stand-in is long enough to be accepted (a refused one made every case skip, seeds included).
		bare := spec
		bare.Proxy.Users = []proxyconf.BasicAuth{{Username: user, Password: "stand-in-password"}}
		bare.Proxy.TLS = nil
		base, err := b.render(bare, testID())
		if err != nil {
			t.Fatal("the stand-in settings were refused:", err)
		}
		assertNoSecrets(t, o, exposedText(base), spec.Proxy)
	})
}

// TestUpdateDropsALegacyKeyFromTheAnnotation: a ConfigMap written by an older provider, with the TLS key in
// its settings annotation, holds fingerprints instead after the next apply's Update.
func TestUpdateDropsALegacyKeyFromTheAnnotation(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b, cs := newFake(t)
	controller(ctx, t, cs, nil)
	spec := testSpec("p1")
	tlsSettings := testTLS()
	spec.Proxy.TLS = &tlsSettings
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	legacy, _ := json.Marshal(spec.Proxy) // what storedSettings wrote before fingerprints
	cm.Annotations[annotationSettings] = string(legacy)
	if _, err := cs.CoreV1().ConfigMaps(testNS).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	inst, err := b.Update(ctx, testID(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if inst.Proxy == nil || inst.Proxy.TLS == nil {
		t.Errorf("settings read back %+v: want TLS on", inst.Proxy)
	}
	cm, err = cs.CoreV1().ConfigMaps(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Annotations[annotationSettings]; strings.Contains(got, "PRIVATE KEY") || got != storedSettings(spec.Proxy) {
		t.Errorf("annotation after Update:\n%s\nwant:\n%s", got, storedSettings(spec.Proxy))
	}
}
