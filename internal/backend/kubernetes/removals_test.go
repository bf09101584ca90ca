package kubernetes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil/k8stest"
)

// Each verb of RoleDocument is needed: without it, the operation that sends it fails Permanent, naming the
// verb, the resource and its group, the namespace and the document. TestEachVerbIsNeeded proves it for every
// verb on the fake clientset, with the API server's RBAC played by a reactor; TestPermissionsLive proves it
// for a sample of them on the test cluster.

// The operations a removal case runs with the Role short of one verb.
const (
	opCreate      = "Create"
	opCreateLB    = "Create of a LoadBalancer proxy" // waits for the load balancer's address, which never comes here
	opGet         = "Get"
	opUpdate      = "Update"
	opReconfigure = "Reconfigure"
	opDelete      = "Delete"
	opListByTag   = "ListByTag"
)

// removal is the operation that needs one verb of the Role, and what it must meet to send it: finalizer names
// the kind of the proxy's object that carries a finalizer when Delete runs, which Delete then watches until it
// is gone.
type removal struct {
	op        string
	finalizer string
	// raceOnCluster, when set, says why a real cluster may do without the verb in a given run: the operation
	// sends it only when the cluster is slower than the request before it. TestPermissionsLive leaves it to
	// TestEachVerbIsNeeded, where the fake is never that fast.
	raceOnCluster string
}

// removals are, by grant of RoleDocument, the operation that fails without it. A grant of the Role without an
// entry fails TestEachVerbIsNeeded and TestPermissionsLive (nothing is known to need it), and so does an entry
// the Role lacks.
var removals = map[string]removal{
	"create deployments.apps": {op: opCreate},
	"get deployments.apps":    {op: opGet},
	"list deployments.apps":   {op: opCreate},
	"watch deployments.apps":  {op: opCreate},
	"update deployments.apps": {op: opUpdate},
	"delete deployments.apps": {op: opDelete},

	"list replicasets.apps":  {op: opDelete},
	"watch replicasets.apps": {op: opDelete, finalizer: "replicasets"},
	// The finalizer keeps the ReplicaSet for the delete to meet: the garbage collector may be quicker.
	"delete replicasets.apps": {op: opDelete, finalizer: "replicasets"},

	"create configmaps": {op: opCreate},
	"get configmaps":    {op: opGet},
	"list configmaps":   {op: opDelete},
	"watch configmaps":  {op: opDelete, finalizer: "configmaps"},
	"update configmaps": {op: opCreate}, // its owner reference, once the Deployment has a UID
	"delete configmaps": {op: opDelete},

	"create secrets": {op: opCreate},
	"get secrets":    {op: opUpdate},
	"update secrets": {op: opCreate},
	"delete secrets": {op: opDelete},

	"create services": {op: opCreate},
	"get services":    {op: opGet},
	"list services":   {op: opListByTag},
	"watch services":  {op: opCreateLB},
	"update services": {op: opUpdate},
	"delete services": {op: opDelete},

	"list pods":  {op: opGet},
	"watch pods": {op: opCreate},

	"create networkpolicies.networking.k8s.io": {op: opCreate},
	"get networkpolicies.networking.k8s.io":    {op: opUpdate},
	"list networkpolicies.networking.k8s.io":   {op: opDelete},
	"watch networkpolicies.networking.k8s.io":  {op: opDelete, finalizer: "networkpolicies"},
	"update networkpolicies.networking.k8s.io": {op: opUpdate},
	"delete networkpolicies.networking.k8s.io": {op: opDelete},

	"create poddisruptionbudgets.policy": {op: opCreate},
	"get poddisruptionbudgets.policy":    {op: opUpdate},
	"list poddisruptionbudgets.policy":   {op: opDelete},
	"watch poddisruptionbudgets.policy":  {op: opDelete, finalizer: "poddisruptionbudgets"},
	"update poddisruptionbudgets.policy": {op: opUpdate},
	"delete poddisruptionbudgets.policy": {op: opDelete},

	"list endpointslices.discovery.k8s.io": {op: opReconfigure},
	"watch endpointslices.discovery.k8s.io": {op: opReconfigure, raceOnCluster: "the EndpointSlice controller often has the " +
		"Service on the new pods by the time the rollout is done, and the list finds them without a watch"},
}

// testFinalizer holds an object of the proxy back from deletion until the test takes it off.
const testFinalizer = "egress-proxies.test/permissions"

