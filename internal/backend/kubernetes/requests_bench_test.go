package kubernetes

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// benchProxies is how many proxies each operation of BenchmarkAPIRequests is measured over.
const benchProxies = 200

// BenchmarkAPIRequests counts the API requests each operation of the contract sends, over benchProxies
// proxies on client-go's fake clientset (which records every request: the count is the real client's, the
// timing is not a cluster's). Reported per proxy for Create, Get and Delete, per call for ListByTag; run with
// -v to see which requests they are.
//
//	go test -run '^$' -bench APIRequests -benchtime 1x -v ./internal/backend/kubernetes/
func BenchmarkAPIRequests(b *testing.B) {
	for b.Loop() {
		be, cs := newBenchFake(b)
		ctx := context.Background()
		ids := make([]backend.ProviderID, benchProxies)

		measure(b, cs, "Create", benchProxies, func() {
			for i := range ids {
				inst, err := be.Create(ctx, testSpec(fmt.Sprintf("p%03d", i)))
				if err != nil {
					b.Fatal(err)
				}
				ids[i] = inst.ID
			}
		})
		// A refresh is a new provider process: it starts without the node addresses Create read.
		be.clients = map[string]*client{}
		measure(b, cs, "Get", benchProxies, func() {
			for _, id := range ids {
				if _, err := be.Get(ctx, id); err != nil {
					b.Fatal(err)
				}
			}
		})
		measure(b, cs, "ListByTag", 1, func() {
			got, err := be.ListByTag(ctx, backend.Selector{Owner: "owner-1"})
			if err != nil || len(got) != benchProxies {
				b.Fatalf("ListByTag: %d instances, %v; want %d", len(got), err, benchProxies)
			}
		})
		measure(b, cs, "Delete", benchProxies, func() {
			for _, id := range ids {
				if err := be.Delete(ctx, id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchNode is the node every proxy's pod runs on, as on a small cluster: its egress address is read once.
const benchNode = "bench-node"

// newBenchFake is newFake with Deployments that are Available as soon as they are written, each with a pod
// on benchNode, so that the requests counted are the backend's alone (no controller goroutine writing
// statuses alongside) and Get reads the pods' node as it does on a cluster.
func newBenchFake(b *testing.B) (*Backend, interface {
	Actions() []k8stesting.Action
	ClearActions()
}) {
	b.Helper()
	be, cs := newFake(b, node(benchNode, []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "203.0.113.5"}}))
	available := func(a k8stesting.Action) (bool, runtime.Object, error) {
		written, ok := a.(interface{ GetObject() runtime.Object }) // creates and updates
		if !ok {
			return false, nil, nil
		}
		if d, ok := written.GetObject().(*appsv1.Deployment); ok {
			n := *d.Spec.Replicas
			d.Status = appsv1.DeploymentStatus{
				ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
				Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}},
			}
		}
		return false, nil, nil // the tracker stores the object as changed here
	}
	// Straight into the tracker: the pod is the ReplicaSet controller's doing, not a request of the backend.
	schedule := func(a k8stesting.Action) (bool, runtime.Object, error) {
		if d, ok := a.(k8stesting.CreateAction).GetObject().(*appsv1.Deployment); ok {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: d.Name + "-0", Namespace: d.Namespace, Labels: selectorLabelsOf(d)},
				Spec:       corev1.PodSpec{NodeName: benchNode},
				Status:     corev1.PodStatus{Phase: corev1.PodRunning},
			}
			if err := cs.Tracker().Add(pod); err != nil {
				return true, nil, err
			}
		}
		return false, nil, nil
	}
	// The ReplicaSet controller's part of a delete: a Deployment scaled to zero loses its pod.
	scaleDown := func(a k8stesting.Action) (bool, runtime.Object, error) {
		d, ok := a.(k8stesting.UpdateAction).GetObject().(*appsv1.Deployment)
		if !ok || d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
			return false, nil, nil
		}
		if err := cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), d.Namespace, d.Name+"-0"); err != nil && !apierrors.IsNotFound(err) {
			return true, nil, err
		}
		return false, nil, nil
	}
	cs.PrependReactor("update", "deployments", scaleDown)
	cs.PrependReactor("create", "deployments", schedule)
	cs.PrependReactor("create", "deployments", available)
	cs.PrependReactor("update", "deployments", available)
	return be, cs
}

// measure runs op and reports the requests it sent, divided by per.
func measure(b *testing.B, cs interface {
	Actions() []k8stesting.Action
	ClearActions()
}, name string, per int, op func()) {
	b.Helper()
	cs.ClearActions()
	op()
	actions := cs.Actions()
	kinds := map[string]int{}
	for _, a := range actions {
		kinds[a.GetVerb()+" "+a.GetResource().Resource]++
	}
	lines := make([]string, 0, len(kinds))
	for k, n := range kinds {
		lines = append(lines, fmt.Sprintf("%s %.2f", k, float64(n)/float64(per)))
	}
	sort.Strings(lines)
	unit := "requests/proxy"
	if per == 1 {
		unit = fmt.Sprintf("requests/list-of-%d", benchProxies)
	}
	b.ReportMetric(float64(len(actions))/float64(per), strings.ToLower(name)+"-"+unit)
	b.Logf("%s: %.2f %s (%s)", name, float64(len(actions))/float64(per), unit, strings.Join(lines, ", "))
}
