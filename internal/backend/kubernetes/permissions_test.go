package kubernetes

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil/k8stest"
)

// The documents users apply (k8stest.PermissionsDir) and what the backend asks and sends agree: Check reviews
// exactly the Role's verbs, and every request the backend sends is one the Role (or, for Nodes, the optional
// ClusterRole) grants. TestPermissionsLive proves on the cluster that each of those verbs is needed.

func TestPermissionsAreTheRole(t *testing.T) {
	t.Parallel()
	d := k8stest.ReadDocuments(t)
	var checked []k8stest.Grant
	for _, p := range permissions {
		for _, v := range p.verbs {
			checked = append(checked, k8stest.Grant{Verb: v, Group: p.group, Resource: p.resource})
		}
	}
	if role := k8stest.Grants(t, d.Role.Rules); !slices.Equal(checked, role) {
		t.Errorf("Check reviews what %s does not grant: %v; it grants what Check does not review: %v "+
			"(or the order differs: one rule per resource, in the same order)", RoleDocument, missingFrom(role, checked), missingFrom(checked, role))
	}
	if nodes := k8stest.Grants(t, d.ClusterRole.Rules); !slices.Equal(nodes, []k8stest.Grant{{Verb: "get", Resource: "nodes"}}) {
		t.Errorf("%s grants %v, want get nodes alone", NodesDocument, nodes)
	}
	if d.RoleBinding.RoleRef.Kind != "Role" || d.RoleBinding.RoleRef.Name != d.Role.Name {
		t.Errorf("the RoleBinding binds %+v, not the Role %s", d.RoleBinding.RoleRef, d.Role.Name)
	}
	if d.ClusterRoleBinding.RoleRef.Kind != "ClusterRole" || d.ClusterRoleBinding.RoleRef.Name != d.ClusterRole.Name {
		t.Errorf("the ClusterRoleBinding binds %+v, not the ClusterRole %s", d.ClusterRoleBinding.RoleRef, d.ClusterRole.Name)
	}
	for _, subjects := range [][]string{subjectsOf(d.RoleBinding.Subjects), subjectsOf(d.ClusterRoleBinding.Subjects)} {
		want := d.Subject()
		if !slices.Equal(subjects, []string{want.Kind + " " + want.Namespace + "/" + want.Name}) {
			t.Errorf("a binding names %v, not the ServiceAccount of serviceaccount.yaml", subjects)
		}
	}
	if d.Role.Namespace != "" || d.RoleBinding.Namespace != "" {
		t.Error("the Role and RoleBinding name a namespace: they are applied with -n in each namespace of proxies")
	}
}

// missingFrom lists the grants of b that a lacks.
func missingFrom(a, b []k8stest.Grant) []k8stest.Grant {
	var out []k8stest.Grant
	for _, g := range b {
		if !slices.Contains(a, g) {
			out = append(out, g)
		}
	}
	return out
}

func subjectsOf(s []rbacv1.Subject) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = x.Kind + " " + x.Namespace + "/" + x.Name
	}
	return out
}

// grantedByDefault are requests every authenticated user may make on a cluster with the default RBAC: the
// system:basic-user ClusterRole (SelfSubjectAccessReviews, what Check asks) and system:public-info-viewer
// (/version, /readyz). TestPermissionsLive checks that the test cluster grants them so.
var grantedByDefault = []string{"create selfsubjectaccessreviews.authorization.k8s.io", "get version"}

