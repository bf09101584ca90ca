package kubernetes

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil/k8stest"
)

// How many removal cases TestPermissionsLive runs, and from which seed it picks them.
const (
	permSeedEnv    = "EGRESS_K8S_PERMISSIONS_SEED"
	permCasesEnv   = "EGRESS_K8S_PERMISSIONS_CASES"
	permCasesShort = 6
)

// TestPermissionsLive proves on the cluster of scripts/k8s-env.sh that each verb of RoleDocument is needed:
// with the Role short of one verb, bound to a ServiceAccount of its own and nothing else, the operation that
// sends it fails Permanent, naming the verb, the resource and its group, the namespace and the document. It
// runs the backend directly, each case in a namespace of its own, side by side. The cases are many: a random
// sample of them runs (permCasesShort; EGRESS_K8S_PERMISSIONS_CASES=all or a number for more), from a seed
// the log prints and EGRESS_K8S_PERMISSIONS_SEED takes back. That the documented Role is enough is proved by
// TestConformanceLive and the provider's acceptance tests, which run with it alone. make test-provider runs it
// after those.
func TestPermissionsLive(t *testing.T) {
	kubeconfig := os.Getenv("EGRESS_K8S_KUBECONFIG")
	if kubeconfig == "" {
		t.Skip("EGRESS_K8S_KUBECONFIG is not set: run `scripts/k8s-env.sh start` and set it to the kubeconfig it writes " +
			"(/var/tmp/egress-k8s/kubeconfig), or `make test-provider`")
	}
	cluster := k8stest.Connect(t, kubeconfig)
	docs := k8stest.ReadDocuments(t)
	grants := k8stest.Grants(t, docs.Role.Rules)
	requireRemovalsAreTheRole(t, grants)
	admin, err := New(Config{Clusters: map[string]ClusterConfig{"test": {ConfigPath: kubeconfig}}})
	if err != nil {
		t.Fatal(err)
	}
	adminCS := adminClientset(t, kubeconfig)

	// Side by side, whatever -parallel says (it defaults to the number of CPUs): the cases wait on the
	// cluster, not on this process. t.Run may be called from several goroutines at once.
	var wg sync.WaitGroup
	wg.Go(func() {
		t.Run("what every authenticated user may do", func(t *testing.T) { requireDefaultGrants(t, adminCS) })
	})
	wg.Go(func() {
		t.Run("Nodes only with the ClusterRole", func(t *testing.T) { requireNodesDocument(t, cluster, admin, docs) })
	})
	for _, g := range sampleRemovals(t, grants) {
		wg.Go(func() {
			t.Run("without "+g.String(), func(t *testing.T) {
				runRemoval(t, cluster, admin, adminCS, docs, g, removals[g.String()])
			})
		})
	}
	wg.Wait()
}

// sampleRemovals picks the grants whose removal runs this time, and logs how to run the same again.
func sampleRemovals(t *testing.T, grants []k8stest.Grant) []k8stest.Grant {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(permSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", permSeedEnv, s, err)
		}
	}
	n := permCasesShort
	switch s := os.Getenv(permCasesEnv); s {
	case "":
	case "all":
		n = len(grants)
	default:
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number or all", permCasesEnv, s)
		}
	}
	picked := slices.DeleteFunc(slices.Clone(grants), func(g k8stest.Grant) bool {
		if why := removals[g.String()].raceOnCluster; why != "" {
			t.Logf("not removing %s here (TestEachVerbIsNeeded does): %s", g, why)
			return true
		}
		return false
	})
	rand.New(rand.NewPCG(seed, seed)).Shuffle(len(picked), func(i, j int) { picked[i], picked[j] = picked[j], picked[i] })
	picked = picked[:min(n, len(picked))]
	names := make([]string, len(picked))
	for i, g := range picked {
		names[i] = g.String()
	}
	t.Logf("removing %d of the Role's %d verbs, seed %d (run them again with %s=%d %s=%d): %s",
		len(picked), len(grants), seed, permSeedEnv, seed, permCasesEnv, len(picked), strings.Join(names, ", "))
	return picked
}

