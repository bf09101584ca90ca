package kubernetes

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

func TestValidateResource(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		name, quantity string
		wantErr        string // "" when valid
	}{
		"cpu in millicores":         {"cpu", "100m", ""},
		"cpu fractional":            {"cpu", "1.5", ""},
		"memory":                    {"memory", "128Mi", ""},
		"ephemeral storage":         {"ephemeral-storage", "1G", ""},
		"huge pages":                {"hugepages-2Mi", "64Mi", ""},
		"extended resource":         {"example.com/dongle", "2", ""},
		"quantity with a space":     {"cpu", "100 m", `"100 m" is not a quantity`},
		"quantity with a unit typo": {"memory", "128MB", `"128MB" is not a quantity`},
		"negative":                  {"memory", "-1Gi", `"-1Gi" is negative`},
		"unknown standard name":     {"cpus", "1", `resource name "cpus" is not one a container can ask for`},
		"huge pages without size":   {"hugepages-big", "1Gi", "hugepages-<page size>"},
		"kubernetes.io domain":      {"kubernetes.io/dongle", "1", "kubernetes.io domain"},
		"not a qualified name":      {"example.com/a b", "1", `resource name "example.com/a b"`},
		"extended resource part":    {"example.com/dongle", "500m", "must be a whole number"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checkErr(t, ValidateResource(tc.name, tc.quantity), tc.wantErr)
		})
	}
}

func TestValidateRequestWithinLimit(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		name, request, limit string
		wantErr              string
	}{
		"below":                        {"memory", "128Mi", "256Mi", ""},
		"equal in other units":         {"cpu", "1", "1000m", ""},
		"above":                        {"memory", "512Mi", "256Mi", "request 512Mi is more than the limit 256Mi"},
		"huge pages below their limit": {"hugepages-2Mi", "32Mi", "64Mi", "must equal the limit"},
		"extended resource equal":      {"example.com/dongle", "1", "1", ""},
		"extended resource below":      {"example.com/dongle", "1", "2", "must equal the limit"},
		"no limit":                     {"memory", "128Mi", "", ""},
		"extended resource, no limit":  {"example.com/dongle", "1", "", "needs a limit"},
		"huge pages, no limit":         {"hugepages-1Gi", "1Gi", "", "needs a limit"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checkErr(t, ValidateRequestWithinLimit(tc.name, tc.request, tc.limit), tc.wantErr)
		})
	}
}

