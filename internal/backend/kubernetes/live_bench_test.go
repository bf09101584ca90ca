package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// BenchmarkRawREST is the baseline scripts/bench-k8s.sh sets egress_proxy and the generic Kubernetes provider
// against: the same objects as a proxy without a NetworkPolicy (the ConfigMap with the rendered squid.conf,
// the Deployment with its readiness probe, a ClusterIP Service), made and removed with plain typed REST
// calls, no client-side rate limit, EGRESS_BENCH_PARALLEL (10, Terraform's default) proxies at a time. Create
// returns once each Deployment is Available; destroy once each proxy's objects are deleted and its pods are
// terminating (what egress_proxy's destroy waits for).
// It runs only when EGRESS_BENCH_KUBECONFIG names a cluster:
//
//	EGRESS_BENCH_KUBECONFIG=... EGRESS_BENCH_NAMESPACE=ns EGRESS_BENCH_PROXIES=30 EGRESS_BENCH_OP=create|destroy \
//	  go test -run '^$' -bench RawREST -benchtime 1x ./internal/backend/kubernetes/
//
// With EGRESS_BENCH_OBJECTS_OUT it also writes one proxy's objects as JSON, which the generic provider's
// configuration reads so that all three make the same pods.
func BenchmarkRawREST(b *testing.B) {
	kubeconfig := os.Getenv("EGRESS_BENCH_KUBECONFIG")
	if kubeconfig == "" {
		b.Skip("EGRESS_BENCH_KUBECONFIG names no cluster: scripts/bench-k8s.sh runs this benchmark")
	}
	ns, op, image := os.Getenv("EGRESS_BENCH_NAMESPACE"), os.Getenv("EGRESS_BENCH_OP"), os.Getenv("EGRESS_BENCH_IMAGE")
	n, err := strconv.Atoi(os.Getenv("EGRESS_BENCH_PROXIES"))
	if err != nil || ns == "" || (image == "" && n > 0) {
		b.Fatal("EGRESS_BENCH_NAMESPACE, EGRESS_BENCH_IMAGE and EGRESS_BENCH_PROXIES (a number) are needed")
	}
	parallel := 10
	if p, err := strconv.Atoi(os.Getenv("EGRESS_BENCH_PARALLEL")); err == nil && p > 0 {
		parallel = p
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	rc.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	proxies := make([]objects, n)
	for i := range proxies {
		if proxies[i], err = benchObjects(fmt.Sprintf("raw-%03d", i), ns, image); err != nil {
			b.Fatal(err)
		}
	}
	if out := os.Getenv("EGRESS_BENCH_OBJECTS_OUT"); out != "" && n > 0 {
		o := proxies[0]
		data, err := json.Marshal(map[string]any{"configMap": o.configMap, "deployment": o.deployment, "service": o.service})
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(out, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	each := func(ctx context.Context, f func(ctx context.Context, o objects) error) error {
		g, ctx := errgroup.WithContext(ctx)
		g.SetLimit(parallel)
		for _, o := range proxies {
			g.Go(func() error { return f(ctx, o) })
		}
		return g.Wait()
	}
	ctx := context.Background()
	for b.Loop() {
		switch op {
		case "create":
			err = each(ctx, func(ctx context.Context, o objects) error { return rawCreate(ctx, cs, ns, o) })
		case "destroy":
			err = each(ctx, func(ctx context.Context, o objects) error { return rawDestroy(ctx, cs, ns, o) })
		case "objects":
			// Only the JSON above.
		case "namespace-create":
			_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		case "namespace-delete":
			err = cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		default:
			b.Fatalf("EGRESS_BENCH_OP=%q: want create, destroy, objects, namespace-create or namespace-delete", op)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// benchObjects renders the proxy the bench configurations describe: port 3128, clients from the pod range,
// one destination, no NetworkPolicy.
func benchObjects(name, ns, image string) (objects, error) {
	spec := backend.Spec{
		Name: name, UID: "bench-" + name, Owner: "bench",
		Placement: backend.Placement{Backend: Kind, Target: "bench", Scope: ns},
		Proxy:     proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.244.0.0/16"}, AllowedDestinations: []string{"example.com"}},
	}
	k, err := guest.RenderPod(spec.Proxy, proxyconf.RenderOptions{})
	if err != nil {
		return objects{}, err
	}
	return buildObjects(spec, ns, withDefaults(&Options{NetworkPolicy: false}, image), k)
}

func rawCreate(ctx context.Context, cs kubernetes.Interface, ns string, o objects) error {
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, o.configMap, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, o.deployment, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, o.service, metav1.CreateOptions{}); err != nil {
		return err
	}
	name := o.deployment.Name
	w, err := cs.AppsV1().Deployments(ns).Watch(ctx, metav1.SingleObject(metav1.ObjectMeta{Name: name}))
	if err != nil {
		return err
	}
	defer w.Stop()
	return untilEvent(ctx, w, func(_ watch.EventType, obj runtime.Object) bool {
		d, ok := obj.(*appsv1.Deployment)
		ready, _ := deploymentReady(name, d)
		return ok && ready
	})
}

func rawDestroy(ctx context.Context, cs kubernetes.Interface, ns string, o objects) error {
	name := o.deployment.Name
	pods := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(o.deployment.Spec.Selector.MatchLabels).String()}
	list, err := cs.CoreV1().Pods(ns).List(ctx, pods)
	if err != nil {
		return err
	}
	pods.ResourceVersion = list.ResourceVersion
	// Pods that still serve: not yet marked for deletion.
	left := map[string]bool{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			left[p.Name] = true
		}
	}
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, pods)
	if err != nil {
		return err
	}
	defer w.Stop()
	for _, del := range []func() error{
		func() error { return cs.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{}) },
		func() error { return cs.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}) },
		func() error { return cs.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}) },
	} {
		if err := del(); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	if len(left) == 0 {
		return nil
	}
	return untilEvent(ctx, w, func(t watch.EventType, obj runtime.Object) bool {
		if p, ok := obj.(*corev1.Pod); ok {
			if t == watch.Deleted || p.DeletionTimestamp != nil {
				delete(left, p.Name)
			} else {
				left[p.Name] = true
			}
		}
		return len(left) == 0
	})
}

func untilEvent(ctx context.Context, w watch.Interface, done func(watch.EventType, runtime.Object) bool) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("the watch closed before the wait ended")
			}
			if ev.Type == watch.Error {
				return apierrors.FromObject(ev.Object)
			}
			if done(ev.Type, ev.Object) {
				return nil
			}
		}
	}
}
