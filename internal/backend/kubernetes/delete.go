package kubernetes

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Delete removes the Deployment with foreground propagation, so the garbage collector removes its ReplicaSets,
// pods, ConfigMap, Secret, Service and NetworkPolicy before the Deployment itself goes, and returns once the
// Deployment is gone. Objects a crashed Create made before it could set their owner are removed by their UID
// label afterwards. A proxy that does not exist is not an error.
func (b *Backend) Delete(ctx context.Context, id backend.ProviderID) error {
	c, err := b.checkID(id)
	if err != nil {
		return err
	}
	object := objectName("Deployment", id)
	d, err := c.cs.AppsV1().Deployments(id.Scope).Get(ctx, id.Name, metav1.GetOptions{})
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
	foreground := metav1.DeletePropagationForeground
	err = c.cs.AppsV1().Deployments(id.Scope).Delete(ctx, id.Name, metav1.DeleteOptions{
		PropagationPolicy: &foreground,
		// The UID precondition keeps a Deployment made again under the same name by someone else safe.
		Preconditions: &metav1.Preconditions{UID: &d.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return classify(object, err)
	}
	if err := waitGone(ctx, c, id); err != nil {
		return err
	}
	return sweep(ctx, c, id, uid)
}

// sweep deletes what still carries the proxy's UID label: with the garbage collector at work the lists are
// empty, and this is one list per kind. The Secret is the exception, taken by its name: list on Secrets
// would let the credentials read every Secret in the namespace, so the backend's RBAC does not grant it.
func sweep(ctx context.Context, c *client, id backend.ProviderID, uid string) error {
	opts := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{backend.LabelUID: uid}).String()}
	ns := id.Scope
	core, netv1 := c.cs.CoreV1(), c.cs.NetworkingV1()
	del := func(kind, name string, f func(context.Context, string, metav1.DeleteOptions) error) error {
		if err := f(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return classify(objectName(kind, id), err)
		}
		return nil
	}
	cms, err := core.ConfigMaps(ns).List(ctx, opts)
	if err != nil {
		return classify(objectName("ConfigMap", id), err)
	}
	for _, o := range cms.Items {
		if err := del("ConfigMap", o.Name, core.ConfigMaps(ns).Delete); err != nil {
			return err
		}
	}
	if err := deleteOwnSecret(ctx, c, id, uid); err != nil {
		return err
	}
	svcs, err := core.Services(ns).List(ctx, opts)
	if err != nil {
		return classify(objectName("Service", id), err)
	}
	for _, o := range svcs.Items {
		if err := del("Service", o.Name, core.Services(ns).Delete); err != nil {
			return err
		}
	}
	nps, err := netv1.NetworkPolicies(ns).List(ctx, opts)
	if err != nil {
		return classify(objectName("NetworkPolicy", id), err)
	}
	for _, o := range nps.Items {
		if err := del("NetworkPolicy", o.Name, netv1.NetworkPolicies(ns).Delete); err != nil {
			return err
		}
	}
	return nil
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