// TestEveryVerbSentIsGranted runs a proxy's life on the fake clientset (create with credentials, read with a
// pod on a node, relabel, new rules, list, health, delete) and fails for any request the documents
// do not grant: a verb added to the code and not to the Role fails here, before any cluster runs.
func TestEveryVerbSentIsGranted(t *testing.T) {
	t.Parallel()
	d := k8stest.ReadDocuments(t)
	role, nodes := k8stest.Grants(t, d.Role.Rules), k8stest.Grants(t, d.ClusterRole.Rules)
	ctx := testCtx(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: corev1.NodeStatus{
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "203.0.113.7"}},
	}}
	b, cs := newFake(t, node)
	controller(ctx, t, cs, nil)
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r, _ := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		r.Status.Allowed = true
		return true, r, nil
	})
	spec := testSpec("p1")
	spec.Proxy.Users = []proxyconf.BasicAuth{{Username: "u", Password: "secret-password"}}
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	dep, err := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1-abc", Namespace: testNS, Labels: selectorLabelsOf(dep)},
		Spec: corev1.PodSpec{NodeName: node.Name}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if err := cs.Tracker().Add(pod); err != nil {
		t.Fatal(err)
	}
	inst, err := b.Get(ctx, testID())
	if err != nil || inst.EgressAddress != "203.0.113.7" {
		t.Fatalf("Get: %+v, %v; want the node's address read", inst, err)
	}
	spec.Labels["tier"] = "egress" // the replicas stay: the fake's Deployments keep their generation
	if _, err := b.Update(ctx, testID(), spec); err != nil {
		t.Fatal(err)
	}
	next := spec.Proxy
	next.Users = nil
	next.AllowedDestinations = []string{"example.org"}
	if _, err := b.Reconfigure(ctx, testID(), next); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ListByTag(ctx, backend.Selector{Owner: spec.Owner}); err != nil {
		t.Fatal(err)
	}
	if h := b.Check(ctx); len(h) != 1 || !h[0].Healthy {
		t.Fatalf("Check: %+v", h)
	}
	marked := pod.DeepCopy()
	marked.DeletionTimestamp = ptr.To(metav1.Now())
	if err := cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), marked, testNS); err != nil {
		t.Fatal(err)
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "p1-abc", Namespace: testNS, Labels: selectorLabelsOf(dep)}}
	if err := cs.Tracker().Add(rs); err != nil { // the fake has no Deployment controller to make it
		t.Fatal(err)
	}
	if err := b.Delete(ctx, testID()); err != nil {
		t.Fatal(err)
	}

	sent := map[string]bool{}
	for _, a := range cs.Actions() {
		if a.GetSubresource() == "status" {
			continue // the test's controller writing the Deployment's status
		}
		if sent[describe(a)] {
			continue
		}
		sent[describe(a)] = true
		if msg := ungranted(a, role, nodes); msg != "" {
			t.Errorf("the backend sent %s, which %s", describe(a), msg)
		}
	}
	if t.Failed() {
		t.Logf("add the verb to %s (and to permissions in check.go), or do without it", RoleDocument)
	}
	// The test would prove nothing if the proxy's life had not gone through its objects.
	for _, want := range []string{"create deployments.apps in " + testNS, "get nodes", "delete replicasets.apps in " + testNS, "update secrets in " + testNS} {
		if !sent[want] {
			t.Errorf("the backend never sent %s; it sent %v", want, keys(sent))
		}
	}
}

func describe(a k8stesting.Action) string {
	g := a.GetResource()
	s := a.GetVerb() + " " + g.Resource
	if g.Group != "" {
		s += "." + g.Group
	}
	if a.GetNamespace() != "" {
		s += " in " + a.GetNamespace()
	}
	return s
}

// ungranted says why the documents do not grant a, or "" when they do.
func ungranted(a k8stesting.Action, role, nodes []k8stest.Grant) string {
	res := a.GetResource()
	g := k8stest.Grant{Verb: a.GetVerb(), Group: res.Group, Resource: res.Resource}
	if slices.Contains(grantedByDefault, g.String()) {
		return ""
	}
	switch ns := a.GetNamespace(); {
	case ns == "" && slices.Contains(nodes, g):
		return ""
	case ns == "" && g.Verb == "list" && slices.Contains(role, g):
		// ListByTag tries the whole cluster first and falls back to the configured namespaces when RBAC
		// refuses: the Role's list is what it needs.
		return ""
	case ns == "":
		return fmt.Sprintf("is cluster-scoped, and neither %s nor the defaults grant it", NodesDocument)
	case ns != testNS:
		return "is in another namespace than the proxy's"
	case !slices.Contains(role, g):
		return fmt.Sprintf("%s does not grant", RoleDocument)
	}
	return ""
}

func keys(m map[string]bool) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}
