package kubernetes

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil/k8stest"
)

// The test cluster's origin (scripts/k8s-env.sh): every name under egress-k8s.test resolves to it, on a private
// address the proxy reaches only through allowed_private_cidrs.
const (
	liveOrigin     = "origin.egress-k8s.test"
	liveOriginCIDR = "172.31.255.0/24"
)

// TestFailoverLive: a client sending requests through a two-pod proxy's Service, one fresh connection after
// another, sees none fail while a proxy pod is deleted and while the node is drained (cordoned, then its proxy
// pods evicted as `kubectl drain` does). On this one-node cluster the drain meets the PodDisruptionBudget:
// the first eviction goes, the second is refused while the first's replacement cannot be scheduled, and is let
// through once the node takes pods again and the replacement serves.
//
// It runs where TestConformanceLive does (make test-provider, with EGRESS_K8S_KUBECONFIG), not in parallel with
// anything: it cordons the cluster's node for a moment.
func TestFailoverLive(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cluster, cs, b := liveCluster(t)
	ns := cluster.Namespace(t, "failover")
	spec := backend.Spec{
		Name: "failover", UID: "failover-" + strconv.FormatInt(time.Now().UnixNano(), 36), Owner: "failover-test",
		Placement: backend.Placement{Backend: Kind, Target: "test", Scope: ns, Options: &Options{Replicas: 2, NetworkPolicy: true}},
		Proxy: proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.244.0.0/16"},
			AllowedDestinations: []string{liveOrigin}, AllowedPrivateCIDRs: []string{liveOriginCIDR}},
	}
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := b.Delete(ctx, inst.ID); err != nil {
			t.Errorf("deleting %s: %v", inst.ID, err)
		}
	})
	svc, err := cs.CoreV1().Services(ns).Get(ctx, spec.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	client := newLoopingClient(t, ctx, cluster, ns, svc.Spec.ClusterIP, spec.Proxy.Port)
	client.waitForMore(t)

	// A proxy pod deleted, as a crash or a node's eviction of it would.
	pods := readyProxyPods(t, ctx, cs, ns, spec)
	deleted := pods[0].Name
	logStep(t, "deleting pod "+pods[0].Name)
	if err := cs.CoreV1().Pods(ns).Delete(ctx, pods[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReadyProxyPods(t, ctx, cs, ns, spec, pods[0].Name)
	logStep(t, "its replacement is ready")
	client.waitForMore(t)

	// The node drained: cordoned, then each proxy pod evicted.
	pods = readyProxyPods(t, ctx, cs, ns, spec)
	node := pods[0].Spec.NodeName
	setUnschedulable(t, ctx, cs, node, true)
	t.Cleanup(func() { setUnschedulable(t, context.Background(), cs, node, false) })
	logStep(t, "evicting pod "+pods[0].Name)
	if err := evict(ctx, cs, ns, pods[0].Name); err != nil {
		t.Fatalf("evicting %s, the first of two ready pods: %v", pods[0].Name, err)
	}
	if err := evict(ctx, cs, ns, pods[1].Name); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evicting %s, the last ready pod, while its peer's replacement cannot be scheduled: %v, want a refusal by the PodDisruptionBudget (429)", pods[1].Name, err)
	}
	client.waitForMore(t)
	setUnschedulable(t, ctx, cs, node, false)
	// What kubectl drain does on a refusal: ask again until the budget allows it.
	err = backend.Poll(ctx, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := evict(ctx, cs, ns, pods[1].Name)
		if apierrors.IsTooManyRequests(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("evicting %s once its peer's replacement serves: %v", pods[1].Name, err)
	}
	logStep(t, "evicted pod "+pods[1].Name)
	waitReadyProxyPods(t, ctx, cs, ns, spec, pods[0].Name, pods[1].Name)
	client.waitForMore(t)
	// The pods deleted and evicted serve until their pause before stopping ends (drainSeconds), and only then
	// does Squid stop and their addresses go: the client runs on until they are gone, so that a node whose rules
	// still send connections to one of them is seen.
	waitPodsGone(t, ctx, cs, ns, deleted, pods[0].Name, pods[1].Name)
	logStep(t, "the pods deleted and evicted are gone")
	client.waitForMore(t)

	logStep(t, "stopping the client")
	served, failures := client.stop(t)
	if len(failures) != 0 {
		t.Fatalf("%d of %d requests failed while pods were deleted and evicted:\n%s", len(failures), served+len(failures), strings.Join(failures, "\n"))
	}
	t.Logf("%d requests through the Service, none failed, across a pod deletion and a drain", served)
}

// logStep logs a disruption with its time, to set beside the client's failures.
func logStep(t *testing.T, what string) {
	t.Helper()
	t.Logf("%s %s", time.Now().UTC().Format("15:04:05.000"), what)
}

// loopingClient is a pod that sends requests through the proxy, one fresh connection after another, until told
// to stop; it counts them in /dev/shm, which the test reads.
type loopingClient struct {
	cluster *k8stest.Cluster
	ctx     context.Context
	ns, pod string
	done    chan loopResult
	last    int
}

type loopResult struct {
	out k8stest.ExecResult
	err error
}

// The loop: each request a new TCP connection (what a fleet's new connections meet), each failure a line on stdout
// with its time (the test logs the time of each disruption beside it), but those before the first request served:
// the Service was made moments before, and until the node's kube-proxy has its rules its address has no route ("No
// route to host"; a cold make test on two busy cores met one), which is no failover's doing; the count of those
// served in /dev/shm/served, and a stop when /dev/shm/stop appears.
const clientLoop = `served=0
while [ ! -e /dev/shm/stop ]; do
  status=$(timeout 10 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf "GET http://%s/ HTTP/1.0\r\nHost: %s\r\n\r\n" "$2" "$2" >&3 && head -n 1 <&3' "$0" "$1" "$2" 2>&1)
  case "$status" in
  "HTTP/1."?" 200 "*) served=$((served+1)); echo "$served" >/dev/shm/served.tmp && mv /dev/shm/served.tmp /dev/shm/served ;;
  *) [ "$served" -eq 0 ] || echo "failed at $(date -u +%T.%3N), after $served served: ${status:-no answer}" ;;
  esac
done
echo "served $served"`

func newLoopingClient(t *testing.T, ctx context.Context, cluster *k8stest.Cluster, ns, address string, port int) *loopingClient {
	t.Helper()
	c := &loopingClient{cluster: cluster, ctx: ctx, ns: ns, pod: "client", done: make(chan loopResult, 1)}
	cluster.IdlePod(t, ns, c.pod, DefaultImage)
	go func() {
		out, err := cluster.Exec(ctx, ns, c.pod, "bash", "-c", clientLoop, address, strconv.Itoa(port), liveOrigin)
		c.done <- loopResult{out, err}
	}()
	return c
}

// servedPerStep is how many requests must be served after each disruption: enough that the Service's
// endpoints and the node's rules have caught up with it, not just one request that slipped through.
const servedPerStep = 20

// waitForMore waits until servedPerStep more requests than at the last wait have been served.
func (c *loopingClient) waitForMore(t *testing.T) {
	t.Helper()
	want := c.last + servedPerStep
	err := backend.Poll(c.ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		select {
		case r := <-c.done:
			c.done <- r
			return false, fmt.Errorf("the client's loop ended early: %w\n%s%s", r.err, r.out.Stdout, r.out.Stderr)
		default:
		}
		res, err := c.cluster.Exec(ctx, c.ns, c.pod, "cat", "/dev/shm/served")
		if err != nil {
			return false, err
		}
		got, _ := strconv.Atoi(strings.TrimSpace(res.Stdout))
		if got >= want {
			c.last = got
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d requests served through the proxy: %v", want, err)
	}
}

// stop ends the loop and returns how many requests it served and each failure it met.
func (c *loopingClient) stop(t *testing.T) (served int, failures []string) {
	t.Helper()
	if _, err := c.cluster.Exec(c.ctx, c.ns, c.pod, "touch", "/dev/shm/stop"); err != nil {
		t.Fatal(err)
	}
	r := <-c.done
	if r.err != nil || r.out.Code != 0 {
		t.Fatalf("the client's loop: %v (exit %d)\n%s", r.err, r.out.Code, r.out.Stderr)
	}
	for line := range strings.Lines(r.out.Stdout) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "failed "):
			failures = append(failures, line)
		case strings.HasPrefix(line, "served "):
			served, _ = strconv.Atoi(strings.TrimPrefix(line, "served "))
		}
	}
	return served, failures
}

