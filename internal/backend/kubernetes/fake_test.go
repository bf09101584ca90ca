package kubernetes

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

const testNS = "proxies"

// newFake returns a backend with one cluster, "test", served by client-go's fake clientset holding objs.
func newFake(t testing.TB, objs ...runtime.Object) (*Backend, *fake.Clientset) {
	t.Helper()
	return newFakeCluster(t, ClusterConfig{Namespaces: []string{testNS}}, objs...)
}

// newFakeCluster is newFake with the cluster's settings given.
func newFakeCluster(t testing.TB, cluster ClusterConfig, objs ...runtime.Object) (*Backend, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset(objs...)
	b, err := newBackend(Config{Clusters: map[string]ClusterConfig{"test": cluster}},
		func(string, ClusterConfig) (*client, error) {
			return &client{cs: cs, readyz: func(context.Context) error { return nil }}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return b, cs
}

func testSpec(name string) backend.Spec {
	return backend.Spec{
		Name: name, UID: "uid-" + name, Owner: "owner-1", Labels: map[string]string{"team": "net"},
		Placement: backend.Placement{Backend: Kind, Target: "test", Scope: testNS},
		Proxy: proxyconf.Settings{
			Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"example.com"},
		},
	}
}

// testID is the id of the proxy the tests make, named p1.
func testID() backend.ProviderID {
	return backend.ProviderID{Backend: Kind, Target: "test", Scope: testNS, Name: "p1"}
}

// controller plays the Deployment controller for the fake clientset: every Deployment written gets the
// status a healthy rollout ends with. mark changes that status first, for tests of failures. It stops with ctx.
func controller(ctx context.Context, t *testing.T, cs *fake.Clientset, mark func(*appsv1.Deployment)) {
	t.Helper()
	w, err := cs.AppsV1().Deployments(testNS).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				d, isD := ev.Object.(*appsv1.Deployment)
				if !isD || ev.Type == "DELETED" || d.Status.ObservedGeneration == d.Generation && d.Status.ObservedGeneration != 0 {
					continue
				}
				d = d.DeepCopy()
				if d.Generation == 0 {
					d.Generation = 1
				}
				n := *d.Spec.Replicas
				d.Status = appsv1.DeploymentStatus{
					ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
					Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}},
				}
				if mark != nil {
					mark(d)
				}
				if _, err := cs.AppsV1().Deployments(testNS).UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
					t.Errorf("controller: %v", err)
				}
			}
		}
	}()
}

// deleteWaitingOn starts Delete of the test proxy and returns once Delete has opened a watch on resource,
// failing the test if Delete returns first: it is then waiting on what the test still holds back (what, for
// the failure's message). The channel gives Delete's result.
func deleteWaitingOn(ctx context.Context, t *testing.T, b *Backend, cs *fake.Clientset, resource, what string) <-chan error {
	t.Helper()
	watching := make(chan struct{}, 1)
	cs.PrependWatchReactor(resource, func(k8stesting.Action) (bool, watch.Interface, error) {
		select {
		case watching <- struct{}{}:
		default:
		}
		return false, nil, nil
	})
	done := make(chan error, 1)
	go func() { done <- b.Delete(ctx, testID()) }()
	select {
	case err := <-done:
		t.Fatalf("Delete returned (%v) while %s", err, what)
	case <-watching:
	}
	return done
}
