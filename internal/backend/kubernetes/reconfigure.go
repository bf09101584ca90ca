package kubernetes

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Reconfigure writes the proxy's new rules into its ConfigMap (and Secret), narrows or widens its
// NetworkPolicy and, for a LoadBalancer, its Service's source ranges to the new client ranges, and rolls the
// pods onto the new configuration by changing the checksum on the pod template; it returns once every pod
// runs it and the Service routes to no other. The Service, and so the proxy's address, stays. The same
// settings twice change nothing.
func (b *Backend) Reconfigure(ctx context.Context, id backend.ProviderID, settings proxyconf.Settings) (backend.Instance, error) {
	c, err := b.checkID(ctx, id)
	if err != nil {
		return backend.Instance{}, err
	}
	cs, ns := c.cs, id.Scope
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, id.Name, metav1.GetOptions{})
	if err != nil {
		return backend.Instance{}, classify(objectName("Deployment", id), err)
	}
	uid := d.Labels[backend.LabelUID]
	if d.Labels[backend.LabelManagedBy] != backend.ManagedByValue || uid == "" {
		return backend.Instance{}, backend.Permanent(objectName("Deployment", id), "was not made by this provider")
	}
	if err := backend.OwnershipOf(ctx).Check(objectName("Deployment", id), d.Labels[backend.LabelOwner], uid); err != nil {
		return backend.Instance{}, err
	}
	k, err := guest.RenderPod(settings, proxyconf.RenderOptions{})
	if err != nil {
		return backend.Instance{}, backend.NewError(backend.ClassPermanent, objectName("proxy", id), err)
	}
	sum := checksum(k)
	spec := backend.Spec{Name: id.Name, UID: uid, Owner: d.Labels[backend.LabelOwner], Labels: backend.UserLabels(d.Labels), Proxy: settings}
	labels := backend.ManagedLabels(spec)
	if err := checkMetricsPolicy(ctx, c, id, settings); err != nil {
		return backend.Instance{}, err
	}

	// Secret first, then ConfigMap: a pod started in between reads a password file its config may not use
	// yet, never a config naming a file that is missing.
	if err := b.putSecret(ctx, c, id, d, labels, k.SecretData); err != nil {
		return backend.Instance{}, err
	}
	if err := putConfig(ctx, c, id, uid, k, settings); err != nil {
		return backend.Instance{}, err
	}
	if err := admitNewClients(ctx, c, id, uid, spec, k); err != nil {
		return backend.Instance{}, err
	}
	if err := ensureDisruptionBudget(ctx, c, id, spec, d); err != nil {
		return backend.Instance{}, err
	}
	if err := rollOut(ctx, c, id, uid, k, sum); err != nil {
		return backend.Instance{}, err
	}
	if _, err := waitRollout(ctx, c, id); err != nil {
		return backend.Instance{}, err
	}
	if err := waitServed(ctx, c, id, sum); err != nil {
		return backend.Instance{}, err
	}
	return b.Get(ctx, id)
}

// putConfig writes the rendered configuration into the ConfigMap, with the settings it was rendered from.
func putConfig(ctx context.Context, c *client, id backend.ProviderID, uid string, k guest.Pod, settings proxyconf.Settings) error {
	cs, ns := c.cs, id.Scope
	return updateObject(ctx, objectName("ConfigMap", id), uid,
		func(ctx context.Context) (*corev1.ConfigMap, error) {
			return cs.CoreV1().ConfigMaps(ns).Get(ctx, id.Name, metav1.GetOptions{})
		},
		func(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
			cm.Data = k.ConfigMapData
			if cm.Annotations == nil {
				cm.Annotations = map[string]string{}
			}
			cm.Annotations[annotationSettings] = storedSettings(settings)
			return cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		})
}

// admitNewClients narrows or widens the NetworkPolicy (when the proxy has one) and the Service's source
// ranges to the new client ranges, and adds or removes the Service's metrics ports. The Service keeps its address: only the ranges it admits follow the
// settings (admitClients).
func admitNewClients(ctx context.Context, c *client, id backend.ProviderID, uid string, spec backend.Spec, k guest.Pod) error {
	cs, ns := c.cs, id.Scope
	np, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, id.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return classify(objectName("NetworkPolicy", id), err)
	default:
		np.Spec = networkPolicy(np.ObjectMeta, spec).Spec
		if _, err := cs.NetworkingV1().NetworkPolicies(ns).Update(ctx, np, metav1.UpdateOptions{}); err != nil {
			return classify(objectName("NetworkPolicy", id), err)
		}
	}
	err = updateObject(ctx, objectName("Service", id), uid,
		func(ctx context.Context) (*corev1.Service, error) {
			return cs.CoreV1().Services(ns).Get(ctx, id.Name, metav1.GetOptions{})
		},
		func(ctx context.Context, svc *corev1.Service) (*corev1.Service, error) {
			before := svc.Spec.DeepCopy()
			admitClients(&svc.Spec, spec.Proxy.AllowedClientCIDRs)
			syncServicePorts(&svc.Spec, k)
			if equality.Semantic.DeepEqual(before, &svc.Spec) {
				return svc, nil
			}
			return cs.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
		})
	if err != nil && !backend.IsNotFound(err) {
		return err
	}
	return nil
}

