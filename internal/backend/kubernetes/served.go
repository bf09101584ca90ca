package kubernetes

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// waitServed waits until the Service routes only to pods that run the configuration with checksum sum: a
// rolled-out Deployment says its new pods are ready, but the EndpointSlice controller moves the Service onto
// them a moment later, and until then clients still reach old pods with the old rules. Without a Service,
// or without a current pod (nothing to route to), there is nothing to wait for.
func waitServed(ctx context.Context, c *client, id backend.ProviderID, sum string) error {
	object := objectName("Service", id)
	if _, err := c.cs.CoreV1().Services(id.Scope).Get(ctx, id.Name, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return classify(object, err)
	}
	pods, err := c.cs.CoreV1().Pods(id.Scope).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{backend.LabelName: id.Name}).String(),
	})
	if err != nil {
		return classify(objectName("Deployment", id), err)
	}
	current := currentPods(pods.Items, sum)
	if len(current) == 0 {
		return nil
	}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: id.Name}).String()
	slices := map[string]*discoveryv1.EndpointSlice{}
	return follow(ctx, stream{
		object: object,
		list: func(ctx context.Context) (string, bool, error) {
			l, err := c.cs.DiscoveryV1().EndpointSlices(id.Scope).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				return "", false, err
			}
			clear(slices)
			for i := range l.Items {
				slices[l.Items[i].Name] = &l.Items[i]
			}
			return l.ResourceVersion, routesOnlyTo(slices, current), nil
		},
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return c.cs.DiscoveryV1().EndpointSlices(id.Scope).Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true})
		},
		check: func(t watch.EventType, obj runtime.Object) (bool, error) {
			s, ok := obj.(*discoveryv1.EndpointSlice)
			if !ok {
				return false, nil
			}
			if t == watch.Deleted {
				delete(slices, s.Name)
			} else {
				slices[s.Name] = s
			}
			return routesOnlyTo(slices, current), nil
		},
	})
}

// currentPods names the pods that run the configuration with checksum sum and are not on their way out.
func currentPods(pods []corev1.Pod, sum string) map[string]bool {
	current := map[string]bool{}
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Annotations[annotationChecksum] == sum {
			current[p.Name] = true
		}
	}
	return current
}

// routesOnlyTo says whether the slices hold at least one ready endpoint and every ready endpoint is one of
// the current pods. Endpoints that are not ready (old pods terminating, new ones starting) receive no new
// connections while a ready one exists.
func routesOnlyTo(slices map[string]*discoveryv1.EndpointSlice, current map[string]bool) bool {
	ready := 0
	for _, s := range slices {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || !*e.Conditions.Ready {
				continue
			}
			if e.TargetRef == nil || e.TargetRef.Kind != "Pod" || !current[e.TargetRef.Name] {
				return false
			}
			ready++
		}
	}
	return ready > 0
}
