package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

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

	kbackend "github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
)

// What scripts/bench-k8s.sh asks of the cluster. The raw baseline it sets egress_proxy and the generic
// Kubernetes provider against: the same objects as a proxy without a NetworkPolicy (the ConfigMap with the
// rendered squid.conf, the Deployment with its readiness probe, a ClusterIP Service), made and removed with
// plain typed REST calls, no client-side rate limit, -parallel (10, Terraform's default) proxies at a time.
// Create returns once each Deployment is Available; destroy once each proxy's objects are deleted and its pods
// are terminating (what egress_proxy's destroy waits for).

// clientset connects to the cluster of a kubeconfig, without a client-side rate limit.
func clientset(kubeconfig string) (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	return kubernetes.NewForConfig(rc)
}

// runNamespace makes or deletes the namespace the benchmark works in (kubectl create|delete namespace NAME).
func runNamespace(ctx context.Context, args []string, _ io.Reader, _ io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: namespace takes create or delete", errUsage)
	}
	op := args[0]
	fs := newFlagSet("namespace")
	kubeconfig := fs.String("kubeconfig", "", "the cluster's kubeconfig")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if (op != "create" && op != "delete") || fs.NArg() != 1 || *kubeconfig == "" {
		return fmt.Errorf("%w: namespace create|delete -kubeconfig FILE NAME", errUsage)
	}
	cs, err := clientset(*kubeconfig)
	if err != nil {
		return err
	}
	return namespace(ctx, cs, op, fs.Arg(0))
}

func namespace(ctx context.Context, cs kubernetes.Interface, op, name string) error {
	switch op {
	case "create":
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		return err
	case "delete":
		return cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	}
	return fmt.Errorf("%w: namespace %q: want create or delete", errUsage, op)
}

// proxyObjects are one proxy's objects as the kubernetes backend renders them.
type proxyObjects struct {
	ConfigMap  *corev1.ConfigMap  `json:"configMap"`
	Deployment *appsv1.Deployment `json:"deployment"`
	Service    *corev1.Service    `json:"service"`
}

// benchProxies renders proxies raw-000, raw-001, ... in namespace ns.
func benchProxies(n int, ns, image string) ([]proxyObjects, error) {
	proxies := make([]proxyObjects, n)
	for i := range proxies {
		p := &proxies[i]
		var err error
		if p.ConfigMap, p.Deployment, p.Service, err = kbackend.BenchObjects(fmt.Sprintf("raw-%03d", i), ns, image); err != nil {
			return nil, err
		}
	}
	return proxies, nil
}

// runObjects prints one proxy's objects as JSON, which the generic provider's configuration reads so that all
// three legs make the same pods.
func runObjects(_ context.Context, args []string, _ io.Reader, stdout io.Writer) error {
	fs := newFlagSet("objects")
	ns := fs.String("namespace", "", "the namespace the objects name")
	image := fs.String("image", "", "the proxy image")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 || *ns == "" || *image == "" {
		return fmt.Errorf("%w: objects takes -namespace and -image", errUsage)
	}
	proxies, err := benchProxies(1, *ns, *image)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(proxies[0])
}

// runRaw makes (create) or removes (destroy) the raw baseline's -proxies proxies, -parallel at a time.
func runRaw(ctx context.Context, args []string, _ io.Reader, _ io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: raw takes create or destroy", errUsage)
	}
	op := args[0]
	fs := newFlagSet("raw")
	kubeconfig := fs.String("kubeconfig", "", "the cluster's kubeconfig")
	ns := fs.String("namespace", "", "the namespace to work in")
	image := fs.String("image", "", "the proxy image")
	n := fs.Int("proxies", 0, "how many proxies")
	parallel := fs.Int("parallel", 10, "how many proxies at a time (Terraform's default parallelism)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if (op != "create" && op != "destroy") || fs.NArg() != 0 || *kubeconfig == "" || *ns == "" || *image == "" || *n <= 0 || *parallel <= 0 {
		return fmt.Errorf("%w: raw create|destroy -kubeconfig FILE -namespace NS -image IMAGE -proxies N [-parallel P]", errUsage)
	}
	cs, err := clientset(*kubeconfig)
	if err != nil {
		return err
	}
	return raw(ctx, cs, op, *ns, *image, *n, *parallel)
}

func raw(ctx context.Context, cs kubernetes.Interface, op, ns, image string, n, parallel int) error {
	var each func(ctx context.Context, cs kubernetes.Interface, ns string, o proxyObjects) error
	switch op {
	case "create":
		each = rawCreate
	case "destroy":
		each = rawDestroy
	default:
		return fmt.Errorf("%w: raw %q: want create or destroy", errUsage, op)
	}
	proxies, err := benchProxies(n, ns, image)
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, o := range proxies {
		g.Go(func() error { return each(ctx, cs, ns, o) })
	}
	return g.Wait()
}

func rawCreate(ctx context.Context, cs kubernetes.Interface, ns string, o proxyObjects) error {
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, o.ConfigMap, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, o.Deployment, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, o.Service, metav1.CreateOptions{}); err != nil {
		return err
	}
	w, err := cs.AppsV1().Deployments(ns).Watch(ctx, metav1.SingleObject(metav1.ObjectMeta{Name: o.Deployment.Name}))
	if err != nil {
		return err
	}
	defer w.Stop()
	return untilEvent(ctx, w, func(_ watch.EventType, obj runtime.Object) bool {
		d, ok := obj.(*appsv1.Deployment)
		return ok && kbackend.DeploymentReady(d)
	})
}

func rawDestroy(ctx context.Context, cs kubernetes.Interface, ns string, o proxyObjects) error {
	name := o.Deployment.Name
	pods := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(o.Deployment.Spec.Selector.MatchLabels).String()}
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
				return errors.New("the watch closed before the wait ended")
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