// rollOut moves the pods onto the configuration whose checksum is sum, by that checksum on the pod template
// (unchanged when they run it already).
func rollOut(ctx context.Context, c *client, id backend.ProviderID, uid string, k guest.Pod, sum string) error {
	cs, ns := c.cs, id.Scope
	return updateObject(ctx, objectName("Deployment", id), uid,
		func(ctx context.Context) (*appsv1.Deployment, error) {
			return cs.AppsV1().Deployments(ns).Get(ctx, id.Name, metav1.GetOptions{})
		},
		func(ctx context.Context, d *appsv1.Deployment) (*appsv1.Deployment, error) {
			if d.Spec.Template.Annotations[annotationChecksum] == sum {
				return d, nil // already rolled onto these settings
			}
			if d.Spec.Template.Annotations == nil {
				d.Spec.Template.Annotations = map[string]string{}
			}
			d.Spec.Template.Annotations[annotationChecksum] = sum
			syncAuthVolume(d, id.Name, k.SecretData != nil)
			upgradePodTemplate(&d.Spec.Template.Spec, k)
			syncMetrics(&d.Spec.Template, id.Name, k)
			// The pods roll anyway: those of a proxy made before the spread constraints get them now.
			if len(d.Spec.Template.Spec.TopologySpreadConstraints) == 0 {
				d.Spec.Template.Spec.TopologySpreadConstraints = spreadConstraints(backend.Spec{Name: id.Name, UID: uid})
			}
			return cs.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
		})
}

// putSecret makes the Secret hold data, creating it when credentials are new and deleting it when they are
// gone.
func (b *Backend) putSecret(ctx context.Context, c *client, id backend.ProviderID, d *appsv1.Deployment, labels map[string]string, data map[string][]byte) error {
	secrets := c.cs.CoreV1().Secrets(id.Scope)
	object := objectName("Secret", id)
	cur, err := secrets.Get(ctx, id.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && data == nil:
		return nil
	case apierrors.IsNotFound(err):
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: id.Name, Namespace: id.Scope, Labels: copyMap(labels)}, Type: corev1.SecretTypeOpaque, Data: data}
		ownedBy(&s.ObjectMeta, d)
		_, err := secrets.Create(ctx, s, metav1.CreateOptions{})
		return classify(object, err)
	case err != nil:
		return classify(object, err)
	case cur.Labels[backend.LabelUID] != labels[backend.LabelUID]:
		return backend.Permanent(object, "belongs to another proxy (%s=%s)", backend.LabelUID, cur.Labels[backend.LabelUID])
	case data == nil:
		// Removed only after the pods stop mounting it: the rollout below drops the volume. Deleting it now
		// would leave old pods of a stalled rollout without their file; the garbage collector takes it
		// with the Deployment either way. Emptying it is enough to revoke the credentials.
		cur.Data = map[string][]byte{guest.SecretKey: nil}
	default:
		cur.Data = data
	}
	_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{})
	return classify(object, err)
}

// syncAuthVolume adds or removes the Secret's volume and mount on the pod template.
func syncAuthVolume(d *appsv1.Deployment, name string, want bool) {
	spec := &d.Spec.Template.Spec
	vols := spec.Volumes[:0]
	for _, v := range spec.Volumes {
		if v.Name != "auth" {
			vols = append(vols, v)
		}
	}
	spec.Volumes = vols
	for i := range spec.Containers {
		c := &spec.Containers[i]
		mounts := c.VolumeMounts[:0]
		for _, m := range c.VolumeMounts {
			if m.Name != "auth" {
				mounts = append(mounts, m)
			}
		}
		c.VolumeMounts = mounts
		if want && c.Name == containerName {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "auth", MountPath: guest.SecretDir, ReadOnly: true})
		}
	}
	if want {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}})
	}
}

// checkMetricsPolicy refuses metrics on a proxy made without its NetworkPolicy (metricsNeedPolicy), before
// anything is written.
func checkMetricsPolicy(ctx context.Context, c *client, id backend.ProviderID, settings proxyconf.Settings) error {
	if settings.Metrics == nil {
		return nil
	}
	_, err := c.cs.NetworkingV1().NetworkPolicies(id.Scope).Get(ctx, id.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return metricsNeedPolicy(settings, false)
	case err != nil:
		return classify(objectName("NetworkPolicy", id), err)
	}
	return nil
}
