package kubernetes

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"k8s.io/client-go/kubernetes"
)

// Create makes the proxy's objects, adopting any that a crashed earlier attempt made, and waits until the
// Deployment is Available (and, for a LoadBalancer Service, has an ingress address).
//
// The ConfigMap and Secret come first, so the first pod finds its configuration; the Deployment next; then
// the others, each owned by the Deployment. The ConfigMap and Secret get their owner reference once the
// Deployment has a UID.
func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Instance, error) {
	id := backend.ProviderID{Backend: Kind, Target: spec.Placement.Target, Scope: spec.Placement.Scope, Name: spec.Name}
	if spec.Placement.Backend != Kind || id.Scope == "" {
		return backend.Instance{}, backend.Permanent(id.String(), "a kubernetes proxy needs a kubernetes placement with a namespace")
	}
	if err := ctx.Err(); err != nil {
		return backend.Instance{}, classify(id.String(), err)
	}
	c, err := b.client(id.Target)
	if err != nil {
		return backend.Instance{}, err
	}
	inst, err := b.create(ctx, c, spec, id)
	if err != nil {
		err = explainForbidden(ctx, c, id.Scope, err)
	}
	return inst, err
}

func (b *Backend) create(ctx context.Context, c *client, spec backend.Spec, id backend.ProviderID) (backend.Instance, error) {
	o, err := b.render(spec, id)
	if err != nil {
		return backend.Instance{}, err
	}
	ns := id.Scope
	cs := c.cs
	cm, secret, err := adoptSettings(ctx, cs, spec, id, o)
	if err != nil {
		return backend.Instance{}, err
	}
	d, err := adopt(ctx, "Deployment", id, backend.OwnershipOfSpec(spec), o.deployment,
		func(ctx context.Context, x *appsv1.Deployment) (*appsv1.Deployment, error) {
			return cs.AppsV1().Deployments(ns).Create(ctx, x, metav1.CreateOptions{})
		},
		func(ctx context.Context) (*appsv1.Deployment, error) {
			return cs.AppsV1().Deployments(ns).Get(ctx, spec.Name, metav1.GetOptions{})
		})
	if err != nil {
		if !backend.Retryable(err) {
			// Refused for good (a Deployment of that name that is not this proxy's, an admission refusal): the
			// ConfigMap and Secret made for it would belong to no proxy, unlisted, and would block the next
			// create of the name. They are given back; a retryable failure keeps them for the retry to adopt.
			giveBack(ctx, cs, ns, cm, secret)
		}
		return backend.Instance{}, err
	}
	// From here on the proxy exists: every error comes back with its id so the caller records it.
	made := backend.Instance{ID: id, Name: spec.Name, UID: spec.UID, Owner: spec.Owner, State: backend.StatePending, Placement: spec.Placement}

	svc, ready, err := adoptAlongsideRollout(ctx, c, spec, id, o, cm, secret, d)
	if err != nil {
		return made, err
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		if svc, err = waitLoadBalancer(ctx, c, id); err != nil {
			return made, err
		}
	}
	// What Get would read, but for the pods: the Deployment as it became ready, the Service as made (or as its
	// load balancer left it), and the settings as written.
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(selectorLabelsOf(ready)).String()})
	if err != nil {
		return made, classify(objectName("Deployment", id), err)
	}
	return b.instance(ctx, c, id, ready, svc, cm, pods.Items)
}

// adoptSettings makes the proxy's ConfigMap and, when it has one, its Secret, side by side, adopting those a
// crashed earlier attempt made.
func adoptSettings(ctx context.Context, cs kubernetes.Interface, spec backend.Spec, id backend.ProviderID, o objects) (cm *corev1.ConfigMap, secret *corev1.Secret, err error) {
	ns := id.Scope
	err = allOf(ctx,
		func(ctx context.Context) (err error) {
			cm, err = adopt(ctx, "ConfigMap", id, backend.OwnershipOfSpec(spec), o.configMap,
				func(ctx context.Context, x *corev1.ConfigMap) (*corev1.ConfigMap, error) {
					return cs.CoreV1().ConfigMaps(ns).Create(ctx, x, metav1.CreateOptions{})
				},
				func(ctx context.Context) (*corev1.ConfigMap, error) {
					return cs.CoreV1().ConfigMaps(ns).Get(ctx, spec.Name, metav1.GetOptions{})
				})
			return err
		},
		func(ctx context.Context) (err error) {
			if o.secret == nil {
				return nil
			}
			secret, err = adopt(ctx, "Secret", id, backend.OwnershipOfSpec(spec), o.secret,
				func(ctx context.Context, x *corev1.Secret) (*corev1.Secret, error) {
					return cs.CoreV1().Secrets(ns).Create(ctx, x, metav1.CreateOptions{})
				},
				func(ctx context.Context) (*corev1.Secret, error) {
					return cs.CoreV1().Secrets(ns).Get(ctx, spec.Name, metav1.GetOptions{})
				})
			return err
		})
	return cm, secret, err
}

