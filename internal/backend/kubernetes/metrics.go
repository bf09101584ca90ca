package kubernetes

import (
	"errors"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// A proxy with metrics (issue 40; internal/metrics) has three more containers in its pod, from the proxy's own
// image: mtail on the port named metricsPortName, prometheus-squid-exporter on squidMetricsPortName, and the
// script that sends mtail Squid's requests in flight (no port). The
// Service exposes both ports, so metrics_url on the Service's name works, and the NetworkPolicy admits them
// only from the metrics clients' own ranges: the proxy's clients are not among them unless listed, since the
// counters name rule sets and refusal reasons.
const (
	mtailContainerName         = "mtail"
	squidExporterContainerName = "squid-exporter"
	activeContainerName        = "active-requests"
	metricsPortName            = "metrics"
	squidMetricsPortName       = "squid-metrics"
	metricsProgramVolume       = "metrics-program"
)

// The scrape annotations many Prometheus setups (the community chart's kubernetes-pods job among them) read to
// find a pod's metrics: the mtail port, which has the proxy's own counters. squid_* stays on its named port,
// for a PodMonitor or a second job.
const (
	annotationScrape = "prometheus.io/scrape"
	annotationPort   = "prometheus.io/port"
	annotationPath   = "prometheus.io/path"
	// annotationDefaultContainer is the container kubectl logs and exec pick without -c: Squid, whose stdout
	// is the access log, rather than a notice that the pod has three.
	annotationDefaultContainer = "kubectl.kubernetes.io/default-container"
)

// sidecarRequests are the sidecars' requests: each counts a few lines a request or answers a scrape, a
// fraction of Squid's work. Requests only: a memory limit would kill mtail under a burst of lines, and with it
// the pod's readiness.
var sidecarRequests = map[corev1.ResourceName]string{corev1.ResourceCPU: "10m", corev1.ResourceMemory: "32Mi"}

// metricsContainers are the sidecars for k, from image; none without metrics. They run as the Squid container
// does (containerSecurityContext): the proxy user, no privilege, a read-only root, no capabilities. No
// readiness probe: a container without one is ready once it runs, and a slow scrape must not take the
// proxy's pod out of its Service.
func metricsContainers(image string, k guest.Pod) []corev1.Container {
	m := k.Metrics
	if m == nil {
		return nil
	}
	sidecar := func(name, port string, portNumber int, command []string, mounts []corev1.VolumeMount) corev1.Container {
		requests := corev1.ResourceList{}
		for r, q := range sidecarRequests {
			requests[r] = resource.MustParse(q) // a Quantity of its own each (scratchVolumes says why)
		}
		c := corev1.Container{
			Name: name, Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
			Command:                  command,
			SecurityContext:          containerSecurityContext(),
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			Resources:                corev1.ResourceRequirements{Requests: requests},
			VolumeMounts:             mounts,
		}
		if port != "" {
			c.Ports = []corev1.ContainerPort{{Name: port, ContainerPort: int32(portNumber), Protocol: corev1.ProtocolTCP}}
		}
		return c
	}
	return []corev1.Container{
		sidecar(mtailContainerName, metricsPortName, m.Port, m.Mtail,
			[]corev1.VolumeMount{{Name: metricsProgramVolume, MountPath: guest.MtailProgramDir, ReadOnly: true}}),
		sidecar(squidExporterContainerName, squidMetricsPortName, m.SquidPort, m.SquidExporter, nil),
		// A loop that sleeps most of the time: the same small requests are plenty.
		sidecar(activeContainerName, "", 0, m.Active, nil),
	}
}

// metricsVolume is the mtail program, the one key of the ConfigMap the mtail container sees.
func metricsVolume(name string) corev1.Volume {
	return corev1.Volume{Name: metricsProgramVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: name},
		Items:                []corev1.KeyToPath{{Key: guest.MtailProgramKey, Path: guest.MtailProgramKey}},
	}}}
}

// podAnnotations are the pod template's annotations: the configuration's checksum and, with metrics, the
// scrape annotations.
func podAnnotations(k guest.Pod) map[string]string {
	a := map[string]string{annotationChecksum: checksum(k)}
	if k.Metrics != nil {
		a[annotationScrape] = "true"
		a[annotationPort] = strconv.Itoa(k.Metrics.Port)
		a[annotationPath] = proxyconf.MetricsPath
		a[annotationDefaultContainer] = containerName
	}
	return a
}