func adminClientset(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = 100, 200 // the cases side by side put their finalizers on and off through it
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// runRemoval runs one case: a namespace, a proxy made there as the cluster's admin when the operation needs
// one, and the operation as a ServiceAccount bound to the Role without g.
func runRemoval(t *testing.T, cluster *k8stest.Cluster, admin *Backend, adminCS kubernetes.Interface, docs k8stest.Documents, g k8stest.Grant, r removal) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := cluster.Namespace(t, "perm")
	creds := cluster.RoleCredentials(t, ns, "provider", k8stest.Without(docs.Role, g))
	restricted, err := New(Config{Clusters: map[string]ClusterConfig{"test": {
		Host: creds.Host, Token: creds.Token, ClusterCACertificate: creds.CA, Namespaces: []string{ns},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	spec := permSpec(ns, r.op == opCreateLB)
	id := backend.ProviderID{Backend: Kind, Target: "test", Scope: ns, Name: spec.Name}
	if r.op != opCreate && r.op != opCreateLB {
		if _, err := admin.Create(ctx, spec); err != nil {
			t.Fatalf("making the proxy as the cluster's admin: %v", err)
		}
	}
	if r.finalizer != "" {
		holdWithFinalizer(ctx, t, adminCS, ns, r.finalizer, spec)
	}
	start := time.Now()
	err = runOperation(ctx, restricted, r.op, spec, id)
	t.Logf("%s without %s returned after %v: %v (advice: %s)", r.op, g, time.Since(start).Round(time.Millisecond), err, backend.AdviceOf(err))
	requireRefusal(t, err, r.op, g, ns)
}

func permSpec(ns string, loadBalancer bool) backend.Spec {
	uid := uuid.NewString()
	opts := &Options{NetworkPolicy: true}
	if loadBalancer {
		opts.ServiceType = "LoadBalancer"
	}
	return backend.Spec{
		Name: backend.NameFromUID(uid), UID: uid, Owner: "permissions-" + ns, Labels: map[string]string{},
		Placement: backend.Placement{Backend: Kind, Target: "test", Scope: ns, Options: opts},
		Proxy: proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.244.0.0/16"}, AllowedDestinations: []string{"example.com"},
			Users: []proxyconf.BasicAuth{{Username: "u", Password: "permissions-test-password"}}},
	}
}

// holdWithFinalizer puts testFinalizer on the proxy's object of kind (its ReplicaSet: the one its Deployment
// made), and takes it off when the test ends, before its namespace is deleted.
func holdWithFinalizer(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, kind string, spec backend.Spec) {
	t.Helper()
	patch := []byte(`{"metadata":{"finalizers":["` + testFinalizer + `"]}}`)
	unpatch := []byte(`{"metadata":{"finalizers":null}}`)
	name := spec.Name
	if kind == "replicasets" {
		l, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: backend.LabelUID + "=" + spec.UID})
		if err != nil || len(l.Items) == 0 {
			t.Fatalf("the proxy's ReplicaSet: %v (%d found)", err, len(l.Items))
		}
		name = l.Items[0].Name
	}
	do, ok := finalizerPatchers(cs, ns)[kind]
	if !ok {
		t.Fatalf("no finalizer for %s", kind)
	}
	if err := do(ctx, name, patch); err != nil {
		t.Fatalf("putting a finalizer on %s %s/%s: %v", kind, ns, name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := do(ctx, name, unpatch); err != nil {
			t.Errorf("taking the finalizer off %s %s/%s: %v", kind, ns, name, err)
		}
	})
}

// finalizerPatchers merge-patch an object of each kind a removal holds with a finalizer (removal.finalizer),
// by name in ns.
func finalizerPatchers(cs kubernetes.Interface, ns string) map[string]func(ctx context.Context, name string, p []byte) error {
	return map[string]func(ctx context.Context, name string, p []byte) error{
		"configmaps": func(ctx context.Context, name string, p []byte) error {
			_, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, p, metav1.PatchOptions{})
			return err
		},
		"networkpolicies": func(ctx context.Context, name string, p []byte) error {
			_, err := cs.NetworkingV1().NetworkPolicies(ns).Patch(ctx, name, types.MergePatchType, p, metav1.PatchOptions{})
			return err
		},
		"replicasets": func(ctx context.Context, name string, p []byte) error {
			_, err := cs.AppsV1().ReplicaSets(ns).Patch(ctx, name, types.MergePatchType, p, metav1.PatchOptions{})
			return err
		},
		"poddisruptionbudgets": func(ctx context.Context, name string, p []byte) error {
			_, err := cs.PolicyV1().PodDisruptionBudgets(ns).Patch(ctx, name, types.MergePatchType, p, metav1.PatchOptions{})
			return err
		},
	}
}

