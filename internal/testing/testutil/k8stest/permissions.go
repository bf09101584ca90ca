package k8stest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// PermissionsDir holds the kubernetes permission documents users apply, relative to the module's root.
const PermissionsDir = "examples/permissions/kubernetes"

// Documents are the objects of the permission documents, decoded from the files as they are.
type Documents struct {
	Role               *rbacv1.Role
	RoleBinding        *rbacv1.RoleBinding
	ClusterRole        *rbacv1.ClusterRole
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
	Namespace          *corev1.Namespace
	ServiceAccount     *corev1.ServiceAccount
}

// ReadDocuments decodes every object of the files in PermissionsDir with the API's own decoder, and fails the
// test on a file it cannot read or an object of a kind the documents have no place for.
func ReadDocuments(t testing.TB) Documents {
	t.Helper()
	dir := filepath.Join(moduleRoot(t), PermissionsDir)
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no permission documents in %s (%v)", dir, err)
	}
	var d Documents
	for _, f := range files {
		objs, err := decodeFile(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, o := range objs {
			switch o := o.(type) {
			case *rbacv1.Role:
				d.Role = o
			case *rbacv1.RoleBinding:
				d.RoleBinding = o
			case *rbacv1.ClusterRole:
				d.ClusterRole = o
			case *rbacv1.ClusterRoleBinding:
				d.ClusterRoleBinding = o
			case *corev1.Namespace:
				d.Namespace = o
			case *corev1.ServiceAccount:
				d.ServiceAccount = o
			default:
				t.Fatalf("%s: an object of kind %T, which the tests do not apply", f, o)
			}
		}
	}
	if d.Role == nil || d.RoleBinding == nil || d.ClusterRole == nil || d.ClusterRoleBinding == nil || d.Namespace == nil || d.ServiceAccount == nil {
		t.Fatalf("%s lacks one of Role, RoleBinding, ClusterRole, ClusterRoleBinding, Namespace, ServiceAccount: %+v", dir, d)
	}
	return d
}

func decodeFile(name string) ([]runtime.Object, error) {
	raw, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var out []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.Bytes()
}

// moduleRoot is the directory of go.mod above the test's working directory (its package's).
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// Grant is one permission a Role rule gives: a verb on a resource of a group.
type Grant struct{ Verb, Group, Resource string }

func (g Grant) String() string {
	if g.Group == "" {
		return g.Verb + " " + g.Resource
	}
	return g.Verb + " " + g.Resource + "." + g.Group
}

// Grants lists what rules give, rule by rule and verb by verb. Each rule must name one group and one
// resource, and no resource names or URLs: the documents are written so, and a removal is then one verb.
func Grants(t testing.TB, rules []rbacv1.PolicyRule) []Grant {
	t.Helper()
	var out []Grant
	for i, r := range rules {
		if len(r.APIGroups) != 1 || len(r.Resources) != 1 || len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Fatalf("rule %d (%+v) does not name exactly one group and one resource", i, r)
		}
		for _, v := range r.Verbs {
			out = append(out, Grant{Verb: v, Group: r.APIGroups[0], Resource: r.Resources[0]})
		}
	}
	return out
}

// Without returns a copy of role without the one grant g.
func Without(role *rbacv1.Role, g Grant) *rbacv1.Role {
	out := role.DeepCopy()
	for i := range out.Rules {
		r := &out.Rules[i]
		if r.APIGroups[0] == g.Group && r.Resources[0] == g.Resource {
			r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { return v == g.Verb })
		}
	}
	out.Rules = slices.DeleteFunc(out.Rules, func(r rbacv1.PolicyRule) bool { return len(r.Verbs) == 0 })
	return out
}

