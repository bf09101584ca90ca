package kubernetes

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/backendtest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil/k8stest"
)

// TestConformanceLive runs the contract's suite against the cluster of scripts/k8s-env.sh, as TestConformance
// runs it against the fake clientset. It runs only when EGRESS_K8S_KUBECONFIG names that cluster's admin
// kubeconfig, as the provider's acceptance tests do (make test-provider sets it); when it is set the cluster
// must answer.
//
// Cluster "test" is the API server behind a relay of the test's own (apiRelay), which passes everything on as
// the ServiceAccount of the permission documents (k8stest.PermissionsDir), bound to their Role in the world's
// namespace and to nothing else, and can drop one answer (LoseNextAnswer). Cluster "down" is the same API
// server reached through another relay as the same ServiceAccount, whose Role there is in one empty namespace:
// ListByTag lists that namespace, and FailScope closes the relay's port. The suite's proxies are made, read,
// changed and deleted with exactly what the documents grant.
//
// Each world gets a namespace of its own, but ListByTag reads the suite's owners across the whole cluster, so
// the worlds run one at a time, each deleting its proxies before the next starts.
func TestConformanceLive(t *testing.T) {
	kubeconfig := os.Getenv("EGRESS_K8S_KUBECONFIG")
	if kubeconfig == "" {
		t.Skip("EGRESS_K8S_KUBECONFIG is not set: run `scripts/k8s-env.sh start` and set it to the kubeconfig it writes " +
			"(/var/tmp/egress-k8s/kubeconfig), or `make test-provider`")
	}
	env := newLiveConformanceEnv(t, kubeconfig)
	backendtest.Run(t, backendtest.Harness{New: env.newWorld, Spec: env.spec, IDForm: IDForm})
}

// liveConformanceEnv is what the worlds of one run share.
type liveConformanceEnv struct {
	cluster *k8stest.Cluster
	admin   *rest.Config
	cs      kubernetes.Interface
	// direct is a backend straight on the cluster, which sweeps each world's proxies.
	direct *Backend
	// downUser holds the documented Role in downNamespace.
	downUser      *rest.Config
	downNamespace string

	oneWorld sync.Mutex
	// namespace is the namespace of the world that holds oneWorld, where spec places proxies: the suite's Spec
	// knows no world, and only one world runs at a time.
	namespace string
}

func newLiveConformanceEnv(t *testing.T, kubeconfig string) *liveConformanceEnv {
	t.Helper()
	e := &liveConformanceEnv{cluster: k8stest.Connect(t, kubeconfig)}
	var err error
	if e.admin, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		t.Fatal(err)
	}
	// The test's own requests, such as the hand-made Deployment's, need no Pod Security warnings on stderr.
	quiet := rest.CopyConfig(e.admin)
	quiet.WarningHandler = rest.NoWarnings{}
	if e.cs, err = kubernetes.NewForConfig(quiet); err != nil {
		t.Fatal(err)
	}
	if e.direct, err = New(Config{Clusters: map[string]ClusterConfig{"test": {ConfigPath: kubeconfig}}}); err != nil {
		t.Fatal(err)
	}
	e.downNamespace = e.cluster.Namespace(t, "conformance-down")
	e.downUser = e.cluster.DocumentedCredentials(t, e.downNamespace).RESTConfig()
	e.waitUntilDownReads(t)
	return e
}

// waitUntilDownReads waits until the API server's authorizer has the down user's RoleBinding: until then its
// namespace's list would be refused, and the first world would see a failed scope it did not ask for.
func (e *liveConformanceEnv) waitUntilDownReads(t *testing.T) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.downUser)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err = backend.Poll(ctx, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := cs.AppsV1().Deployments(e.downNamespace).List(ctx, metav1.ListOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("the down user's RoleBinding in %s never took effect: %v", e.downNamespace, err)
	}
}

func (e *liveConformanceEnv) spec(name string) backend.Spec {
	return backend.Spec{
		Name:      name,
		Placement: backend.Placement{Backend: Kind, Target: "test", Scope: e.namespace, Options: &Options{}},
		Proxy:     proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.244.0.0/16"}, AllowedDestinations: []string{"example.com"}},
	}
}