// adoptAlongsideRollout does what goes side by side with the Deployment's rollout, which takes seconds of the
// pods' own: the owner references on the ConfigMap and Secret, the Service, the NetworkPolicy and the
// PodDisruptionBudget. Each is adopted, as the Deployment was, when a crashed attempt made it already. It
// returns the Service as made and the Deployment as it became ready.
func adoptAlongsideRollout(ctx context.Context, c *client, spec backend.Spec, id backend.ProviderID, o objects,
	cm *corev1.ConfigMap, secret *corev1.Secret, d *appsv1.Deployment,
) (svc *corev1.Service, ready *appsv1.Deployment, err error) {
	ns := id.Scope
	cs := c.cs
	svc, ready = o.service, d
	err = allOf(ctx,
		func(ctx context.Context) error {
			if ownedByDeployment(cm.ObjectMeta, d) {
				return nil
			}
			ownedBy(&cm.ObjectMeta, d)
			_, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
			return classify(objectName("ConfigMap", id), err)
		},
		func(ctx context.Context) error {
			if secret == nil || ownedByDeployment(secret.ObjectMeta, d) {
				return nil
			}
			ownedBy(&secret.ObjectMeta, d)
			_, err := cs.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{})
			return classify(objectName("Secret", id), err)
		},
		func(ctx context.Context) (err error) {
			ownedBy(&o.service.ObjectMeta, d)
			svc, err = adopt(ctx, "Service", id, backend.OwnershipOfSpec(spec), o.service,
				func(ctx context.Context, x *corev1.Service) (*corev1.Service, error) {
					return cs.CoreV1().Services(ns).Create(ctx, x, metav1.CreateOptions{})
				},
				func(ctx context.Context) (*corev1.Service, error) {
					return cs.CoreV1().Services(ns).Get(ctx, spec.Name, metav1.GetOptions{})
				})
			return err
		},
		func(ctx context.Context) error {
			if o.networkPolicy == nil {
				return nil
			}
			ownedBy(&o.networkPolicy.ObjectMeta, d)
			_, err := adopt(ctx, "NetworkPolicy", id, backend.OwnershipOfSpec(spec), o.networkPolicy,
				func(ctx context.Context, x *networkingv1.NetworkPolicy) (*networkingv1.NetworkPolicy, error) {
					return cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, x, metav1.CreateOptions{})
				},
				func(ctx context.Context) (*networkingv1.NetworkPolicy, error) {
					return cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, spec.Name, metav1.GetOptions{})
				})
			return err
		},
		func(ctx context.Context) error {
			ownedBy(&o.disruption.ObjectMeta, d)
			_, err := adopt(ctx, "PodDisruptionBudget", id, backend.OwnershipOfSpec(spec), o.disruption,
				func(ctx context.Context, x *policyv1.PodDisruptionBudget) (*policyv1.PodDisruptionBudget, error) {
					return cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, x, metav1.CreateOptions{})
				},
				func(ctx context.Context) (*policyv1.PodDisruptionBudget, error) {
					return cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, spec.Name, metav1.GetOptions{})
				})
			return err
		},
		func(ctx context.Context) (err error) {
			ready, err = waitRollout(ctx, c, id)
			return err
		})
	return svc, ready, err
}

// render builds the proxy's objects from spec, or a Permanent error naming what is wrong with it.
func (b *Backend) render(spec backend.Spec, id backend.ProviderID) (objects, error) {
	k, err := guest.RenderPod(spec.Proxy, proxyconf.RenderOptions{})
	if err != nil {
		return objects{}, backend.NewError(backend.ClassPermanent, objectName("proxy", id), err)
	}
	opts, err := backend.OptionsOf[Options](spec.Placement)
	if err != nil {
		return objects{}, err
	}
	p := withDefaults(opts, b.cfg.image(b.clusters[id.Target]))
	o, err := buildObjects(spec, id.Scope, p, k)
	if err != nil {
		return objects{}, backend.NewError(backend.ClassPermanent, objectName("Deployment", id), err)
	}
	return o, nil
}

// adopt creates want, or, when an object of that name exists already, returns it if it carries the proxy's
// owner and UID: a retried Create finds what the crashed one made. One that belongs to anyone else is refused.
func adopt[T metav1.Object](ctx context.Context, kind string, id backend.ProviderID, own backend.Ownership, want T,
	create func(context.Context, T) (T, error), get func(context.Context) (T, error),
) (T, error) {
	object := objectName(kind, id)
	got, err := create(ctx, want)
	if err == nil {
		return got, nil
	}
	var zero T
	if !apierrors.IsAlreadyExists(err) {
		return zero, classifyCreate(object, id, err)
	}
	got, err = get(ctx)
	if err != nil {
		return zero, classify(object, err)
	}
	if got.GetLabels()[backend.LabelUID] == "" {
		return zero, backend.Permanent(object, "exists already and was not made by this provider; choose another name or remove it")
	}
	// The owner too, not the UID alone: a UID is on every label and no secret.
	if err := own.Check(object, got.GetLabels()[backend.LabelOwner], got.GetLabels()[backend.LabelUID]); err != nil {
		return zero, err
	}
	if got.GetDeletionTimestamp() != nil {
		return zero, backend.Transient(object, "is being deleted; it can be made again once it is gone")
	}
	return got, nil
}

// giveBack deletes the ConfigMap and Secret a refused create made, each only as the object it made (its
// UID as precondition), best effort under the bounded clean-up context: a step that fails is logged as a
// warning, and what is left carries the proxy's labels, so the sweep of a later Delete of the name finds it.
func giveBack(ctx context.Context, cs kubernetes.Interface, ns string, cm *corev1.ConfigMap, secret *corev1.Secret) {
	ctx, cancel := backend.CleanupContext(ctx)
	defer cancel()
	if cm != nil {
		err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cm.UID}})
		backend.BestEffort(ctx, Kind, "delete configmap "+ns+"/"+cm.Name, classify("configmap "+ns+"/"+cm.Name, err))
	}
	if secret != nil {
		err := cs.CoreV1().Secrets(ns).Delete(ctx, secret.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &secret.UID}})
		backend.BestEffort(ctx, Kind, "delete secret "+ns+"/"+secret.Name, classify("secret "+ns+"/"+secret.Name, err))
	}
}

func ownedByDeployment(meta metav1.ObjectMeta, d *appsv1.Deployment) bool {
	for _, r := range meta.OwnerReferences {
		if r.UID == d.UID {
			return true
		}
	}
	return false
}