// ApplyRole puts role, bound to the subject sa by binding (the document's RoleBinding, its roleRef set to
// role's name), into ns, as `kubectl apply -n ns -f role.yaml -f rolebinding.yaml` does with the subject
// edited. The namespace's deletion takes both.
func (c *Cluster) ApplyRole(t testing.TB, ns string, role *rbacv1.Role, binding *rbacv1.RoleBinding, sa rbacv1.Subject) {
	t.Helper()
	ctx := context.Background()
	role, binding = role.DeepCopy(), binding.DeepCopy()
	role.Namespace, binding.Namespace = ns, ns
	binding.RoleRef.Name = role.Name
	binding.Subjects = []rbacv1.Subject{sa}
	if _, err := c.cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Role %s/%s: %v", ns, role.Name, err)
	}
	if _, err := c.cs.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating RoleBinding %s/%s: %v", ns, binding.Name, err)
	}
}

// Subject is the documents' subject: the ServiceAccount of serviceaccount.yaml.
func (d Documents) Subject() rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: d.ServiceAccount.Name, Namespace: d.ServiceAccount.Namespace}
}

// documented is applied once per test process: the Namespace, ServiceAccount, ClusterRole and
// ClusterRoleBinding of the documents, which tests running side by side (other processes too) share.
var documented struct {
	once sync.Once
	err  error
}

// DocumentedCredentials applies the documents as they are, the Role and its RoleBinding in each of
// namespaces, and returns a token of the documents' ServiceAccount: credentials with exactly what the
// documents grant. It returns once the API server's authorizer allows what the Role grants in each namespace.
func (c *Cluster) DocumentedCredentials(t testing.TB, namespaces ...string) Credentials {
	t.Helper()
	d := ReadDocuments(t)
	documented.once.Do(func() { documented.err = c.applyClusterDocuments(d) })
	if documented.err != nil {
		t.Fatalf("applying %s: %v", PermissionsDir, documented.err)
	}
	for _, ns := range namespaces {
		if err := c.applyRoleIfMissing(ns, d); err != nil {
			t.Fatalf("applying the Role of %s in %s: %v", PermissionsDir, ns, err)
		}
	}
	creds := c.token(t, d.ServiceAccount.Namespace, d.ServiceAccount.Name)
	for _, ns := range namespaces {
		c.WaitAllowed(t, creds, ns, Grants(t, d.Role.Rules)...)
	}
	return creds
}

// applyClusterDocuments creates, or updates to what the files say, the documents' cluster-scoped objects and
// the ServiceAccount.
func (c *Cluster) applyClusterDocuments(d Documents) error {
	ctx := context.Background()
	rbac, core := c.cs.RbacV1(), c.cs.CoreV1()
	if _, err := core.Namespaces().Create(ctx, d.Namespace, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := core.ServiceAccounts(d.ServiceAccount.Namespace).Create(ctx, d.ServiceAccount, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := upsert(ctx, rbac.ClusterRoles().Get, rbac.ClusterRoles().Create, rbac.ClusterRoles().Update, d.ClusterRole,
			func(cur, want *rbacv1.ClusterRole) { cur.Rules = want.Rules }); err != nil {
			return err
		}
		return upsert(ctx, rbac.ClusterRoleBindings().Get, rbac.ClusterRoleBindings().Create, rbac.ClusterRoleBindings().Update, d.ClusterRoleBinding,
			func(cur, want *rbacv1.ClusterRoleBinding) { cur.Subjects = want.Subjects })
	})
}

// applyRoleIfMissing puts the documented Role and RoleBinding into ns, or makes the ones there what the files say.
func (c *Cluster) applyRoleIfMissing(ns string, d Documents) error {
	ctx := context.Background()
	role, binding := d.Role.DeepCopy(), d.RoleBinding.DeepCopy()
	role.Namespace, binding.Namespace = ns, ns
	roles, bindings := c.cs.RbacV1().Roles(ns), c.cs.RbacV1().RoleBindings(ns)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := upsert(ctx, roles.Get, roles.Create, roles.Update, role, func(cur, want *rbacv1.Role) { cur.Rules = want.Rules }); err != nil {
			return err
		}
		return upsert(ctx, bindings.Get, bindings.Create, bindings.Update, binding,
			func(cur, want *rbacv1.RoleBinding) { cur.Subjects = want.Subjects })
	})
}

