package kubernetes

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// stream is one watched collection: list reads the current state (and whether it is already what we wait
// for), watch follows it from a resourceVersion, and check judges each object the watch delivers.
type stream struct {
	object string
	list   func(ctx context.Context) (resourceVersion string, done bool, err error)
	watch  func(ctx context.Context, resourceVersion string) (watch.Interface, error)
	check  func(t watch.EventType, obj runtime.Object) (done bool, err error)
}

// follow lists, then watches until check says done, check fails, or ctx ends. A watch the server closes
// (they all time out eventually) is opened again from the last resourceVersion seen; a resourceVersion too old
// to resume from (410 Gone) makes it list again. No polling: every check is driven by an event.
func follow(ctx context.Context, s stream) error {
	rv, relist := "", true
	for {
		if relist {
			var done bool
			var err error
			rv, done, err = s.list(ctx)
			if err != nil || done {
				return classifyWait(s.object, err)
			}
			relist = false
		}
		w, err := s.watch(ctx, rv)
		if err != nil {
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				relist = true
				continue
			}
			return classifyWait(s.object, err)
		}
		next, done, err := drain(ctx, w, rv, s.check)
		w.Stop()
		switch {
		case err != nil:
			return classifyWait(s.object, err)
		case done:
			return nil
		case next == "":
			relist = true // the stream ended with a 410 Gone
		default:
			rv = next
		}
		if ctx.Err() != nil {
			return classifyWait(s.object, ctx.Err())
		}
	}
}

// drain reads one watch, opened at rv, until it closes. It returns the last resourceVersion seen (empty when
// the server said the version is gone), or done, or the error that ends the wait.
func drain(ctx context.Context, w watch.Interface, rv string, check func(watch.EventType, runtime.Object) (bool, error)) (string, bool, error) {
	for {
		select {
		case <-ctx.Done():
			return rv, false, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, false, nil
			}
			if ev.Type == watch.Error {
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
					return "", false, nil
				}
				return rv, false, err
			}
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
				rv = m.GetResourceVersion()
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			done, err := check(ev.Type, ev.Object)
			if err != nil || done {
				return rv, done, err
			}
		}
	}
}

func classifyWait(object string, err error) error {
	if err == nil {
		return nil
	}
	return classify(object, err)
}

// waitRollout waits until the Deployment has rolled out and is Available, failing as soon as a pod shows it
// never will (an image that cannot be pulled, a crashing container) or the Deployment gives up. It returns the
// Deployment as it was when found ready.
func waitRollout(ctx context.Context, c *client, id backend.ProviderID) (*appsv1.Deployment, error) {
	// The two streams' own context: cancelled when the first answers.
	streams, cancel := context.WithCancel(ctx)
	defer cancel()
	var ready *appsv1.Deployment
	results := make(chan error, 2)
	go func() { results <- follow(streams, deploymentStream(c, id, &ready)) }()
	go func() { results <- follow(streams, podStream(c, id)) }()
	// The Deployment's stream ends when it is ready or failed; the pods' only when a pod failed.
	err := <-results
	cancel()
	<-results //nolint:errcheck // the other stream, ended by the cancel: the first answer decides
	if err != nil {
		return nil, err
	}
	return ready, nil
}

// waitLoadBalancer waits for the LoadBalancer Service's ingress address and returns the Service then.
func waitLoadBalancer(ctx context.Context, c *client, id backend.ProviderID) (*corev1.Service, error) {
	var ready *corev1.Service
	if err := follow(ctx, serviceStream(c, id, &ready)); err != nil {
		return nil, err
	}
	return ready, nil
}

// deploymentStream follows the Deployment until it is ready, which it then stores in *ready.
func deploymentStream(c *client, id backend.ProviderID, ready **appsv1.Deployment) stream {
	object := objectName("Deployment", id)
	byName := fields.OneTermEqualSelector("metadata.name", id.Name).String()
	check := func(t watch.EventType, obj runtime.Object) (bool, error) {
		d, ok := obj.(*appsv1.Deployment)
		if !ok || d.Name != id.Name {
			return false, nil
		}
		if t == watch.Deleted {
			return false, backend.NotFound(object, "was deleted while waiting for it")
		}
		done, err := deploymentReady(object, d)
		if done {
			*ready = d
		}
		return done, err
	}
	return stream{
		object: object,
		list: func(ctx context.Context) (string, bool, error) {
			l, err := c.cs.AppsV1().Deployments(id.Scope).List(ctx, metav1.ListOptions{FieldSelector: byName})
			if err != nil {
				return "", false, err
			}
			for i := range l.Items {
				if l.Items[i].Name == id.Name {
					done, err := check(watch.Added, &l.Items[i])
					return l.ResourceVersion, done, err
				}
			}
			return "", false, backend.NotFound(object, "does not exist")
		},
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return c.cs.AppsV1().Deployments(id.Scope).Watch(ctx, metav1.ListOptions{FieldSelector: byName, ResourceVersion: rv, AllowWatchBookmarks: true})
		},
		check: check,
	}
}