// runOperation runs op on b for the proxy of spec (id).
func runOperation(ctx context.Context, b *Backend, op string, spec backend.Spec, id backend.ProviderID) error {
	var err error
	switch op {
	case opCreate, opCreateLB:
		_, err = b.Create(ctx, spec)
	case opGet:
		_, err = b.Get(ctx, id)
	case opUpdate:
		spec.Labels = map[string]string{"tier": "egress"}
		_, err = b.Update(ctx, id, spec)
	case opReconfigure:
		_, err = b.Reconfigure(ctx, id, reconfigured(spec.Proxy))
	case opDelete:
		err = b.Delete(ctx, id)
	case opListByTag:
		_, err = b.ListByTag(ctx, backend.Selector{Owner: spec.Owner})
	default:
		err = fmt.Errorf("unknown operation %q", op)
	}
	return err
}

// reconfigured are the new rules a removal case's Reconfigure sends.
func reconfigured(p proxyconf.Settings) proxyconf.Settings {
	p.AllowedDestinations = []string{"example.org"}
	return p
}

// requireRemovalsAreTheRole fails the test unless removals has an entry for each grant and no other.
func requireRemovalsAreTheRole(t *testing.T, grants []k8stest.Grant) {
	t.Helper()
	for _, g := range grants {
		if _, ok := removals[g.String()]; !ok {
			t.Errorf("%s grants %s, and no operation is known to need it: take it out of the Role (and check.go), or add "+
				"the operation that sends it to removals", RoleDocument, g)
		}
	}
	for name := range removals {
		if !slices.ContainsFunc(grants, func(g k8stest.Grant) bool { return g.String() == name }) {
			t.Errorf("removals has %s, which %s does not grant", name, RoleDocument)
		}
	}
}

// requireRefusal fails the test unless err is op's refusal for want of g in namespace ns, named with the
// document that grants it.
func requireRefusal(t *testing.T, err error, op string, g k8stest.Grant, ns string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded without %s: the Role grants a verb this operation does not need", op, g)
	}
	want := g.String() + " in namespace " + ns
	if msg := err.Error(); !strings.Contains(msg, want) || !strings.Contains(msg, RoleDocument) {
		t.Errorf("the error does not name %q and %s: %v", want, RoleDocument, err)
	}
	if op == opListByTag {
		return // a failed scope of the list, beside what it found: no class of its own
	}
	if backend.ClassOf(err) != backend.ClassPermanent {
		t.Errorf("class %v, want Permanent: %v", backend.ClassOf(err), err)
	}
	if advice := backend.AdviceOf(err); !strings.Contains(advice, RoleDocument) {
		t.Errorf("the advice does not name %s: %q", RoleDocument, advice)
	}
}

// TestEachVerbIsNeeded removes each verb of the Role in turn and runs the operation that needs it on the fake
// clientset, which refuses, as the API server's RBAC would (in its words), whatever the Role short of that verb
// does not grant. What the fake lacks is played by the test (playTheCluster).
func TestEachVerbIsNeeded(t *testing.T) {
	t.Parallel()
	d := k8stest.ReadDocuments(t)
	grants := k8stest.Grants(t, d.Role.Rules)
	requireRemovalsAreTheRole(t, grants)
	for _, g := range grants {
		r, ok := removals[g.String()]
		if !ok {
			continue
		}
		t.Run("without "+g.String(), func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			b, cs := newFake(t)
			spec := testSpec("p1")
			spec.Proxy.Users = []proxyconf.BasicAuth{{Username: "u", Password: "secret-password"}}
			if r.op == opCreateLB {
				spec.Placement.Options = &Options{ServiceType: "LoadBalancer", NetworkPolicy: true}
			}
			// Without the controller a create's rollout never ends, so the refused list or watch of the
			// wait is always reached; the load balancer's wait comes after the rollout, and needs it.
			if r.op != opCreate {
				controller(ctx, t, cs, nil)
			}
			if r.op != opCreate && r.op != opCreateLB {
				if _, err := b.Create(ctx, spec); err != nil {
					t.Fatal(err)
				}
				playTheCluster(ctx, t, cs, spec, r)
			}
			refuseBeyond(cs, k8stest.Grants(t, k8stest.Without(d.Role, g).Rules))
			requireRefusal(t, runOperation(ctx, b, r.op, spec, testID()), r.op, g, testNS)
		})
	}
}

