package kubernetes

import (
	"context"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Delete removes the proxy and returns once it can no longer serve and none of its objects remain in the API.
//
//  1. The Deployment is scaled to zero: the ReplicaSet controller marks every pod for deletion. A marked pod
//     is out of the Service's endpoints, and Squid closes its listening port on the SIGTERM the kubelet sends;
//     the kubelet removes the pod within its grace period (Squid lets open connections finish for
//     shutdown_lifetime, a few seconds). Waiting for the pods to be gone too would add those seconds to
//     every destroy, for processes that no longer accept a connection.
//  2. Once every pod is marked, the Deployment is deleted, and then its ReplicaSets, here rather than by the
//     garbage collector, whose way through the owner chain takes about a second under load.
//  3. Beside both, the ConfigMap, Secret, Service, NetworkPolicy and PodDisruptionBudget are deleted, found by the proxy's UID
//     label, so that objects a crashed Create made before it could set their owner go too.
//
// Anything that carries a finalizer outlives its delete (a LoadBalancer Service until the cloud has released
// its load balancer): Delete waits for it to be gone, so that a replacement of the same name does not meet
// it. A proxy that does not exist is not an error; every step is safe to repeat after a lost answer.
func (b *Backend) Delete(ctx context.Context, id backend.ProviderID) error {
	c, err := b.checkID(ctx, id)
	if err != nil {
		return err
	}
	object := objectName("Deployment", id)
	deployments := c.cs.AppsV1().Deployments(id.Scope)
	d, err := deployments.Get(ctx, id.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return classify(object, err)
	}
	uid := d.Labels[backend.LabelUID]
	if d.Labels[backend.LabelManagedBy] != backend.ManagedByValue || uid == "" {
		return backend.Permanent(object, "was not made by this provider; it is left alone")
	}
	if err := backend.OwnershipOf(ctx).Check(object, d.Labels[backend.LabelOwner], uid); err != nil {
		return err
	}
	selector := selectorLabelsOf(d)
	deploymentUID, finalizers := d.UID, len(d.Finalizers) > 0
	return allOf(ctx, append([]func(context.Context) error{
		func(ctx context.Context) error {
			if err := scaleToZero(ctx, c, id, d); err != nil {
				return err
			}
			if err := waitPodsStopping(ctx, c, id, selector); err != nil {
				return err
			}
			background := metav1.DeletePropagationBackground
			err := deployments.Delete(ctx, id.Name, metav1.DeleteOptions{
				PropagationPolicy: &background,
				// The UID precondition keeps a Deployment made again under the same name by someone else safe.
				Preconditions: &metav1.Preconditions{UID: &deploymentUID},
			})
			if err != nil && !apierrors.IsNotFound(err) {
				return classify(object, err)
			}
			if finalizers {
				// Gone at once unless it carries a finalizer; then this waits for whoever removes it. (One added
				// between the read above and the delete is not waited for.)
				lw := listWatch{
					list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
						return deployments.List(ctx, o)
					},
					watch: deployments.Watch,
				}
				if err := waitGone(ctx, object, id.Name, lw); err != nil {
					return err
				}
			}
			return deleteReplicaSets(ctx, c, id, selector)
		},
		func(ctx context.Context) error { return deleteOwnSecret(ctx, c, id, uid) },
	}, sweepsByUID(c, id, uid)...)...)
}

