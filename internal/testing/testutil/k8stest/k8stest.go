// Package k8stest reaches the test cluster of scripts/k8s-env.sh behind the provider's back: it makes the
// namespaces, quotas and credentials the acceptance tests need, deletes what a test wants gone, and lists
// what a destroy must have removed. It keeps client-go out of the provider's tests, which handle only strings.
package k8stest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Cluster is the test cluster, reached as its admin.
type Cluster struct {
	cs   kubernetes.Interface
	rc   *rest.Config // for exec (exec.go)
	host string
	ca   []byte
}

// Connect reads the admin kubeconfig scripts/k8s-env.sh wrote.
func Connect(t *testing.T, kubeconfig string) *Cluster {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("reading the test cluster's kubeconfig %s: %v", kubeconfig, err)
	}
	// Tests side by side make namespaces, accounts, roles and tokens through this one client: client-go's
	// default of 5 requests a second would have them wait on each other for tens of seconds.
	rc.QPS, rc.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatalf("client for the test cluster: %v", err)
	}
	c := &Cluster{cs: cs, rc: rc, host: rc.Host, ca: rc.CAData}
	// A kubeconfig left behind by a cluster that is gone would otherwise fail the test somewhere in the
	// middle, as a provider error; this says what is wrong first.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		t.Fatalf("the test cluster at %s (kubeconfig %s) is not ready: %v: run `scripts/k8s-env.sh start` or `make k8s-env`", rc.Host, kubeconfig, err)
	}
	return c
}

// Namespace makes a namespace named after prefix and a random suffix, deleted when the test ends. It
// enforces the restricted Pod Security Standard, so the API server refuses a proxy pod that asks for more.
func (c *Cluster) Namespace(t *testing.T, prefix string) string {
	t.Helper()
	ns, err := c.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: map[string]string{
			"pod-security.kubernetes.io/enforce": "restricted",
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() {
		// Deleting the namespace takes everything in it along, whatever a failed test left there.
		_ = c.cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	// The namespace's default ServiceAccount appears shortly after the namespace; pods cannot be created
	// before it, and the test is about what the provider does, not about that race.
	if err := c.waitFor(context.Background(), ns.Name, "default", serviceAccounts(c.cs, ns.Name), func(watch.EventType) bool { return true }); err != nil {
		t.Fatalf("waiting for namespace %s's default ServiceAccount: %v", ns.Name, err)
	}
	return ns.Name
}

// ForbidPods puts a ResourceQuota of zero pods into ns.
func (c *Cluster) ForbidPods(t *testing.T, ns, name string) {
	t.Helper()
	_, err := c.cs.CoreV1().ResourceQuotas(ns).Create(context.Background(), &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating ResourceQuota %s/%s: %v", ns, name, err)
	}
}

// Credentials are what a provider block needs to reach the cluster without a kubeconfig.
type Credentials struct {
	Host  string
	Token string
	CA    string
}

// ServiceAccountToken makes a ServiceAccount in ns that no Role or ClusterRole binds to, and a token for it.
func (c *Cluster) ServiceAccountToken(t *testing.T, ns, name string) Credentials {
	t.Helper()
	ctx := context.Background()
	if _, err := c.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ServiceAccount %s/%s: %v", ns, name, err)
	}
	expiry := int64(3600)
	tr, err := c.cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for ServiceAccount %s/%s: %v", ns, name, err)
	}
	return Credentials{Host: c.host, Token: tr.Status.Token, CA: string(c.ca)}
}

// DeleteDeployment deletes a Deployment as a user would with kubectl (foreground: its pods and the objects
// it owns go first) and returns once it is gone.
func (c *Cluster) DeleteDeployment(ctx context.Context, ns, name string) error {
	foreground := metav1.DeletePropagationForeground
	err := c.cs.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &foreground})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return c.waitFor(ctx, ns, name, deployments(c.cs, ns), func(t watch.EventType) bool { return t == watch.Deleted })
}

