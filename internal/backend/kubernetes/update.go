package kubernetes

import (
	"context"
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Update changes what changes in place without touching the proxy's rules: the labels on every object and the
// Deployment's replica count; a proxy made without a PodDisruptionBudget gets one. It waits for the Deployment to be Available again when the count changed.
func (b *Backend) Update(ctx context.Context, id backend.ProviderID, spec backend.Spec) (backend.Instance, error) {
	c, err := b.checkID(ctx, id)
	if err != nil {
		return backend.Instance{}, err
	}
	opts, err := backend.OptionsOf[Options](spec.Placement)
	if err != nil {
		return backend.Instance{}, err
	}
	cs, ns := c.cs, id.Scope
	// The labels written below carry spec's owner: every object must be its already, or Update would hand
	// another owner's proxy to this one.
	if spec.Owner != "" {
		o := backend.OwnershipOf(ctx)
		o.Owner = spec.Owner
		ctx = backend.WithOwnership(ctx, o)
	}
	want := backend.ManagedLabels(spec)
	replicasChanged := false
	var updated *appsv1.Deployment
	err = updateObject(ctx, objectName("Deployment", id), spec.UID,
		func(ctx context.Context) (*appsv1.Deployment, error) {
			return cs.AppsV1().Deployments(ns).Get(ctx, id.Name, metav1.GetOptions{})
		},
		func(ctx context.Context, d *appsv1.Deployment) (*appsv1.Deployment, error) {
			d.Labels = copyMap(want)
			if opts != nil && opts.Replicas > 0 {
				r := int32(opts.Replicas)
				if d.Spec.Replicas == nil || *d.Spec.Replicas != r {
					d.Spec.Replicas = &r
					replicasChanged = true
				}
			}
			updated, err = cs.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
			return updated, err
		})
	if err != nil {
		return backend.Instance{}, err
	}
	if err := relabel(ctx, c, id, spec.UID, want); err != nil {
		return backend.Instance{}, err
	}
	if err := ensureDisruptionBudget(ctx, c, id, spec, updated); err != nil {
		return backend.Instance{}, err
	}
	if replicasChanged {
		if _, err := waitRollout(ctx, c, id); err != nil {
			return backend.Instance{}, err
		}
	}
	return b.Get(ctx, id)
}

// relabel sets the labels of the objects beside the Deployment; missing ones are skipped.
func relabel(ctx context.Context, c *client, id backend.ProviderID, uid string, want map[string]string) error {
	cs, ns := c.cs, id.Scope
	steps := []func() error{
		func() error {
			return updateObject(ctx, objectName("ConfigMap", id), uid,
				func(ctx context.Context) (*corev1.ConfigMap, error) {
					return cs.CoreV1().ConfigMaps(ns).Get(ctx, id.Name, metav1.GetOptions{})
				},
				func(ctx context.Context, o *corev1.ConfigMap) (*corev1.ConfigMap, error) {
					o.Labels = copyMap(want)
					if v, ok := o.Annotations[annotationSettings]; ok {
						o.Annotations[annotationSettings] = withoutLegacyKey(v)
					}
					return cs.CoreV1().ConfigMaps(ns).Update(ctx, o, metav1.UpdateOptions{})
				})
		},
		func() error {
			return updateObject(ctx, objectName("Secret", id), uid,
				func(ctx context.Context) (*corev1.Secret, error) {
					return cs.CoreV1().Secrets(ns).Get(ctx, id.Name, metav1.GetOptions{})
				},
				func(ctx context.Context, o *corev1.Secret) (*corev1.Secret, error) {
					o.Labels = copyMap(want)
					return cs.CoreV1().Secrets(ns).Update(ctx, o, metav1.UpdateOptions{})
				})
		},
		func() error {
			return updateObject(ctx, objectName("Service", id), uid,
				func(ctx context.Context) (*corev1.Service, error) {
					return cs.CoreV1().Services(ns).Get(ctx, id.Name, metav1.GetOptions{})
				},
				func(ctx context.Context, o *corev1.Service) (*corev1.Service, error) {
					o.Labels = copyMap(want)
					return cs.CoreV1().Services(ns).Update(ctx, o, metav1.UpdateOptions{})
				})
		},
	}
	for _, step := range steps {
		if err := step(); err != nil && !backend.IsNotFound(err) {
			return err
		}
	}
	np, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, id.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return classify(objectName("NetworkPolicy", id), err)
	}
	np.Labels = copyMap(want)
	_, err = cs.NetworkingV1().NetworkPolicies(ns).Update(ctx, np, metav1.UpdateOptions{})
	return classify(objectName("NetworkPolicy", id), err)
}

// ensureDisruptionBudget gives a proxy made before the provider made PodDisruptionBudgets its budget, with the
// labels of the other objects, on the first update the user asks for: never on a read or a plan, so that an
// upgrade of the provider alone writes nothing.
func ensureDisruptionBudget(ctx context.Context, c *client, id backend.ProviderID, spec backend.Spec, d *appsv1.Deployment) error {
	cs, ns := c.cs, id.Scope
	object := objectName("PodDisruptionBudget", id)
	pdb, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, id.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		want := disruptionBudget(metav1.ObjectMeta{Name: id.Name, Namespace: ns, Labels: backend.ManagedLabels(spec)}, spec)
		ownedBy(&want.ObjectMeta, d)
		_, err = cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, want, metav1.CreateOptions{})
		return classify(object, err)
	case err != nil:
		return classify(object, err)
	}
	if pdb.Labels[backend.LabelUID] != spec.UID {
		return &backend.Error{Class: backend.ClassPermanent, Object: object,
			Err:    fmt.Errorf("carries uid %q, not this proxy's %q", pdb.Labels[backend.LabelUID], spec.UID),
			Advice: "Delete or rename that PodDisruptionBudget if it is no proxy's, then apply again; this proxy leaves it alone."}
	}
	if maps.Equal(pdb.Labels, backend.ManagedLabels(spec)) {
		return nil
	}
	pdb.Labels = copyMap(backend.ManagedLabels(spec))
	_, err = cs.PolicyV1().PodDisruptionBudgets(ns).Update(ctx, pdb, metav1.UpdateOptions{})
	return classify(object, err)
}

// updateObject reads, changes and writes one object, again from a fresh read when another writer got there
// first (409 Conflict). The object must carry uid, and the owner and UID the context expects.
func updateObject[T metav1.Object](ctx context.Context, object, uid string,
	get func(context.Context) (T, error), update func(context.Context, T) (T, error),
) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := get(ctx)
		if err != nil {
			return err
		}
		want := backend.OwnershipOf(ctx)
		if uid != "" {
			want.UID = uid
		}
		if err := want.Check(object, o.GetLabels()[backend.LabelOwner], o.GetLabels()[backend.LabelUID]); err != nil {
			return err
		}
		_, err = update(ctx, o)
		return err
	})
	return classify(object, err)
}