// deploymentReady says whether d runs its current template on every replica, or why it never will.
func deploymentReady(object string, d *appsv1.Deployment) (bool, error) {
	for _, cond := range d.Status.Conditions {
		switch {
		case cond.Type == appsv1.DeploymentProgressing && cond.Reason == "ProgressDeadlineExceeded":
			return false, backend.Permanent(object, "rollout made no progress within %ds: %s", progressDeadline, cond.Message)
		case cond.Type == appsv1.DeploymentReplicaFailure && cond.Status == corev1.ConditionTrue:
			// The ReplicaSet could not make a pod: a ResourceQuota, a LimitRange, an admission policy.
			if m := quotaRE.FindStringSubmatch(cond.Message); m != nil {
				return false, backend.Quota(object, "ResourceQuota %q forbids its pods: %s", m[1], cond.Message)
			}
			return false, backend.Permanent(object, "its pods cannot be created: %s", cond.Message)
		}
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	rolledOut := s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas >= want
	return rolledOut && conditionTrue(d, appsv1.DeploymentAvailable), nil
}

func conditionTrue(d *appsv1.Deployment, t appsv1.DeploymentConditionType) bool {
	for _, cond := range d.Status.Conditions {
		if cond.Type == t {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// fatalWaitingReasons are container states that do not heal by waiting: reported at once, with the
// kubelet's message, instead of at the end of a 20-minute timeout.
var fatalWaitingReasons = map[string]bool{
	"ImagePullBackOff":           true,
	"ErrImageNeverPull":          true,
	"InvalidImageName":           true,
	"CrashLoopBackOff":           true,
	"CreateContainerConfigError": true,
}

func podStream(c *client, id backend.ProviderID) stream {
	object := objectName("Deployment", id)
	// By name, not UID: the id is all a Reconfigure or Update has, and names are unique per namespace.
	sel := func() string { return labels.SelectorFromSet(labels.Set{backend.LabelName: id.Name}).String() }
	check := func(t watch.EventType, obj runtime.Object) (bool, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok || t == watch.Deleted {
			return false, nil
		}
		return false, podFailure(object, p)
	}
	return stream{
		object: object,
		list: func(ctx context.Context) (string, bool, error) {
			l, err := c.cs.CoreV1().Pods(id.Scope).List(ctx, metav1.ListOptions{LabelSelector: sel()})
			if err != nil {
				return "", false, err
			}
			for i := range l.Items {
				if err := podFailure(object, &l.Items[i]); err != nil {
					return "", false, err
				}
			}
			return l.ResourceVersion, false, nil
		},
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return c.cs.CoreV1().Pods(id.Scope).Watch(ctx, metav1.ListOptions{LabelSelector: sel(), ResourceVersion: rv, AllowWatchBookmarks: true})
		},
		check: check,
	}
}

// podFailure reports a pod that will not become ready by itself.
// terminationLines is how much of a crashed container's log a diagnostic quotes: Squid's fatal error and the
// lines that lead to it.
const terminationLines = 6

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

func podFailure(object string, p *corev1.Pod) error {
	if p.DeletionTimestamp != nil {
		return nil // an old pod of a rollout on its way out
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && fatalWaitingReasons[w.Reason] {
			msg := w.Message
			// A crash loop's own message only says it backs off; why the container stopped is in its last
			// termination: the exit code and the end of its log.
			if t := cs.LastTerminationState.Terminated; t != nil {
				last := fmt.Sprintf("last exit code %d (%s)", t.ExitCode, t.Reason)
				if tail := lastLines(t.Message, terminationLines); tail != "" {
					last += ", its log ends:\n" + tail
				}
				msg = strings.TrimPrefix(msg+"; "+last, "; ")
			}
			return backend.Permanent(object, "pod %s: container %s: %s: %s", p.Name, cs.Name, w.Reason, msg)
		}
	}
	return nil
}

// serviceStream follows the Service until it has a load balancer's ingress address; it then stores the
// Service in *ready.
func serviceStream(c *client, id backend.ProviderID, ready **corev1.Service) stream {
	object := objectName("Service", id)
	byName := fields.OneTermEqualSelector("metadata.name", id.Name).String()
	check := func(t watch.EventType, obj runtime.Object) (bool, error) {
		s, ok := obj.(*corev1.Service)
		if !ok || s.Name != id.Name {
			return false, nil
		}
		if t == watch.Deleted {
			return false, backend.NotFound(object, "was deleted while waiting for its load balancer")
		}
		if len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, nil
		}
		*ready = s
		return true, nil
	}
	return stream{
		object: object,
		list: func(ctx context.Context) (string, bool, error) {
			l, err := c.cs.CoreV1().Services(id.Scope).List(ctx, metav1.ListOptions{FieldSelector: byName})
			if err != nil {
				return "", false, err
			}
			for i := range l.Items {
				if l.Items[i].Name == id.Name {
					done, err := check(watch.Added, &l.Items[i])
					return l.ResourceVersion, done, err
				}
			}
			return "", false, backend.NotFound(object, "does not exist")
		},
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return c.cs.CoreV1().Services(id.Scope).Watch(ctx, metav1.ListOptions{FieldSelector: byName, ResourceVersion: rv, AllowWatchBookmarks: true})
		},
		check: check,
	}
}