// upsert creates want, or sets onto the object of its name what set copies.
func upsert[T interface {
	metav1.Object
	runtime.Object
}](ctx context.Context,
	get func(context.Context, string, metav1.GetOptions) (T, error),
	create func(context.Context, T, metav1.CreateOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error),
	want T, set func(cur, want T),
) error {
	_, err := create(ctx, want, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	cur, err := get(ctx, want.GetName(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	set(cur, want)
	_, err = update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// RoleCredentials makes a ServiceAccount named name in ns, bound there to role (the documents' Role, or one
// short of a verb) by the documents' RoleBinding and to nothing else, and returns its token once the
// authorizer allows what role grants.
func (c *Cluster) RoleCredentials(t testing.TB, ns, name string, role *rbacv1.Role) Credentials {
	t.Helper()
	d := ReadDocuments(t)
	ctx := context.Background()
	if _, err := c.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ServiceAccount %s/%s: %v", ns, name, err)
	}
	// Named after the ServiceAccount too, so that several in one namespace each have their own.
	role = role.DeepCopy()
	role.Name += "-" + name
	binding := d.RoleBinding.DeepCopy()
	binding.Name += "-" + name
	c.ApplyRole(t, ns, role, binding, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns})
	creds := c.token(t, ns, name)
	c.WaitAllowed(t, creds, ns, Grants(t, role.Rules)...)
	return creds
}

// BindNodes binds the documents' ClusterRole (Nodes) to the ServiceAccount ns/name too, until the test ends.
func (c *Cluster) BindNodes(t testing.TB, ns, name string) {
	t.Helper()
	d := ReadDocuments(t)
	documented.once.Do(func() { documented.err = c.applyClusterDocuments(d) })
	if documented.err != nil {
		t.Fatalf("applying %s: %v", PermissionsDir, documented.err)
	}
	b := d.ClusterRoleBinding.DeepCopy()
	b.Name = d.ClusterRoleBinding.Name + "-" + ns + "-" + name
	b.Subjects = []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}
	if _, err := c.cs.RbacV1().ClusterRoleBindings().Create(context.Background(), b, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ClusterRoleBinding %s: %v", b.Name, err)
	}
	t.Cleanup(func() {
		_ = c.cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
	})
}

func (c *Cluster) token(t testing.TB, ns, name string) Credentials {
	t.Helper()
	expiry := int64(3 * 3600)
	tr, err := c.cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for ServiceAccount %s/%s: %v", ns, name, err)
	}
	return Credentials{Host: c.host, Token: tr.Status.Token, CA: string(c.ca)}
}

// RESTConfig is how client-go reaches the cluster with creds.
func (creds Credentials) RESTConfig() *rest.Config {
	return &rest.Config{Host: creds.Host, BearerToken: creds.Token, TLSClientConfig: rest.TLSClientConfig{CAData: []byte(creds.CA)}}
}

// Kubeconfig writes a kubeconfig file for creds into dir and returns its path.
func (creds Credentials) Kubeconfig(t testing.TB, dir string) string {
	t.Helper()
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: test
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
`, creds.Host, base64.StdEncoding.EncodeToString([]byte(creds.CA)), creds.Token)
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// WaitAllowed waits until the API server's authorizer allows creds every grant in ns: a RoleBinding takes
// effect once the authorizer's cache has it, a moment after it is made. It asks as creds, with
// SelfSubjectAccessReviews, which every authenticated user may make.
func (c *Cluster) WaitAllowed(t testing.TB, creds Credentials, ns string, grants ...Grant) {
	t.Helper()
	rc := creds.RESTConfig()
	rc.QPS, rc.Burst = 200, 200 // one review per grant: client-go's default of 5 a second would take seconds
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, g := range grants {
		var last string
		err := backend.Poll(ctx, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
			r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: ns, Verb: g.Verb, Group: g.Group, Resource: g.Resource,
				}},
			}, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			last = r.Status.Reason
			return r.Status.Allowed, nil
		})
		if err != nil {
			t.Fatalf("the authorizer never allowed %s in %s (%s): %v", g, ns, last, err)
		}
	}
}
