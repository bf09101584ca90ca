package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Annotations the backend keeps on its objects.
const (
	// annotationChecksum on the pod template is the hash of the proxy's configuration: a new configuration
	// changes the template, and the Deployment rolls its pods onto it.
	annotationChecksum = "egress-proxies.io/config-checksum"
	// annotationSettings on the ConfigMap holds the proxy settings without the password and the TLS key
	// (settings_annotation.go), so Get and an import read back what the proxy enforces.
	annotationSettings = "egress-proxies.io/settings"
	// annotationPlacement on the Deployment holds the placement settings that are not plain to read back.
	annotationPlacement = "egress-proxies.io/placement"
)

const (
	containerName = "squid"
	// progressDeadline bounds a rollout before the Deployment reports ProgressDeadlineExceeded; the wait
	// fails fast on that condition.
	progressDeadline = 300
	healthPortName   = "health"
	proxyPortName    = "proxy"
)

// objects are the API objects of one proxy, built from its Spec.
type objects struct {
	configMap     *corev1.ConfigMap
	secret        *corev1.Secret // nil without authentication
	deployment    *appsv1.Deployment
	service       *corev1.Service
	networkPolicy *networkingv1.NetworkPolicy // nil when the placement turns it off
	disruption    *policyv1.PodDisruptionBudget
}

// podLabels select the proxy's pods: they never change over the proxy's life (a Deployment's selector is
// immutable), so user labels stay off them.
func podLabels(spec backend.Spec) map[string]string {
	return map[string]string{
		backend.LabelManagedBy: backend.ManagedByValue,
		backend.LabelUID:       spec.UID,
		backend.LabelOwner:     spec.Owner,
		backend.LabelName:      spec.Name,
	}
}

func selectorLabels(spec backend.Spec) map[string]string {
	return map[string]string{backend.LabelUID: spec.UID, backend.LabelName: spec.Name}
}

// withDefaults fills the placement's zero values.
func withDefaults(p *Options, image string) Options {
	out := Options{NetworkPolicy: DefaultNetworkPolicy}
	if p != nil {
		out = *p
	}
	if out.Replicas == 0 {
		out.Replicas = DefaultReplicas
	}
	if out.Image == "" {
		out.Image = image
	}
	if out.ServiceType == "" {
		out.ServiceType = DefaultServiceType
	}
	return out
}

// checksum hashes everything the pods read from the ConfigMap and Secret.
func checksum(k guest.Pod) string {
	h := sha256.New()
	keys := make([]string, 0, len(k.ConfigMapData))
	for key := range k.ConfigMapData {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		_, _ = fmt.Fprintf(h, "cm %s %d %s\n", key, len(k.ConfigMapData[key]), k.ConfigMapData[key])
	}
	keys = keys[:0]
	for key := range k.SecretData {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		_, _ = fmt.Fprintf(h, "secret %s %d %s\n", key, len(k.SecretData[key]), k.SecretData[key])
	}
	// The sidecars' ports and commands, which no file holds; nothing without metrics, so the pods of a proxy
	// without them keep the checksum they had before metrics existed.
	if k.Metrics != nil {
		_, _ = fmt.Fprintln(h, k.Metrics.String())
	}
	return hex.EncodeToString(h.Sum(nil))
}

// buildObjects renders the proxy's objects. Owner references are added once the Deployment has a UID.
func buildObjects(spec backend.Spec, namespace string, p Options, k guest.Pod) (objects, error) {
	resources, err := resourceRequirements(p)
	if err != nil {
		return objects{}, err
	}
	if err := validatePodPlacement(p); err != nil {
		return objects{}, err
	}
	if err := metricsNeedPolicy(spec.Proxy, p.NetworkPolicy); err != nil {
		return objects{}, err
	}
	labels := backend.ManagedLabels(spec)
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: spec.Name, Namespace: namespace, Labels: copyMap(labels)}
	}
	o := objects{
		configMap:  buildConfigMap(meta(), spec, k),
		secret:     buildSecret(meta(), k),
		deployment: buildDeployment(meta(), spec, p, k, resources),
		service:    buildService(meta(), spec, p, k),
		disruption: disruptionBudget(meta(), spec),
	}
	if p.NetworkPolicy {
		o.networkPolicy = networkPolicy(meta(), spec)
	}
	return o, nil
}

// buildConfigMap holds Squid's files, and the settings they were rendered from for Get to read back.
func buildConfigMap(meta metav1.ObjectMeta, spec backend.Spec, k guest.Pod) *corev1.ConfigMap {
	meta.Annotations = map[string]string{annotationSettings: storedSettings(spec.Proxy)}
	return &corev1.ConfigMap{ObjectMeta: meta, Data: k.ConfigMapData}
}

