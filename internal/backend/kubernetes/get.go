package kubernetes

import (
	"context"
	"encoding/json"
	"sort"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Get reads the proxy back: its state from the Deployment, its addresses from the Service, its settings from
// the ConfigMap and its egress address from its pods' nodes (egress.go). The four reads go out side by side,
// so a refresh waits for one round trip, not four. Only a missing Deployment is NotFound; a missing Service or
// ConfigMap leaves those fields empty (the next apply recreates the proxy if they matter).
func (b *Backend) Get(ctx context.Context, id backend.ProviderID) (backend.Instance, error) {
	c, err := b.checkID(ctx, id)
	if err != nil {
		return backend.Instance{}, err
	}
	cs, ns := c.cs, id.Scope
	var (
		d                            *appsv1.Deployment
		svc                          *corev1.Service
		cm                           *corev1.ConfigMap
		pods                         *corev1.PodList
		dErr, svcErr, cmErr, podsErr error
		wg                           sync.WaitGroup
	)
	wg.Go(func() { d, dErr = cs.AppsV1().Deployments(ns).Get(ctx, id.Name, metav1.GetOptions{}) })
	wg.Go(func() { svc, svcErr = cs.CoreV1().Services(ns).Get(ctx, id.Name, metav1.GetOptions{}) })
	wg.Go(func() { cm, cmErr = cs.CoreV1().ConfigMaps(ns).Get(ctx, id.Name, metav1.GetOptions{}) })
	// By the name label, as the Deployment's selector is not known yet; podsOf keeps the Deployment's own.
	wg.Go(func() {
		pods, podsErr = cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{backend.LabelName: id.Name}).String()})
	})
	wg.Wait()
	// In this order, so that a proxy that is gone is NotFound whatever else failed.
	if dErr != nil {
		return backend.Instance{}, classify(objectName("Deployment", id), dErr)
	}
	if d.Labels[backend.LabelManagedBy] != backend.ManagedByValue {
		return backend.Instance{}, backend.Permanent(objectName("Deployment", id), "exists but was not made by this provider")
	}
	if err := backend.OwnershipOf(ctx).Reading().Check(objectName("Deployment", id), d.Labels[backend.LabelOwner], d.Labels[backend.LabelUID]); err != nil {
		return backend.Instance{}, err
	}
	switch {
	case apierrors.IsNotFound(svcErr):
		svc = nil
	case svcErr != nil:
		return backend.Instance{}, classify(objectName("Service", id), svcErr)
	}
	switch {
	case apierrors.IsNotFound(cmErr):
		cm = nil
	case cmErr != nil:
		return backend.Instance{}, classify(objectName("ConfigMap", id), cmErr)
	}
	if podsErr != nil {
		return backend.Instance{}, classify(objectName("Deployment", id), podsErr)
	}
	return b.instance(ctx, c, id, d, svc, cm, podsOf(d, pods.Items))
}

// instance maps what was read onto the contract: the Deployment, its Service and ConfigMap (nil when
// missing) and the Deployment's pods.
func (b *Backend) instance(ctx context.Context, c *client, id backend.ProviderID, d *appsv1.Deployment, svc *corev1.Service, cm *corev1.ConfigMap, pods []corev1.Pod) (backend.Instance, error) {
	inst := instanceOf(id.Target, d, svc)
	nodes, err := c.nodeAddresses(ctx, id.Target, pods)
	if err != nil {
		return backend.Instance{}, err
	}
	inst.EgressAddress = egressAddressOf(pods, nodes)
	if opts, _ := inst.Placement.Options.(*Options); opts != nil && opts.Replicas > 1 {
		inst.Members = membersOf(pods, nodes)
		if inst.State == backend.StateRunning {
			inst.State = degradedState(d, inst.Members)
		}
	}
	inst.Proxy = proxyOf(cm)
	if inst.Proxy != nil && inst.Port == 0 {
		inst.Port = inst.Proxy.Port
	}
	return inst, nil
}