func (e *liveConformanceEnv) newWorld(t *testing.T) backendtest.World {
	e.oneWorld.Lock()
	t.Cleanup(e.oneWorld.Unlock)
	ns := e.cluster.Namespace(t, "conformance")
	e.namespace = ns
	documented := e.cluster.DocumentedCredentials(t, ns).RESTConfig()
	main, down := startAPIRelay(t, documented), startAPIRelay(t, e.downUser)
	mainCluster, downCluster := main.cluster(), down.cluster()
	// The Role grants nothing across the cluster: ListByTag lists the namespace.
	mainCluster.Namespaces = []string{ns}
	downCluster.Namespaces = []string{e.downNamespace}
	b, err := New(Config{Clusters: map[string]ClusterConfig{"test": mainCluster, "down": downCluster}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.sweep(t, ns) })
	return backendtest.World{
		Backend: b,
		// The API server makes the Deployment and the connection drops before its answer comes back.
		LoseNextAnswer: func(t *testing.T) {
			main.loseNext(t, func(r *http.Request) bool {
				return r.Method == http.MethodPost && r.URL.Path == "/apis/apps/v1/namespaces/"+ns+"/deployments"
			})
		},
		// The cluster's address stops answering: the relay's port is closed.
		FailScope: func(*testing.T) { down.close() },
		// A Deployment made by hand, without the provider's labels (and no pods).
		Foreign: func(t *testing.T, name string) {
			app := map[string]string{"app": name}
			d := &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To(int32(0)),
					Selector: &metav1.LabelSelector{MatchLabels: app},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: app},
						Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: DefaultImage}}},
					},
				},
			}
			if _, err := e.cs.AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating the foreign Deployment %s/%s: %v", ns, name, err)
			}
		},
		RemoveForeign: func(t *testing.T, name string) {
			if err := e.cs.AppsV1().Deployments(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("deleting the foreign Deployment %s/%s: %v", ns, name, err)
			}
		},
		// Every pod of the namespace asks for more CPU than the node has, so it is never scheduled: a
		// rollout that waits, with no pod in a state that tells it will never end.
		NeverReady: func(t *testing.T) {
			lr := &corev1.LimitRange{
				ObjectMeta: metav1.ObjectMeta{Name: "conformance-never-ready"},
				Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
					Type:           corev1.LimitTypeContainer,
					DefaultRequest: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000")},
				}}},
			}
			if _, err := e.cs.CoreV1().LimitRanges(ns).Create(t.Context(), lr, metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating LimitRange %s/%s: %v", ns, lr.Name, err)
			}
			t.Cleanup(func() { e.requireUnschedulablePod(t, ns) })
		},
	}
}

// requireUnschedulablePod fails the test unless the scheduler finds a pod of ns unschedulable: the rule was
// checked against a rollout held back for that reason, and no other.
func (e *liveConformanceEnv) requireUnschedulablePod(t *testing.T, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := backend.Poll(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no pod of %s was found unschedulable: %v", ns, err)
	}
}

// sweep deletes, with the backend's own Delete, every proxy in ns, and fails the test if anything labelled as
// the provider's is left there: the next world lists the same owners.
func (e *liveConformanceEnv) sweep(t *testing.T, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mine := metav1.ListOptions{LabelSelector: backend.LabelManagedBy + "=" + backend.ManagedByValue}
	ds, err := e.cs.AppsV1().Deployments(ns).List(ctx, mine)
	if err != nil {
		t.Errorf("listing the proxies of %s to sweep: %v", ns, err)
		return
	}
	for _, d := range ds.Items {
		id := backend.ProviderID{Backend: Kind, Target: "test", Scope: ns, Name: d.Name}
		if err := e.direct.Delete(ctx, id); err != nil {
			t.Errorf("sweeping %s: %v", id, err)
		}
	}
	left, err := e.cluster.Labelled(ctx, backend.LabelManagedBy, backend.ManagedByValue)
	if err != nil {
		t.Errorf("listing what the sweep left: %v", err)
	}
	var here []string
	for _, l := range left {
		if strings.Contains(l, " "+ns+"/") {
			here = append(here, l)
		}
	}
	if len(here) > 0 {
		t.Errorf("after the sweep, namespace %s still holds %v", ns, here)
	}
}

// apiRelay is the API server behind an HTTPS endpoint of the test's own, reached as one user: the backend
// talks to it without credentials. It passes every request and answer on, streams included, except the
// answer to the one request loseNext arms for: the API server carries that request out and the relay drops
// the connection instead of answering. close closes its port.
type apiRelay struct {
	srv *httptest.Server

	mu   sync.Mutex
	lose func(*http.Request) bool
	// lost are the statuses of the answers the relay dropped.
	lost []int
}

func startAPIRelay(t *testing.T, user *rest.Config) *apiRelay {
	t.Helper()
	upstream, err := url.Parse(user.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(user)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(upstream) },
		Transport: transport,
		// Watches are streams: each event goes on as it comes.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, "relay: "+err.Error(), http.StatusBadGateway)
		},
	}
	r := &apiRelay{}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !r.armedFor(req) {
			proxy.ServeHTTP(w, req)
			return
		}
		answer := httptest.NewRecorder()
		proxy.ServeHTTP(answer, req)
		r.mu.Lock()
		r.lost = append(r.lost, answer.Code)
		r.mu.Unlock()
		panic(http.ErrAbortHandler) // the connection drops without an answer
	}))
	r.srv.StartTLS()
	t.Cleanup(r.close)
	return r
}

// armedFor reports, once, whether req is the request whose answer is to be lost.
func (r *apiRelay) armedFor(req *http.Request) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lose == nil || !r.lose(req) {
		return false
	}
	r.lose = nil
	return true
}

// loseNext arms the relay for the next request match accepts, and checks when the test ends that the API
// server carried one out whose answer was lost.
func (r *apiRelay) loseNext(t *testing.T, match func(*http.Request) bool) {
	r.mu.Lock()
	r.lose = match
	r.mu.Unlock()
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.lost) != 1 || r.lost[0] != http.StatusCreated {
			t.Errorf("the relay lost the answers %v, want one, to a create the API server carried out (201)", r.lost)
		}
	})
}

// cluster is how the backend reaches the API server through the relay.
func (r *apiRelay) cluster() ClusterConfig {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw})
	return ClusterConfig{Host: r.srv.URL, ClusterCACertificate: string(ca)}
}

// close cuts the open connections, watches included, and closes the port. It may be called again.
func (r *apiRelay) close() {
	r.srv.CloseClientConnections()
	r.srv.Close()
}