// buildSecret holds the password file; nil without authentication.
func buildSecret(meta metav1.ObjectMeta, k guest.Pod) *corev1.Secret {
	if k.SecretData == nil {
		return nil
	}
	return &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeOpaque, Data: k.SecretData}
}

func buildDeployment(meta metav1.ObjectMeta, spec backend.Spec, p Options, k guest.Pod, resources corev1.ResourceRequirements) *appsv1.Deployment {
	placement, _ := json.Marshal(placementAnnotation{Image: p.Image, Requests: p.Requests, Limits: p.Limits, NetworkPolicy: p.NetworkPolicy})
	meta.Annotations = map[string]string{annotationPlacement: string(placement)}
	return &appsv1.Deployment{
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas:                ptr.To(int32(p.Replicas)),
			Selector:                &metav1.LabelSelector{MatchLabels: selectorLabels(spec)},
			ProgressDeadlineSeconds: ptr.To(int32(progressDeadline)),
			// A new configuration starts a new pod before an old one stops: the proxy keeps serving.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1)),
			}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels(spec), Annotations: podAnnotations(k)},
				Spec:       podSpec(spec, p, k, resources),
			},
		},
	}
}

func podSpec(spec backend.Spec, p Options, k guest.Pod, resources corev1.ResourceRequirements) corev1.PodSpec {
	volumes, mounts := podVolumes(spec.Name, k.SecretData != nil)
	if k.Metrics != nil {
		volumes = append(volumes, metricsVolume(spec.Name))
	}
	return corev1.PodSpec{
		SecurityContext:               podSecurityContext(),
		Containers:                    append([]corev1.Container{squidContainer(p, k, resources, mounts)}, metricsContainers(p.Image, k)...),
		Volumes:                       volumes,
		NodeSelector:                  p.NodeSelector,
		Tolerations:                   podTolerations(p),
		AutomountServiceAccountToken:  ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To(int64(terminationGraceSeconds)),
		TopologySpreadConstraints:     spreadConstraints(spec),
	}
}

// spreadConstraints put the proxy's pods on different nodes, and in different zones where the nodes carry
// zone labels, so that one node or zone lost takes at most its share of them. ScheduleAnyway: on a cluster of
// one node or one zone the pods still run, together, rather than wait for a node that will never come.
func spreadConstraints(spec backend.Spec) []corev1.TopologySpreadConstraint {
	spread := func(key string) corev1.TopologySpreadConstraint {
		return corev1.TopologySpreadConstraint{
			MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector: &metav1.LabelSelector{MatchLabels: selectorLabels(spec)},
		}
	}
	return []corev1.TopologySpreadConstraint{spread(corev1.LabelHostname), spread(corev1.LabelTopologyZone)}
}

// disruptionBudget lets a drain or any other voluntary eviction take one of the proxy's pods at a time: the
// next waits until its replacement serves. With one replica that one may go (a budget of zero would block
// every drain of its node, forever); the rollout itself never takes a serving pod away (maxUnavailable 0).
func disruptionBudget(meta metav1.ObjectMeta, spec backend.Spec) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: meta,
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: selectorLabels(spec)},
			// A pod that is not ready serves no one: evicting it costs nothing, and a budget that counted it
			// would stall a drain behind a pod that never becomes ready.
			UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow),
		},
	}
}

func squidContainer(p Options, k guest.Pod, resources corev1.ResourceRequirements, mounts []corev1.VolumeMount) corev1.Container {
	return corev1.Container{
		Name:            containerName,
		Image:           p.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		// A crash's diagnostic quotes the termination message, so it must hold no client data: Squid writes its
		// cache log there (mirrored to stderr for kubectl logs), never the access log. The kubelet falls back
		// to the container's log only when that file is empty, that is when Squid died parsing its config,
		// before it opened any port or the access log: then stderr says why, and no client has been served.
		TerminationMessagePath:   k.TerminationMessagePath,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          containerSecurityContext(),
		Command:                  k.Command,
		Args:                     k.Args,
		Env:                      fieldEnv(k),
		Ports: []corev1.ContainerPort{
			{Name: proxyPortName, ContainerPort: int32(k.ProxyPort), Protocol: corev1.ProtocolTCP},
			{Name: healthPortName, ContainerPort: int32(k.Readiness.Port), Protocol: corev1.ProtocolTCP},
		},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: k.Readiness.Path, Port: intstr.FromInt32(int32(k.Readiness.Port)),
			}},
			PeriodSeconds: 2, FailureThreshold: 3,
		},
		Resources:    resources,
		VolumeMounts: mounts,
		Lifecycle:    drainBeforeStop(),
	}
}