func TestValidateImage(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		ref     string
		wantErr string
	}{
		"default image":              {DefaultImage, ""},
		"docker hub library":         {"squid", ""},
		"registry with port":         {"registry.example:5000/team/squid_proxy:6.10-r1", ""},
		"localhost":                  {"localhost/squid:1", ""},
		"ip registry":                {"10.0.0.5:5000/squid", ""},
		"ipv6 registry":              {"[fd00::1]:5000/squid", ""},
		"digest":                     {"squid@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", ""},
		"tag and digest":             {"squid:6@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", ""},
		"uppercase path":             {"Egress/Squid:1", `path component "Squid" must be lowercase`},
		"uppercase repository":       {"registry.example/Team/squid", `path component "Team"`},
		"space in tag":               {"squid:debian 12", `tag "debian 12"`},
		"empty":                      {"", "the name is empty"},
		"scheme":                     {"https://registry.example/squid", `registry "https:"`},
		"trailing slash":             {"registry.example/squid/", `path component ""`},
		"short digest":               {"squid@sha256:abc", `digest "sha256:abc"`},
		"tag too long":               {"squid:" + strings.Repeat("a", 129), "tag"},
		"double dash separator ok":   {"team/squid--proxy", ""},
		"leading separator":          {"team/-squid", `path component "-squid"`},
		"registry with bad port":     {"registry.example:port/squid", `registry "registry.example:port"`},
		"tag starting with a period": {"squid:.1", `tag ".1"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checkErr(t, ValidateImage(tc.ref), tc.wantErr)
		})
	}
}

func TestValidateNodeSelector(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		key, value string
		wantErr    string
	}{
		"plain":                 {"role", "egress", ""},
		"prefixed, empty value": {"node-role.kubernetes.io/egress", "", ""},
		"key starts with dash":  {"-role", "egress", `label key "-role"`},
		"key with two slashes":  {"a/b/c", "x", `label key "a/b/c"`},
		"value with a space":    {"role", "egress nodes", `label value "egress nodes"`},
		"value too long":        {"role", strings.Repeat("a", 64), "label value"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := ValidateNodeSelectorKey(tc.key)
			if err == nil {
				err = ValidateNodeSelectorValue(tc.value)
			}
			checkErr(t, err, tc.wantErr)
		})
	}
}

// What the provider checks at plan time the backend checks too, before it makes anything: a value the plan
// could not see (unknown until apply) is refused as Permanent, naming it.
func TestCreateRefusesWhatTheAPIServerWould(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		mod     func(*Options)
		wantErr string
	}{
		"request above limit": {func(p *Options) {
			p.Requests, p.Limits = map[string]string{"memory": "512Mi"}, map[string]string{"memory": "256Mi"}
		}, "request 512Mi is more than the limit 256Mi"},
		"unknown resource":   {func(p *Options) { p.Limits = map[string]string{"cpus": "1"} }, `resource name "cpus"`},
		"bad image":          {func(p *Options) { p.Image = "Squid" }, `image "Squid"`},
		"bad selector value": {func(p *Options) { p.NodeSelector = map[string]string{"role": "a b"} }, `label value "a b"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, cs := newFake(t)
			spec := testSpec("p1")
			spec.Placement.Options = &Options{}
			tc.mod(optionsOf(spec.Placement))
			_, err := b.Create(testCtx(t), spec)
			if !errors.Is(err, backend.ErrPermanent) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Create = %v, want Permanent with %q", err, tc.wantErr)
			}
			if n := len(cs.Actions()); n != 0 {
				t.Errorf("the refused placement still sent %d requests: %v", n, cs.Actions())
			}
		})
	}
}

func TestConfigRefusesInsecureWithCA(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Clusters: map[string]ClusterConfig{"main": {Host: "https://k.example.com", Insecure: true, ClusterCACertificate: "x"}}})
	if !errors.Is(err, backend.ErrPermanent) || !errors.Is(err, ErrInsecureWithCA) {
		t.Fatalf("New = %v, want Permanent: %v", err, ErrInsecureWithCA)
	}
}

// A create into a namespace that does not exist is refused by the API server with NotFound about the
// namespace. That is no proxy deleted outside Terraform: Permanent, naming the namespace and what to do.
func TestCreateIntoMissingNamespaceNamesIt(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b, cs := newFake(t)
	namespaceLifecycle(cs)
	controller(ctx, t, cs, nil)
	_, err := b.Create(ctx, testSpec("p1"))
	if !errors.Is(err, backend.ErrPermanent) || backend.IsNotFound(err) {
		t.Fatalf("Create = %v, want Permanent (never NotFound)", err)
	}
	var be *backend.Error
	if !errors.As(err, &be) || be.Object != "namespace proxies on cluster test" {
		t.Fatalf("Create = %v, want it about namespace proxies on cluster test", err)
	}
	for _, want := range []string{"does not exist", "ConfigMap proxies/p1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	advice := backend.AdviceOf(err)
	for _, want := range []string{"kubectl create namespace proxies", "kubernetes.namespace"} {
		if !strings.Contains(advice, want) {
			t.Errorf("advice %q does not say %q", advice, want)
		}
	}
	// And once the namespace is there, the same create goes through.
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(ctx, testSpec("p1")); err != nil {
		t.Fatalf("Create into the namespace made since = %v", err)
	}
}

// namespaceLifecycle makes the fake clientset refuse what the API server's NamespaceLifecycle admission
// plugin refuses: an object created in a namespace that does not exist, answered with its very error.
func namespaceLifecycle(cs *fake.Clientset) {
	cs.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ns := a.GetNamespace()
		if ns == "" {
			return false, nil, nil
		}
		if _, err := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("namespaces"), "", ns); apierrors.IsNotFound(err) {
			return true, nil, apierrors.NewNotFound(corev1.Resource("namespaces"), ns)
		}
		return false, nil, nil
	})
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("error %v, want none", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("error %v, want one saying %q", err, want)
	}
}