// sweepsByUID delete, each beside the others, the proxy's objects other than the Deployment and its Secret,
// found by the proxy's UID label, so that objects a crashed Create made before it could set their owner go too.
func sweepsByUID(c *client, id backend.ProviderID, uid string) []func(context.Context) error {
	ns, core, netv1, policy := id.Scope, c.cs.CoreV1(), c.cs.NetworkingV1(), c.cs.PolicyV1()
	return []func(context.Context) error{
		func(ctx context.Context) error {
			return sweep(ctx, id, uid, "ConfigMap", listWatch{
				list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return core.ConfigMaps(ns).List(ctx, o)
				},
				watch: core.ConfigMaps(ns).Watch,
			}, core.ConfigMaps(ns).Delete)
		},
		func(ctx context.Context) error {
			return sweep(ctx, id, uid, "Service", listWatch{
				list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return core.Services(ns).List(ctx, o)
				},
				watch: core.Services(ns).Watch,
			}, core.Services(ns).Delete)
		},
		func(ctx context.Context) error {
			return sweep(ctx, id, uid, "NetworkPolicy", listWatch{
				list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return netv1.NetworkPolicies(ns).List(ctx, o)
				},
				watch: netv1.NetworkPolicies(ns).Watch,
			}, netv1.NetworkPolicies(ns).Delete)
		},
		func(ctx context.Context) error {
			return sweep(ctx, id, uid, "PodDisruptionBudget", listWatch{
				list: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
					return policy.PodDisruptionBudgets(ns).List(ctx, o)
				},
				watch: policy.PodDisruptionBudgets(ns).Watch,
			}, policy.PodDisruptionBudgets(ns).Delete)
		},
	}
}

// allOf runs steps side by side and returns the first error, which cancels the others.
func allOf(ctx context.Context, steps ...func(context.Context) error) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, step := range steps {
		g.Go(func() error { return step(ctx) })
	}
	return g.Wait()
}

// sweep deletes the objects of one kind that carry the proxy's UID label: those the garbage collector would
// remove (owned by the Deployment) and those a crashed Create left without their owner. Secrets are not
// swept: list on Secrets would let the credentials read every Secret in the namespace, so the backend's RBAC
// does not grant it, and the proxy's Secret is taken by its name (deleteOwnSecret).
//
// An object with finalizers outlives its delete until their controllers remove them (a LoadBalancer Service
// until the cloud has released its load balancer): sweep waits for such an object to be gone, so that a
// replacement of the same name does not meet it. The others are gone when the delete answers.
func sweep(ctx context.Context, id backend.ProviderID, uid, kind string, lw listWatch,
	del func(context.Context, string, metav1.DeleteOptions) error,
) error {
	object := objectName(kind, id)
	l, err := lw.list(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{backend.LabelUID: uid}).String()})
	if err != nil {
		return classify(object, err)
	}
	return meta.EachListItem(l, func(o runtime.Object) error {
		m, err := meta.Accessor(o)
		if err != nil {
			return err
		}
		name := m.GetName()
		// The UID precondition: an object made again under the name since the list is not this proxy's.
		uid := m.GetUID()
		if err := del(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
			return classify(object, err)
		}
		if len(m.GetFinalizers()) == 0 {
			return nil
		}
		return waitGone(ctx, object, name, lw)
	})
}

// listWatch lists and watches one kind in one namespace.
type listWatch struct {
	list  func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watch func(context.Context, metav1.ListOptions) (watch.Interface, error)
}

// waitNoneLeft follows the objects of lw that opts selects until none of them counts any more: each is
// deleted, or counts says it no longer matters (a pod marked for deletion no longer serves). Every wait of
// Delete is one of these.
func waitNoneLeft(ctx context.Context, object string, lw listWatch, opts metav1.ListOptions, counts func(metav1.Object) bool) error {
	left := map[string]bool{}
	note := func(t watch.EventType, obj runtime.Object) {
		m, err := meta.Accessor(obj)
		switch {
		case err != nil:
		case t == watch.Deleted || !counts(m):
			delete(left, m.GetName())
		default:
			left[m.GetName()] = true
		}
	}
	return follow(ctx, stream{
		object: object,
		list: func(ctx context.Context) (string, bool, error) {
			l, err := lw.list(ctx, opts)
			if err != nil {
				return "", false, err
			}
			lm, err := meta.ListAccessor(l)
			if err != nil {
				return "", false, err
			}
			clear(left)
			err = meta.EachListItem(l, func(o runtime.Object) error {
				note(watch.Added, o)
				return nil
			})
			return lm.GetResourceVersion(), len(left) == 0, err
		},
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			o := opts
			o.ResourceVersion, o.AllowWatchBookmarks = rv, true
			return lw.watch(ctx, o)
		},
		check: func(t watch.EventType, obj runtime.Object) (bool, error) {
			note(t, obj)
			return len(left) == 0, nil
		},
	})
}