// drainSeconds is how long a pod being deleted keeps serving before Squid is told to stop: the Service's
// endpoints and every node's kube-proxy learn of the deletion at the same time as the kubelet, and until they
// have, new connections still arrive. Squid then takes shutdown_lifetime (3 s) to finish what it serves, all
// within the pod's grace period (terminationGracePeriodSeconds). 5 s was too short on a loaded node: in a cold
// make test on two busy cores, TestFailoverLive saw a new connection routed to a deleted pod's address after
// its sandbox was gone ("No route to host"), so kube-proxy had not caught up 8 s after the deletion.
const drainSeconds = 10

// terminationGraceSeconds leaves Squid its shutdown_lifetime after the drain, and a little more.
const terminationGraceSeconds = drainSeconds + 5

// drainBeforeStop is the pause before Squid gets SIGTERM. sleep, not the kubelet's own sleep action, which a
// cluster before 1.30 refuses: every Debian-based image has /bin/sleep.
func drainBeforeStop() *corev1.Lifecycle {
	return &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
		Command: []string{"/bin/sleep", strconv.Itoa(drainSeconds)},
	}}}
}

// podVolumes are the pod's volumes and the Squid container's mounts of them: the ConfigMap, the scratch
// directories a read-only root file system needs, and the Secret when there is one.
func podVolumes(name string, withSecret bool) ([]corev1.Volume, []corev1.VolumeMount) {
	volumes := []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}},
	}}}
	mounts := []corev1.VolumeMount{{Name: "config", MountPath: guest.ConfigDir, ReadOnly: true}}
	scratch, scratchMounts := scratchVolumes()
	volumes = append(volumes, scratch...)
	mounts = append(mounts, scratchMounts...)
	if withSecret {
		mounts = append(mounts, corev1.VolumeMount{Name: "auth", MountPath: guest.SecretDir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "auth", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: name},
		}})
	}
	return volumes, mounts
}

func podTolerations(p Options) []corev1.Toleration {
	tolerations := make([]corev1.Toleration, 0, len(p.Tolerations))
	for _, t := range p.Tolerations {
		tolerations = append(tolerations, corev1.Toleration{
			Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value, Effect: corev1.TaintEffect(t.Effect),
		})
	}
	return tolerations
}

// buildService exposes the proxy port, first, and the metrics ports of a proxy with metrics; the health port
// is for the kubelet's probes.
func buildService(meta metav1.ObjectMeta, spec backend.Spec, p Options, k guest.Pod) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceType(p.ServiceType),
			Selector: selectorLabels(spec),
			Ports: append([]corev1.ServicePort{{
				Name: proxyPortName, Port: int32(k.ProxyPort), TargetPort: intstr.FromString(proxyPortName), Protocol: corev1.ProtocolTCP,
			}}, metricsServicePorts(k)...),
		},
	}
	admitClients(&svc.Spec, spec.Proxy.AllowedClientCIDRs)
	return svc
}

// admitClients sets what keeps Squid's client check meaningful on a Service that clients outside the cluster
// reach. With the default externalTrafficPolicy Cluster, a node forwards such a client's connection to a pod
// on any node and rewrites its source to the node's own address, so Squid sees a node and a range of node
// addresses in allowed_client_cidrs admits everyone. Local keeps the client's address (a node then forwards
// only to its own pods, and a load balancer sends only to nodes that run one). A LoadBalancer Service also
// gets the client ranges as loadBalancerSourceRanges, which the cloud's load balancer or the nodes' rules
// enforce before a packet reaches the pod. A ClusterIP Service takes neither field (the API server refuses
// them), and clients reach it from inside the cluster with their own addresses.
func admitClients(svc *corev1.ServiceSpec, clientCIDRs []string) {
	svc.ExternalTrafficPolicy, svc.LoadBalancerSourceRanges = "", nil
	switch svc.Type {
	case corev1.ServiceTypeLoadBalancer:
		svc.LoadBalancerSourceRanges = slices.Clone(clientCIDRs)
		fallthrough
	case corev1.ServiceTypeNodePort:
		svc.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
}

// fieldEnv are the Squid container's variables from the downward API: the pod's own addresses.
func fieldEnv(k guest.Pod) []corev1.EnvVar {
	env := make([]corev1.EnvVar, 0, len(k.FieldEnv))
	for _, e := range k.FieldEnv {
		env = append(env, corev1.EnvVar{Name: e.Name, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: e.FieldPath},
		}})
	}
	return env
}