// membersOf are a proxy's serving pods, scheduled or not yet, by name: each with its node as its scope, its own
// address, the node's public address as its egress address, and whether it is ready, which is what puts it
// behind the Service.
func membersOf(pods []corev1.Pod, nodes map[string][]corev1.NodeAddress) []backend.Member {
	var out []backend.Member
	for _, p := range pods {
		if !serving(p) {
			continue
		}
		m := backend.Member{Name: p.Name, Scope: p.Spec.NodeName, InternalAddress: p.Status.PodIP, EgressAddress: publicAddress(nodes[p.Spec.NodeName])}
		m.Healthy, m.Reason = podReadiness(p)
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// podReadiness says whether p is ready, and if not why, in the words kubectl shows: a container's waiting
// reason (ImagePullBackOff, CrashLoopBackOff), an unscheduled pod, or the Ready condition's message.
func podReadiness(p corev1.Pod) (bool, string) {
	if p.Spec.NodeName == "" {
		return false, "not scheduled on a node yet"
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Waiting != nil && c.State.Waiting.Reason != "" {
			return false, "container " + c.Name + ": " + c.State.Waiting.Reason
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			if c.Status == corev1.ConditionTrue {
				return true, ""
			}
			if c.Message != "" {
				return false, "not ready: " + c.Message
			}
		}
	}
	return false, "not ready"
}

// degradedState is a running proxy's state by its members (backend.DegradedState), but a rollout in
// progress counts the pods it surges in only once the Deployment wants them: while fewer than the wanted
// replicas are available the proxy is Degraded even if every pod that exists is ready (one not yet made).
func degradedState(d *appsv1.Deployment, members []backend.Member) backend.State {
	state := backend.DegradedState(members)
	if state == backend.StateRunning && d.Spec.Replicas != nil && d.Status.AvailableReplicas < *d.Spec.Replicas {
		return backend.StateDegraded
	}
	if state == backend.StateDegraded && d.Spec.Replicas != nil && d.Status.AvailableReplicas >= *d.Spec.Replicas {
		// A surge pod of a rollout not yet ready, beside as many ready pods as wanted: nothing is lost.
		return backend.StateRunning
	}
	return state
}

// podsOf keeps the pods d selects: a proxy destroyed and made again under its name may leave pods of the old
// one terminating, with the same name label and another UID.
func podsOf(d *appsv1.Deployment, pods []corev1.Pod) []corev1.Pod {
	sel := labels.SelectorFromSet(selectorLabelsOf(d))
	out := make([]corev1.Pod, 0, len(pods))
	for _, p := range pods {
		if sel.Matches(labels.Set(p.Labels)) {
			out = append(out, p)
		}
	}
	return out
}

func selectorLabelsOf(d *appsv1.Deployment) map[string]string {
	if d.Spec.Selector != nil {
		return d.Spec.Selector.MatchLabels
	}
	return map[string]string{backend.LabelName: d.Name}
}

// instanceOf maps the objects onto the contract. svc may be nil. The egress address is not among them: it is
// read from the pods' nodes, which only Get reads.
func instanceOf(cluster string, d *appsv1.Deployment, svc *corev1.Service) backend.Instance {
	id := backend.ProviderID{Backend: Kind, Target: cluster, Scope: d.Namespace, Name: d.Name}
	opts := placementOf(d)
	inst := backend.Instance{
		ID: id, Name: d.Name, UID: d.Labels[backend.LabelUID], Owner: d.Labels[backend.LabelOwner],
		Labels: backend.UserLabels(d.Labels), State: stateOf(d), CreatedAt: d.CreationTimestamp.Time,
		Placement: backend.Placement{Backend: Kind, Target: cluster, Scope: d.Namespace, Options: opts},
		// The ConfigMap and a rollout change the rules of any proxy this backend made.
		Reconfigurable: true,
	}
	if svc != nil {
		if svc.Spec.ClusterIP != corev1.ClusterIPNone {
			inst.InternalAddress = svc.Spec.ClusterIP
		}
		// Without the cluster's domain (cluster.local on most, not all): pods resolve <service>.<namespace>.svc
		// through the search path their resolv.conf carries.
		inst.InternalName = svc.Name + "." + svc.Namespace + ".svc"
		if len(svc.Spec.Ports) > 0 {
			inst.Port = int(svc.Spec.Ports[0].Port)
		}
		opts.ServiceType = string(svc.Spec.Type)
		inst.IngressAddress = loadBalancerAddress(svc)
	}
	return inst
}

// loadBalancerAddress is where clients outside the cluster connect to a LoadBalancer Service: its first
// ingress IP, or host name where the load balancer has no fixed IP. A NodePort Service has none: clients use
// any node's address with the node port, neither of which is the proxy's own. The load balancer receives
// connections and sends none on the proxy's behalf, so this is never the egress address.
func loadBalancerAddress(svc *corev1.Service) string {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return ""
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP != "" {
			return ing.IP
		}
		if ing.Hostname != "" {
			return ing.Hostname
		}
	}
	return ""
}

// stateOf maps the Deployment's status onto the contract's states.
func stateOf(d *appsv1.Deployment) backend.State {
	if d.DeletionTimestamp != nil {
		return backend.StateDeleting
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return backend.StateFailed
		}
		if c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue {
			return backend.StateFailed
		}
	}
	if d.Spec.Replicas != nil && *d.Spec.Replicas == 0 {
		return backend.StateStopped
	}
	if conditionTrue(d, appsv1.DeploymentAvailable) && d.Status.AvailableReplicas > 0 {
		return backend.StateRunning
	}
	return backend.StatePending
}

func placementOf(d *appsv1.Deployment) *Options {
	p := &Options{Replicas: DefaultReplicas, ServiceType: DefaultServiceType}
	if d.Spec.Replicas != nil {
		p.Replicas = int(*d.Spec.Replicas)
	}
	var a placementAnnotation
	if json.Unmarshal([]byte(d.Annotations[annotationPlacement]), &a) == nil {
		p.Requests, p.Limits, p.NetworkPolicy = a.Requests, a.Limits, a.NetworkPolicy
	}
	spec := d.Spec.Template.Spec
	for _, c := range spec.Containers {
		if c.Name == containerName {
			p.Image = c.Image
		}
	}
	if len(spec.NodeSelector) > 0 {
		p.NodeSelector = spec.NodeSelector
	}
	for _, t := range spec.Tolerations {
		p.Tolerations = append(p.Tolerations, Toleration{Key: t.Key, Operator: string(t.Operator), Value: t.Value, Effect: string(t.Effect)})
	}
	return p
}