// TestEveryHeldKindHasALiveFinalizer: each kind a removal holds with a finalizer can be held on the cluster too.
// TestPermissionsLive draws its removals at random, so a kind only the fake could hold failed one cold run in
// several, when the draw took the PodDisruptionBudget's watch.
func TestEveryHeldKindHasALiveFinalizer(t *testing.T) {
	t.Parallel()
	patchers := finalizerPatchers(nil, "")
	for verb, r := range removals {
		if _, ok := patchers[r.finalizer]; r.finalizer != "" && !ok {
			t.Errorf("%s: TestPermissionsLive cannot hold %s with a finalizer", verb, r.finalizer)
		}
	}
}

// requireDefaultGrants checks that the cluster grants every authenticated user what the backend asks beyond
// the documents (grantedByDefault): SelfSubjectAccessReviews through system:basic-user, /version and
// /readyz through system:public-info-viewer. A cluster that revoked them needs them in a ClusterRole.
func requireDefaultGrants(t *testing.T, cs kubernetes.Interface) {
	ctx := context.Background()
	for role, want := range map[string]func(rbacv1.PolicyRule) bool{
		"system:basic-user": func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.APIGroups, "authorization.k8s.io") && slices.Contains(r.Resources, "selfsubjectaccessreviews") && slices.Contains(r.Verbs, "create")
		},
		"system:public-info-viewer": func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.NonResourceURLs, "/version") && slices.Contains(r.NonResourceURLs, "/readyz") && slices.Contains(r.Verbs, "get")
		},
	} {
		cr, err := cs.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("ClusterRole %s: %v", role, err)
		}
		if !slices.ContainsFunc(cr.Rules, want) {
			t.Errorf("ClusterRole %s does not grant what the backend relies on: %+v", role, cr.Rules)
		}
		crb, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, role, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("ClusterRoleBinding %s: %v", role, err)
		}
		if !slices.ContainsFunc(crb.Subjects, func(s rbacv1.Subject) bool { return s.Kind == rbacv1.GroupKind && s.Name == "system:authenticated" }) {
			t.Errorf("ClusterRoleBinding %s does not bind system:authenticated: %+v", role, crb.Subjects)
		}
	}
}

// requireNodesDocument: with the documented Role alone, Get reads no Node and says nothing of it (the proxy
// works, its egress address is unknown); with NodesDocument bound too, it reads the pods' Node. The test
// cluster's node has a private address only, so the address stays empty either way: what tells them apart is
// whether the backend learnt the node's addresses.
func requireNodesDocument(t *testing.T, cluster *k8stest.Cluster, admin *Backend, docs k8stest.Documents) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := cluster.Namespace(t, "perm-nodes")
	spec := permSpec(ns, false)
	id := backend.ProviderID{Backend: Kind, Target: "test", Scope: ns, Name: spec.Name}
	if _, err := admin.Create(ctx, spec); err != nil {
		t.Fatalf("making the proxy as the cluster's admin: %v", err)
	}
	for _, withNodes := range []bool{false, true} {
		name := "role-only"
		if withNodes {
			name = "role-and-nodes"
		}
		creds := cluster.RoleCredentials(t, ns, name, docs.Role)
		if withNodes {
			cluster.BindNodes(t, ns, name)
			cluster.WaitAllowed(t, creds, "", k8stest.Grants(t, docs.ClusterRole.Rules)...)
		}
		b, err := New(Config{Clusters: map[string]ClusterConfig{"test": {Host: creds.Host, Token: creds.Token, ClusterCACertificate: creds.CA}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Get(ctx, id); err != nil {
			t.Fatalf("Get as %s: %v", name, err)
		}
		c, err := b.client("test")
		if err != nil {
			t.Fatal(err)
		}
		c.nodes.mu.Lock()
		read, forbidden := len(c.nodes.addresses), c.nodes.forbidden
		c.nodes.mu.Unlock()
		if withNodes && (read == 0 || forbidden) {
			t.Errorf("with %s bound, Get read %d nodes (forbidden: %v), want the pod's node", NodesDocument, read, forbidden)
		}
		if !withNodes && (read != 0 || !forbidden) {
			t.Errorf("with the Role alone, Get read %d nodes (forbidden: %v): Nodes should have been refused", read, forbidden)
		}
	}
}