// syncMetrics makes a pod template's sidecars, their volume and the scrape annotations those of k: added,
// changed or removed. Reconfigure runs it with every rollout, so metrics turned on or off, or moved to other
// ports, reach the pods with the configuration that goes with them.
func syncMetrics(tmpl *corev1.PodTemplateSpec, name string, k guest.Pod) {
	pod := &tmpl.Spec
	image := ""
	for _, c := range pod.Containers {
		if c.Name == containerName {
			image = c.Image
		}
	}
	pod.Containers = slices.DeleteFunc(pod.Containers, func(c corev1.Container) bool {
		return c.Name == mtailContainerName || c.Name == squidExporterContainerName || c.Name == activeContainerName
	})
	pod.Containers = append(pod.Containers, metricsContainers(image, k)...)
	pod.Volumes = slices.DeleteFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == metricsProgramVolume })
	if k.Metrics != nil {
		pod.Volumes = append(pod.Volumes, metricsVolume(name))
	}
	if tmpl.Annotations == nil {
		tmpl.Annotations = map[string]string{}
	}
	for _, a := range []string{annotationScrape, annotationPort, annotationPath, annotationDefaultContainer} {
		delete(tmpl.Annotations, a)
	}
	for a, v := range podAnnotations(k) {
		tmpl.Annotations[a] = v
	}
}

// metricsServicePorts are the Service's ports for the metrics, after the proxy port (which Get reads as the
// first); none without metrics.
func metricsServicePorts(k guest.Pod) []corev1.ServicePort {
	if k.Metrics == nil {
		return nil
	}
	return []corev1.ServicePort{
		{Name: metricsPortName, Port: int32(k.Metrics.Port), TargetPort: intstr.FromString(metricsPortName), Protocol: corev1.ProtocolTCP},
		{Name: squidMetricsPortName, Port: int32(k.Metrics.SquidPort), TargetPort: intstr.FromString(squidMetricsPortName), Protocol: corev1.ProtocolTCP},
	}
}

// syncServicePorts makes the Service's metrics ports those of k, keeping the proxy port and any node port the
// cluster gave a metrics port that stays.
func syncServicePorts(svc *corev1.ServiceSpec, k guest.Pod) {
	old := svc.Ports
	svc.Ports = slices.DeleteFunc(slices.Clone(old), func(p corev1.ServicePort) bool {
		return p.Name == metricsPortName || p.Name == squidMetricsPortName
	})
	for _, p := range metricsServicePorts(k) {
		for _, o := range old {
			if o.Name == p.Name && o.Port == p.Port {
				p.NodePort = o.NodePort
			}
		}
		svc.Ports = append(svc.Ports, p)
	}
}

// metricsIngress is the NetworkPolicy's rule for the metrics ports: the metrics clients' ranges alone; none
// without metrics.
func metricsIngress(spec backend.Spec) []networkingv1.NetworkPolicyIngressRule {
	m := spec.Proxy.Metrics
	if m == nil {
		return nil
	}
	from := make([]networkingv1.NetworkPolicyPeer, 0, len(m.AllowedClientCIDRs))
	for _, c := range m.AllowedClientCIDRs {
		from = append(from, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
	}
	metricsPort, squidPort := intstr.FromString(metricsPortName), intstr.FromString(squidMetricsPortName)
	return []networkingv1.NetworkPolicyIngressRule{{
		From: from,
		Ports: []networkingv1.NetworkPolicyPort{
			{Port: &metricsPort, Protocol: ptr.To(corev1.ProtocolTCP)},
			{Port: &squidPort, Protocol: ptr.To(corev1.ProtocolTCP)},
		},
	}}
}

// metricsNeedPolicy refuses metrics on a proxy without its NetworkPolicy: mtail and the exporter answer anyone
// who reaches their ports, and the NetworkPolicy is the only thing that keeps those ports to the metrics
// clients' ranges.
func metricsNeedPolicy(s proxyconf.Settings, networkPolicy bool) error {
	if s.Metrics != nil && !networkPolicy {
		return backend.NewError(backend.ClassPermanent, "metrics",
			errMetricsNeedPolicy)
	}
	return nil
}

var errMetricsNeedPolicy = errors.New("metrics need the proxy's NetworkPolicy (network_policy = true): it alone keeps the metrics ports to metrics.allowed_client_cidrs")
