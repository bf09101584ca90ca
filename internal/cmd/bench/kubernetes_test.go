package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// The objects bench-k8s.sh's generic configuration reads: one proxy's, under the keys it names.
func TestObjects(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"objects", "-namespace", "ns", "-image", "example/squid:1"}, nil, &out); err != nil {
		t.Fatal(err)
	}
	var o struct {
		ConfigMap  corev1.ConfigMap  `json:"configMap"`
		Deployment appsv1.Deployment `json:"deployment"`
		Service    corev1.Service    `json:"service"`
	}
	if err := json.Unmarshal(out.Bytes(), &o); err != nil {
		t.Fatal(err)
	}
	if o.Deployment.Name != "raw-000" || o.Deployment.Namespace != "ns" || o.ConfigMap.Name != "raw-000" || o.Service.Name != "raw-000" {
		t.Errorf("names %s/%s, %s, %s: want ns/raw-000 for each", o.Deployment.Namespace, o.Deployment.Name, o.ConfigMap.Name, o.Service.Name)
	}
	pod := o.Deployment.Spec.Template.Spec
	if len(pod.Containers) != 1 || pod.Containers[0].Image != "example/squid:1" || pod.Containers[0].ReadinessProbe == nil {
		t.Errorf("containers %+v: want one, of the image, with a readiness probe", pod.Containers)
	}
	if len(o.ConfigMap.Data) == 0 || len(o.Service.Spec.Ports) == 0 || o.Service.Spec.Ports[0].Port != 3128 {
		t.Errorf("configMap data %d entries, service ports %+v: want squid's configuration and port 3128", len(o.ConfigMap.Data), o.Service.Spec.Ports)
	}
}

func TestNamespace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cs := fake.NewClientset()
	if err := namespace(ctx, cs, "create", "egress-bench-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "egress-bench-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("after create: %v", err)
	}
	if err := namespace(ctx, cs, "delete", "egress-bench-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "egress-bench-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after delete: %v, want not found", err)
	}
}

// The raw create returns once every Deployment is ready by the backend's rule, the destroy once the objects
// are gone and the pods terminating; the fake cluster's controller is the loop below.
func TestRawCreateDestroy(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ns, n = "bench", 3
	cs := fake.NewClientset()
	done := make(chan error, 1)
	go func() { done <- raw(ctx, cs, "create", ns, "example/squid:1", n, 2) }()
	// Until the create returns, every Deployment there is reports its rollout done (again: the create's watch
	// may start after an update).
	for waiting := true; waiting; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			waiting = false
		case <-time.After(10 * time.Millisecond):
			rollOut(ctx, t, cs, ns)
		}
	}
	for _, kind := range []string{"configmaps", "deployments", "services"} {
		if got := count(ctx, t, cs, ns, kind); got != n {
			t.Errorf("after create: %d %s, want %d", got, kind, n)
		}
	}

	// A pod of raw-000 that still serves: the destroy waits for it.
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, "raw-000", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "raw-000-x", Namespace: ns, Labels: d.Spec.Selector.MatchLabels}}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	go func() { done <- raw(ctx, cs, "destroy", ns, "example/squid:1", n, 2) }()
	for waiting, podGone := true, false; waiting; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if !podGone {
				t.Fatal("the destroy returned while raw-000's pod still served")
			}
			waiting = false
		case <-time.After(10 * time.Millisecond):
			if _, err := cs.AppsV1().Deployments(ns).Get(ctx, "raw-000", metav1.GetOptions{}); apierrors.IsNotFound(err) && !podGone {
				if err := cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				podGone = true
			}
		}
	}
	for _, kind := range []string{"configmaps", "deployments", "services"} {
		if got := count(ctx, t, cs, ns, kind); got != 0 {
			t.Errorf("after destroy: %d %s, want none", got, kind)
		}
	}
}

// rollOut sets every Deployment's status to a finished rollout of its replicas.
func rollOut(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	list, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range list.Items {
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: want, UpdatedReplicas: want, ReadyReplicas: want, AvailableReplicas: want,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}},
		}
		if _, err := cs.AppsV1().Deployments(ns).UpdateStatus(ctx, &d, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func count(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, kind string) int {
	t.Helper()
	var n int
	var err error
	switch kind {
	case "configmaps":
		var l *corev1.ConfigMapList
		l, err = cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			n = len(l.Items)
		}
	case "deployments":
		var l *appsv1.DeploymentList
		l, err = cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			n = len(l.Items)
		}
	case "services":
		var l *corev1.ServiceList
		l, err = cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			n = len(l.Items)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}