// Labelled lists every object in any namespace that carries label=value, of each kind the backend makes or
// causes: Deployments, ReplicaSets, pods, ConfigMaps, Secrets, Services and NetworkPolicies. Pods marked for
// deletion are not listed: the backend's Delete ends there (out of their Service, their Squid told to stop),
// and the kubelet removes them within their grace period.
func (c *Cluster) Labelled(ctx context.Context, label, value string) ([]string, error) {
	opts := metav1.ListOptions{LabelSelector: label + "=" + value}
	var found []string
	add := func(kind string, metas []metav1.ObjectMeta) {
		for _, m := range metas {
			found = append(found, fmt.Sprintf("%s %s/%s", kind, m.Namespace, m.Name))
		}
	}
	all := metav1.NamespaceAll
	if l, err := c.cs.AppsV1().Deployments(all).List(ctx, opts); err == nil {
		add("Deployment", metasOf(l.Items, func(i int) metav1.ObjectMeta { return l.Items[i].ObjectMeta }))
	} else {
		return nil, err
	}
	if l, err := c.cs.AppsV1().ReplicaSets(all).List(ctx, opts); err == nil {
		add("ReplicaSet", metasOf(l.Items, func(i int) metav1.ObjectMeta { return l.Items[i].ObjectMeta }))
	} else {
		return nil, err
	}
	if l, err := c.cs.CoreV1().Pods(all).List(ctx, opts); err == nil {
		serving := slices.DeleteFunc(l.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
		add("Pod", metasOf(serving, func(i int) metav1.ObjectMeta { return serving[i].ObjectMeta }))
	} else {
		return nil, err
	}
	if l, err := c.cs.CoreV1().ConfigMaps(all).List(ctx, opts); err == nil {
		add("ConfigMap", metasOf(l.Items, func(i int) metav1.ObjectMeta { return l.Items[i].ObjectMeta }))
	} else {
		return nil, err
	}
	if l, err := c.cs.CoreV1().Secrets(all).List(ctx, opts); err == nil {
		add("Secret", metasOf(l.Items, func(i int) metav1.ObjectMeta { return l.Items[i].ObjectMeta }))
	} else {
		return nil, err
	}
	if l, err := c.cs.CoreV1().Services(all).List(ctx, opts); err == nil {
		add("Service", metasOf(l.Items, func(i int) metav1.ObjectMeta { return l.Items[i].ObjectMeta }))
	} else {
		return nil, err
	}
	if l, err := c.cs.NetworkingV1().NetworkPolicies(all).List(ctx, opts); err == nil {
		add("NetworkPolicy", metasOf(l.Items, func(i int) metav1.ObjectMeta { return l.Items[i].ObjectMeta }))
	} else {
		return nil, err
	}
	return found, nil
}

// PodLog returns the log of the first container of the first pod in ns labelled label=value, for a failing
// test's message: a proxy's Squid, also beside its metrics sidecars (the API server wants a container named
// when a pod has more than one).
func (c *Cluster) PodLog(ctx context.Context, ns, label, value string) string {
	pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: label + "=" + value})
	if err != nil || len(pods.Items) == 0 {
		return fmt.Sprintf("(no pod: %v)", err)
	}
	pod := pods.Items[0]
	opts := &corev1.PodLogOptions{}
	if len(pod.Spec.Containers) > 0 {
		opts.Container = pod.Spec.Containers[0].Name
	}
	raw, err := c.cs.CoreV1().Pods(ns).GetLogs(pod.Name, opts).DoRaw(ctx)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return strings.TrimSpace(string(raw))
}

func metasOf[T any](items []T, meta func(int) metav1.ObjectMeta) []metav1.ObjectMeta {
	out := make([]metav1.ObjectMeta, len(items))
	for i := range items {
		out[i] = meta(i)
	}
	return out
}

// collection lists and watches one kind in one namespace, by name.
type collection struct {
	list  func(ctx context.Context, opts metav1.ListOptions) (found bool, resourceVersion string, err error)
	watch func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

func deployments(cs kubernetes.Interface, ns string) collection {
	return collection{
		list: func(ctx context.Context, opts metav1.ListOptions) (bool, string, error) {
			l, err := cs.AppsV1().Deployments(ns).List(ctx, opts)
			if err != nil {
				return false, "", err
			}
			return len(l.Items) > 0, l.ResourceVersion, nil
		},
		watch: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return cs.AppsV1().Deployments(ns).Watch(ctx, opts)
		},
	}
}

func serviceAccounts(cs kubernetes.Interface, ns string) collection {
	return collection{
		list: func(ctx context.Context, opts metav1.ListOptions) (bool, string, error) {
			l, err := cs.CoreV1().ServiceAccounts(ns).List(ctx, opts)
			if err != nil {
				return false, "", err
			}
			return len(l.Items) > 0, l.ResourceVersion, nil
		},
		watch: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().ServiceAccounts(ns).Watch(ctx, opts)
		},
	}
}

// waitFor watches the object named name until an event satisfies done: Deleted for a deletion, any event for
// an appearance. The list decides at once when the object is already (or no longer) there. A generous bound
// only keeps a broken cluster from hanging the test run.
func (c *Cluster) waitFor(ctx context.Context, ns, name string, coll collection, done func(watch.EventType) bool) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	deleting := !done(watch.Added)
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	for {
		found, rv, err := coll.list(ctx, opts)
		if err != nil {
			return err
		}
		if found != deleting {
			return nil
		}
		w, err := coll.watch(ctx, metav1.ListOptions{FieldSelector: opts.FieldSelector, ResourceVersion: rv})
		if err != nil {
			return err
		}
		for ev := range w.ResultChan() {
			if ev.Type != watch.Error && ev.Type != watch.Bookmark && done(ev.Type) {
				w.Stop()
				return nil
			}
		}
		w.Stop()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s/%s: %w", ns, name, err)
		}
		// The watch closed (a server timeout, a 410): list again.
	}
}