// readyProxyPods are the proxy's pods that are ready and not being deleted; it fails unless there are two.
func readyProxyPods(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string, spec backend.Spec) []corev1.Pod {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: backend.LabelUID + "=" + spec.UID})
	if err != nil {
		t.Fatal(err)
	}
	var ready []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && podIsReady(p) {
			ready = append(ready, p)
		}
	}
	if len(ready) != 2 {
		t.Fatalf("%d ready proxy pods, want 2", len(ready))
	}
	return ready
}

// waitReadyProxyPods waits until two proxy pods other than gone are ready.
func waitReadyProxyPods(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string, spec backend.Spec, gone ...string) {
	t.Helper()
	err := backend.Poll(ctx, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: backend.LabelUID + "=" + spec.UID})
		if err != nil {
			return false, err
		}
		n := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && podIsReady(p) && !slices.Contains(gone, p.Name) {
				n++
			}
		}
		return n == 2, nil
	})
	if err != nil {
		t.Fatalf("waiting for two ready proxy pods besides %v: %v", gone, err)
	}
}

func podIsReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitPodsGone waits until none of the pods named exists any more.
func waitPodsGone(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string, names ...string) {
	t.Helper()
	err := backend.Poll(ctx, 500*time.Millisecond, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			switch {
			case err == nil:
				return false, nil
			case !apierrors.IsNotFound(err):
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for pods %v to be gone: %v", names, err)
	}
}

func evict(ctx context.Context, cs kubernetes.Interface, ns, pod string) error {
	return cs.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns}})
}

func setUnschedulable(t *testing.T, ctx context.Context, cs kubernetes.Interface, node string, cordoned bool) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, cordoned)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("setting node %s unschedulable=%t: %v", node, cordoned, err)
	}
}

// liveCluster is the cluster of scripts/k8s-env.sh that EGRESS_K8S_KUBECONFIG names, as the admin's clientset and
// as a backend whose cluster "test" it is; the test is skipped when the variable is unset.
func liveCluster(t *testing.T) (*k8stest.Cluster, kubernetes.Interface, *Backend) {
	t.Helper()
	kubeconfig := os.Getenv("EGRESS_K8S_KUBECONFIG")
	if kubeconfig == "" {
		t.Skip("EGRESS_K8S_KUBECONFIG is not set: run `scripts/k8s-env.sh start` and set it to the kubeconfig it writes, or `make test-provider`")
	}
	cluster := k8stest.Connect(t, kubeconfig)
	admin, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Clusters: map[string]ClusterConfig{"test": {ConfigPath: kubeconfig}}})
	if err != nil {
		t.Fatal(err)
	}
	return cluster, cs, b
}