// playTheCluster adds to the fake what the cluster would do for the proxy of spec: the Deployment's
// ReplicaSet, for a Reconfigure a pod of each template its rollout writes (their checksum covers a salted
// hash, known only once written), and the finalizer r asks for, which holds its object back from a
// delete (the fake would delete it at once).
func playTheCluster(ctx context.Context, t *testing.T, cs *fake.Clientset, spec backend.Spec, r removal) {
	t.Helper()
	dep, err := cs.AppsV1().Deployments(testNS).Get(ctx, spec.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: spec.Name + "-abc", Namespace: testNS, Labels: selectorLabelsOf(dep)}}
	if err := cs.Tracker().Add(rs); err != nil {
		t.Fatal(err)
	}
	cs.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d, ok := a.(k8stesting.UpdateAction).GetObject().(*appsv1.Deployment)
		if !ok || a.GetSubresource() != "" || r.op != opReconfigure {
			return false, nil, nil
		}
		sum := d.Spec.Template.Annotations[annotationChecksum]
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: d.Name + "-" + sum[:8], Namespace: testNS,
			Labels: d.Spec.Template.Labels, Annotations: map[string]string{annotationChecksum: sum}}}
		_ = cs.Tracker().Add(pod) // AlreadyExists: the same template again
		return false, nil, nil
	})
	if r.finalizer == "" {
		return
	}
	gvr := map[string]schema.GroupVersionResource{
		"replicasets":          appsv1.SchemeGroupVersion.WithResource("replicasets"),
		"configmaps":           corev1.SchemeGroupVersion.WithResource("configmaps"),
		"networkpolicies":      networkingv1.SchemeGroupVersion.WithResource("networkpolicies"),
		"poddisruptionbudgets": policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets"),
	}[r.finalizer]
	if gvr.Resource == "" {
		t.Fatalf("no finalizer for %s", r.finalizer)
	}
	cs.PrependReactor("delete", r.finalizer, func(a k8stesting.Action) (bool, runtime.Object, error) {
		del, ok := a.(k8stesting.DeleteAction)
		if !ok {
			return false, nil, nil
		}
		obj, err := cs.Tracker().Get(gvr, testNS, del.GetName())
		if err != nil {
			return true, nil, err // NotFound, as the API server answers
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return true, nil, err
		}
		m.SetFinalizers([]string{testFinalizer})
		now := metav1.Now()
		m.SetDeletionTimestamp(&now)
		return true, nil, cs.Tracker().Update(gvr, obj, testNS)
	})
	// Delete reads the finalizer from what it lists.
	name := spec.Name
	if r.finalizer == "replicasets" {
		name = rs.Name
	}
	obj, err := cs.Tracker().Get(gvr, testNS, name)
	if err != nil {
		t.Fatal(err)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	m.SetFinalizers([]string{testFinalizer})
	if err := cs.Tracker().Update(gvr, obj, testNS); err != nil {
		t.Fatal(err)
	}
}

// refuseBeyond makes the fake answer as an API server whose RBAC grants the credentials role in testNS and
// nothing else (but what every authenticated user may do): a Forbidden error in the authorizer's words, and
// SelfSubjectAccessReviews answered accordingly. The Deployment's status written by the test's controller
// is let through.
func refuseBeyond(cs *fake.Clientset, role []k8stest.Grant) {
	allowed := func(a k8stesting.Action) bool {
		res := a.GetResource()
		g := k8stest.Grant{Verb: a.GetVerb(), Group: res.Group, Resource: res.Resource}
		return a.GetSubresource() == "status" || slices.Contains(grantedByDefault, g.String()) ||
			a.GetNamespace() == testNS && slices.Contains(role, g)
	}
	refusal := func(a k8stesting.Action) error {
		res := a.GetResource()
		return rbacForbidden(a.GetVerb(), res.Group, res.Resource, a.GetNamespace())
	}
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r, _ := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		ra := r.Spec.ResourceAttributes
		r.Status.Allowed = ra.Namespace == testNS && slices.Contains(role, k8stest.Grant{Verb: ra.Verb, Group: ra.Group, Resource: ra.Resource})
		return true, r, nil
	})
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if allowed(a) {
			return false, nil, nil
		}
		return true, nil, refusal(a)
	})
	cs.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if allowed(a) {
			return false, nil, nil
		}
		return true, nil, refusal(a)
	})
}
