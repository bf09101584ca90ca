package k8stest

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// AssignLoadBalancers plays a cloud's load balancer controller in ns until the test ends: every LoadBalancer
// Service there that has no ingress address gets address, written into its status as a controller writes it
// once the balancer exists. The test cluster runs no such controller (it has no cloud). kube-proxy then
// forwards connections to address inside the cluster's network namespace, as a balancer would deliver them.
func (c *Cluster) AssignLoadBalancers(t *testing.T, ns, address string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// The goroutine ends before the test does, so it never reports into a finished test.
	t.Cleanup(func() {
		cancel()
		<-done
	})
	services := c.cs.CoreV1().Services(ns)
	assign := func(s *corev1.Service) {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer || len(s.Status.LoadBalancer.Ingress) > 0 {
			return
		}
		s = s.DeepCopy()
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: address}}
		// A conflict means a newer version exists, which the watch delivers next and gets its turn.
		if _, err := services.UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
			t.Logf("load balancer stand-in: status of Service %s/%s: %v", ns, s.Name, err)
		}
	}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			l, err := services.List(ctx, metav1.ListOptions{})
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("load balancer stand-in: listing Services in %s: %v", ns, err)
				}
				return
			}
			for i := range l.Items {
				assign(&l.Items[i])
			}
			w, err := services.Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("load balancer stand-in: watching Services in %s: %v", ns, err)
				}
				return
			}
			for ev := range w.ResultChan() {
				if s, ok := ev.Object.(*corev1.Service); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
					assign(s)
				}
			}
			w.Stop() // the watch ended (a timeout, a compaction): list again from now
		}
	}()
}
