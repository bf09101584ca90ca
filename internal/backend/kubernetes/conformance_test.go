package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/backendtest"
)

// TestConformance runs the contract's suite against client-go's fake clientset, with controller playing the
// Deployment controller: cluster "test" serves the proxies, cluster "down" answers until FailScope makes
// RBAC forbid its lists.
func TestConformance(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, backendtest.Harness{
		New:    newConformanceWorld,
		IDForm: IDForm,
		Spec: func(name string) backend.Spec {
			spec := testSpec(name)
			spec.Placement.Options = &Options{}
			return spec
		},
		// client-go's fake clientset ignores ctx (its reactors never see it), and the backend checks ctx only in
		// its own waits, so on the fake a call with a cancelled context runs its requests to the end; against
		// an API server client-go refuses each request. Create and Reconfigure return ctx's error only when
		// their wait looks before the controller finished the rollout. The waits are checked by
		// RuleCreateNotReadyReturnsID, which passes.

	})
}

func newConformanceWorld(t *testing.T) backendtest.World {
	cs, down := fake.NewClientset(), fake.NewClientset()
	b, err := newBackend(Config{Clusters: map[string]ClusterConfig{"test": {Namespaces: []string{testNS}}, "down": {}}},
		func(name string, _ ClusterConfig) (*client, error) {
			c := cs
			if name == "down" {
				c = down
			}
			return &client{cs: c, readyz: func(context.Context) error { return nil }}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	// The API server stamps every object it makes with its creation time; the fake clientset does not, and
	// CreatedAt is read from it.
	cs.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := created(cs, a)
		return true, obj, err
	})
	var neverReady, unready atomic.Bool
	controller(t.Context(), t, cs, func(d *appsv1.Deployment) {
		if neverReady.Load() {
			unready.Store(true)
			d.Status.ReadyReplicas, d.Status.AvailableReplicas = 0, 0
			d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse}}
		}
	})
	var forbid atomic.Bool
	down.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if forbid.Load() {
			return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "", errors.New("RBAC: the credentials may not list it"))
		}
		return false, nil, nil
	})
	return backendtest.World{
		Backend: b,
		// The API server makes the Deployment and the connection drops before its answer comes back.
		LoseNextAnswer: func(t *testing.T) {
			var lost atomic.Int32
			cs.PrependReactor("create", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if !lost.CompareAndSwap(0, 1) {
					return false, nil, nil
				}
				if _, err := created(cs, a); err != nil {
					return true, nil, err
				}
				return true, nil, io.ErrUnexpectedEOF
			})
			t.Cleanup(func() {
				if lost.Load() == 0 {
					t.Error("no Deployment create lost its answer")
				}
			})
		},
		FailScope: func(*testing.T) { forbid.Store(true) },
		// A Deployment made by hand, without the provider's labels.
		Foreign: func(t *testing.T, name string) {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1))}}
			if _, err := cs.AppsV1().Deployments(testNS).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		},
		RemoveForeign: func(t *testing.T, name string) {
			if err := cs.AppsV1().Deployments(testNS).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		},
		// The rollout never makes a pod ready.
		NeverReady: func(t *testing.T) {
			neverReady.Store(true)
			t.Cleanup(func() {
				if !unready.Load() {
					t.Error("the controller never held a rollout back")
				}
			})
		},
	}
}

// created makes the object of a create action in the fake as the API server would: stamped with its creation
// time.
func created(cs *fake.Clientset, a k8stesting.Action) (runtime.Object, error) {
	create, ok := a.(k8stesting.CreateAction)
	if !ok {
		return nil, fmt.Errorf("%s %s is no create", a.GetVerb(), a.GetResource().Resource)
	}
	obj := create.GetObject().DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	m.SetCreationTimestamp(metav1.Now())
	if err := cs.Tracker().Create(a.GetResource(), obj, a.GetNamespace()); err != nil {
		return nil, err
	}
	return obj, nil
}