// waitGone waits until the object of lw named name is gone.
func waitGone(ctx context.Context, object, name string, lw listWatch) error {
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	return waitNoneLeft(ctx, object, lw, opts, func(m metav1.Object) bool { return m.GetName() == name })
}

// waitPodsStopping waits until no pod of the proxy (selected by its Deployment's selector) serves: each is
// terminating or gone.
func waitPodsStopping(ctx context.Context, c *client, id backend.ProviderID, selector map[string]string) error {
	pods := c.cs.CoreV1().Pods(id.Scope)
	lw := listWatch{
		list:  func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) },
		watch: pods.Watch,
	}
	opts := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(selector).String()}
	return waitNoneLeft(ctx, objectName("Deployment", id), lw, opts, func(m metav1.Object) bool { return m.GetDeletionTimestamp() == nil })
}

// deleteReplicaSets deletes the Deployment's ReplicaSets, which its deletion leaves to the garbage collector,
// so that none remains when Delete returns without waiting on the collector (a ReplicaSet made again by the
// Deployment's controller before the Deployment went is found by the list, which comes after). Credentials
// without list or delete on ReplicaSets fail here, naming the verb and the Role that grants it: Delete could
// not keep its promise that nothing of the proxy is left, and a missing verb of the Role is not silently
// taken for a slower way.
func deleteReplicaSets(ctx context.Context, c *client, id backend.ProviderID, selector map[string]string) error {
	object := objectName("ReplicaSet of Deployment", id)
	sets := c.cs.AppsV1().ReplicaSets(id.Scope)
	opts := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(selector).String()}
	l, err := sets.List(ctx, opts)
	if err != nil {
		return classify(object, err)
	}
	lingering := false
	for _, rs := range l.Items {
		// Background: its pods, all terminating by now, are the collector's.
		background := metav1.DeletePropagationBackground
		err := sets.Delete(ctx, rs.Name, metav1.DeleteOptions{PropagationPolicy: &background, Preconditions: &metav1.Preconditions{UID: &rs.UID}})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return classify(object, err)
		case len(rs.Finalizers) > 0:
			lingering = true
		}
	}
	if !lingering {
		return nil
	}
	lw := listWatch{
		list:  func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return sets.List(ctx, o) },
		watch: sets.Watch,
	}
	return waitNoneLeft(ctx, object, lw, opts, func(metav1.Object) bool { return true })
}

// scaleToZero sets the Deployment's replicas to zero: its ReplicaSet's controller then marks every pod for
// deletion at once, which is quicker than the garbage collector's way there after the Deployment is deleted.
// An update, not a patch, so that the credentials need no verb beyond the documented ones; a conflict with a
// controller's write is retried on a fresh read. A Deployment gone or made again by someone else meanwhile
// is left to the steps after.
func scaleToZero(ctx context.Context, c *client, id backend.ProviderID, d *appsv1.Deployment) error {
	deployments := c.cs.AppsV1().Deployments(id.Scope)
	uid := d.UID
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if d.UID != uid || (d.Spec.Replicas != nil && *d.Spec.Replicas == 0) {
			return nil
		}
		d.Spec.Replicas = ptr.To(int32(0))
		_, err := deployments.Update(ctx, d, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			fresh, getErr := deployments.Get(ctx, id.Name, metav1.GetOptions{})
			if getErr != nil {
				return getErr
			}
			d = fresh
		}
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return classify(objectName("Deployment", id), err)
}

// deleteOwnSecret deletes the proxy's Secret, which has the proxy's name, when it carries the proxy's UID.
// A Secret of that name that belongs to anyone else stays.
func deleteOwnSecret(ctx context.Context, c *client, id backend.ProviderID, uid string) error {
	object := objectName("Secret", id)
	secrets := c.cs.CoreV1().Secrets(id.Scope)
	s, err := secrets.Get(ctx, id.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return classify(object, err)
	case s.Labels[backend.LabelUID] != uid:
		return nil
	}
	// The UID precondition: a Secret made again under the name since the read is not this proxy's.
	err = secrets.Delete(ctx, id.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return classify(object, err)
	}
	return nil
}