// networkPolicy is a backstop below Squid, enforced by the cluster's network plugin. Ingress: only the allowed
// client ranges reach the proxy port, the metrics clients' ranges the metrics ports; the health port needs no rule, since the kubelet's probes come from the
// node, which network policies do not filter. Egress: DNS, and every destination except the ranges Squid
// refuses (proxyconf.RefusedRanges), so that a Squid bug or a name that resolves differently at connect time
// still cannot reach the metadata server or a private network the user did not allow.
//
// DNS is open on port 53 to any address, not to a named resolver: where a pod's resolver is differs by cluster
// (kube-dns pods behind a Service, a node-local cache on a link-local address, the node's own resolver, as in
// the test cluster), and each of those lies in a refused range. Port 53 carries DNS, not the services the
// refused ranges guard (the metadata server's HTTP API, a private network's applications).
func networkPolicy(meta metav1.ObjectMeta, spec backend.Spec) *networkingv1.NetworkPolicy {
	clients := make([]networkingv1.NetworkPolicyPeer, 0, len(spec.Proxy.AllowedClientCIDRs))
	for _, c := range spec.Proxy.AllowedClientCIDRs {
		clients = append(clients, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
	}
	proxyPort := intstr.FromString(proxyPortName)
	dnsPort := intstr.FromInt32(53)
	refusedV4, refusedV6 := proxyconf.RefusedRanges(spec.Proxy.AllowedPrivateCIDRs)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: meta,
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selectorLabels(spec)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: append([]networkingv1.NetworkPolicyIngressRule{{
				From:  clients,
				Ports: []networkingv1.NetworkPolicyPort{{Port: &proxyPort, Protocol: ptr.To(corev1.ProtocolTCP)}},
			}}, metricsIngress(spec)...),
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{Ports: []networkingv1.NetworkPolicyPort{
					{Port: &dnsPort, Protocol: ptr.To(corev1.ProtocolUDP)},
					{Port: &dnsPort, Protocol: ptr.To(corev1.ProtocolTCP)},
				}},
				// An ipBlock's exceptions must lie inside its range: one block per address family.
				{To: []networkingv1.NetworkPolicyPeer{
					{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: refusedV4}},
					{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: refusedV6}},
				}},
			},
		},
	}
}

// placementAnnotation is what Get cannot read plainly from the pod template.
type placementAnnotation struct {
	Image         string            `json:"image"`
	Requests      map[string]string `json:"requests,omitempty"`
	Limits        map[string]string `json:"limits,omitempty"`
	NetworkPolicy bool              `json:"networkPolicy"`
}

// resourceRequirements checks the requests and limits as the API server would (validate.go) and parses them.
func resourceRequirements(p Options) (corev1.ResourceRequirements, error) {
	var r corev1.ResourceRequirements
	parse := func(in map[string]string) (corev1.ResourceList, error) {
		if len(in) == 0 {
			return nil, nil
		}
		out := corev1.ResourceList{}
		for _, name := range sortedKeys(in) {
			if err := ValidateResource(name, in[name]); err != nil {
				return nil, err
			}
			out[corev1.ResourceName(name)] = resource.MustParse(in[name])
		}
		return out, nil
	}
	var err error
	if r.Requests, err = parse(p.Requests); err != nil {
		return r, err
	}
	if r.Limits, err = parse(p.Limits); err != nil {
		return r, err
	}
	for _, name := range sortedKeys(p.Requests) {
		if err := ValidateRequestWithinLimit(name, p.Requests[name], p.Limits[name]); err != nil {
			return r, err
		}
	}
	return r, nil
}

// validatePodPlacement checks the image and node selector as the API server and the kubelet would
// (validate.go), so that a placement that cannot run is refused before any object is made.
func validatePodPlacement(p Options) error {
	if err := ValidateImage(p.Image); err != nil {
		return err
	}
	for _, k := range sortedKeys(p.NodeSelector) {
		if err := ValidateNodeSelectorKey(k); err != nil {
			return fmt.Errorf("node selector: %w", err)
		}
		if err := ValidateNodeSelectorValue(p.NodeSelector[k]); err != nil {
			return fmt.Errorf("node selector %s: %w", k, err)
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ownedBy makes the Deployment the owner of meta, so deleting it collects the object; with foreground
// deletion the Deployment stays until its dependants are gone.
func ownedBy(meta *metav1.ObjectMeta, d *appsv1.Deployment) {
	ref := metav1.OwnerReference{
		APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, BlockOwnerDeletion: ptr.To(true),
	}
	for _, r := range meta.OwnerReferences {
		if r.UID == d.UID {
			return
		}
	}
	meta.OwnerReferences = append(meta.OwnerReferences, ref)
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
