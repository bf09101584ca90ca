package kubernetes

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// checkMetricsObjects checks what a proxy's objects show of its metrics settings m (nil: none).
func checkMetricsObjects(t *testing.T, m *proxyconf.MetricsSettings, d *appsv1.Deployment, svc *corev1.Service, np *networkingv1.NetworkPolicy, cm *corev1.ConfigMap) {
	t.Helper()
	tmpl := d.Spec.Template
	var names []string
	for _, c := range tmpl.Spec.Containers {
		names = append(names, c.Name)
	}
	var svcPorts []string
	for _, p := range svc.Spec.Ports {
		svcPorts = append(svcPorts, p.Name+"="+strconv.Itoa(int(p.Port))+">"+p.TargetPort.String())
	}
	hasVolume := slices.ContainsFunc(tmpl.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == metricsProgramVolume })
	if m == nil {
		if !slices.Equal(names, []string{containerName}) {
			t.Errorf("containers %v, want squid alone", names)
		}
		if !slices.Equal(svcPorts, []string{"proxy=3128>proxy"}) {
			t.Errorf("Service ports %v, want the proxy's alone", svcPorts)
		}
		if len(np.Spec.Ingress) != 1 {
			t.Errorf("NetworkPolicy ingress rules %+v, want the proxy port's alone", np.Spec.Ingress)
		}
		for _, a := range []string{annotationScrape, annotationPort, annotationPath, annotationDefaultContainer} {
			if v, ok := tmpl.Annotations[a]; ok {
				t.Errorf("pod annotation %s=%s without metrics", a, v)
			}
		}
		if hasVolume || cm.Data[guest.MtailProgramKey] != "" {
			t.Errorf("mtail's program volume %t, in the ConfigMap %t, without metrics", hasVolume, cm.Data[guest.MtailProgramKey] != "")
		}
		return
	}
	port, squidPort := m.Ports()
	if !slices.Equal(names, []string{containerName, mtailContainerName, squidExporterContainerName, activeContainerName}) {
		t.Fatalf("containers %v, want squid and the three sidecars", names)
	}
	squid := tmpl.Spec.Containers[0]
	for _, c := range tmpl.Spec.Containers[1:] {
		// The same image and the same hardening as Squid's container, small requests, no limits.
		if c.Image != squid.Image {
			t.Errorf("%s runs %s, Squid %s", c.Name, c.Image, squid.Image)
		}
		if diff := cmp.Diff(containerSecurityContext(), c.SecurityContext); diff != "" {
			t.Errorf("%s's security context (-want +got):\n%s", c.Name, diff)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || len(c.Resources.Limits) > 0 {
			t.Errorf("%s's resources %+v, want requests alone", c.Name, c.Resources)
		}
	}
	wantPorts := map[string]corev1.ContainerPort{
		mtailContainerName:         {Name: metricsPortName, ContainerPort: int32(port), Protocol: corev1.ProtocolTCP},
		squidExporterContainerName: {Name: squidMetricsPortName, ContainerPort: int32(squidPort), Protocol: corev1.ProtocolTCP},
	}
	for _, c := range tmpl.Spec.Containers[1:] {
		want, opens := wantPorts[c.Name]
		if opens && (len(c.Ports) != 1 || c.Ports[0] != want) || !opens && len(c.Ports) != 0 {
			t.Errorf("%s's ports %+v, want %+v", c.Name, c.Ports, want)
		}
	}
	mtail := tmpl.Spec.Containers[1]
	if !slices.Contains(mtail.Command, strconv.Itoa(port)) || len(mtail.VolumeMounts) != 1 || mtail.VolumeMounts[0].MountPath != guest.MtailProgramDir {
		t.Errorf("mtail: command %q, mounts %+v", mtail.Command, mtail.VolumeMounts)
	}
	if exporter := tmpl.Spec.Containers[2]; !slices.Contains(exporter.Command, ":"+strconv.Itoa(squidPort)) || len(exporter.VolumeMounts) != 0 {
		t.Errorf("exporter: command %q, mounts %+v", exporter.Command, exporter.VolumeMounts)
	}
	// The in-flight script, sent to mtail's UDP port, from the manager port.
	if active := tmpl.Spec.Containers[3]; len(active.Command) != 3 || active.Command[0] != guest.BashPath ||
		!strings.Contains(active.Command[2], ">/dev/udp/127.0.0.1/"+strconv.Itoa(guest.MtailLogPort)) ||
		!strings.Contains(active.Command[2], "/dev/tcp/127.0.0.1/"+strconv.Itoa(proxyconf.DefaultManagerPort)) || len(active.VolumeMounts) != 0 {
		t.Errorf("the in-flight script's container: command %q, mounts %+v", active.Command, active.VolumeMounts)
	}
	if !hasVolume || cm.Data[guest.MtailProgramKey] == "" {
		t.Errorf("mtail's program volume %t, in the ConfigMap %t", hasVolume, cm.Data[guest.MtailProgramKey] != "")
	}
	wantAnnotations := map[string]string{annotationScrape: "true", annotationPort: strconv.Itoa(port), annotationPath: "/metrics",
		annotationDefaultContainer: containerName}
	for a, v := range wantAnnotations {
		if tmpl.Annotations[a] != v {
			t.Errorf("pod annotation %s=%q, want %q", a, tmpl.Annotations[a], v)
		}
	}
	wantSvc := []string{"proxy=3128>proxy", "metrics=" + strconv.Itoa(port) + ">metrics", "squid-metrics=" + strconv.Itoa(squidPort) + ">squid-metrics"}
	if !slices.Equal(svcPorts, wantSvc) {
		t.Errorf("Service ports %v, want %v", svcPorts, wantSvc)
	}
	// The proxy port's rule as before, and one of the metrics ports' own: only the metrics ranges, never the
	// proxy's clients.
	if len(np.Spec.Ingress) != 2 {
		t.Fatalf("NetworkPolicy ingress rules %+v, want the proxy port's and the metrics ports'", np.Spec.Ingress)
	}
	var proxyFrom, metricsFrom, metricsPorts []string
	for _, p := range np.Spec.Ingress[0].From {
		proxyFrom = append(proxyFrom, p.IPBlock.CIDR)
	}
	for _, p := range np.Spec.Ingress[1].From {
		metricsFrom = append(metricsFrom, p.IPBlock.CIDR)
	}
	for _, p := range np.Spec.Ingress[1].Ports {
		metricsPorts = append(metricsPorts, p.Port.String())
	}
	if !slices.Equal(metricsFrom, m.AllowedClientCIDRs) || !slices.Equal(metricsPorts, []string{metricsPortName, squidMetricsPortName}) {
		t.Errorf("metrics ingress from %v to %v, want from %v to the two metrics ports", metricsFrom, metricsPorts, m.AllowedClientCIDRs)
	}
	for _, c := range proxyFrom {
		if slices.Contains(metricsFrom, c) && !slices.Contains(m.AllowedClientCIDRs, c) {
			t.Errorf("the metrics ports admit the proxy's client range %s", c)
		}
	}
}

// TestMetricsObjects: a proxy with metrics gets the three sidecars from its own image, hardened as Squid's
// container, their named ports, the scrape annotations, the Service's metrics ports and a NetworkPolicy rule
// admitting the metrics ports from the metrics ranges alone; Get reads the settings back as they were given.
// Reconfigure turns metrics on, moves their ports and ranges, and turns them off, rolling the pods each time the
// pods change; the Service keeps its address throughout.
func TestMetricsObjects(t *testing.T) {
	t.Parallel()
	on := &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"10.9.0.0/16"}}
	moved := &proxyconf.MetricsSettings{Port: 9100, SquidPort: 9101, AllowedClientCIDRs: []string{"10.9.0.0/16", "192.168.7.0/24"}}
	narrowed := &proxyconf.MetricsSettings{Port: 9100, SquidPort: 9101, AllowedClientCIDRs: []string{"192.168.7.0/24"}}
	steps := []struct {
		name      string
		metrics   *proxyconf.MetricsSettings
		wantRoll  bool // the pod template changes
		reconfigs bool // by Reconfigure, else by Create
	}{
		{name: "created without", metrics: nil},
		{name: "turned on", metrics: on, wantRoll: true, reconfigs: true},
		{name: "ports and ranges moved", metrics: moved, wantRoll: true, reconfigs: true},
		// Ranges alone are the NetworkPolicy's: the pods have nothing new to run.
		{name: "ranges narrowed", metrics: narrowed, wantRoll: false, reconfigs: true},
		{name: "turned off", metrics: nil, wantRoll: true, reconfigs: true},
	}
	ctx := testCtx(t)
	b, cs := newFake(t)
	controller(ctx, t, cs, nil)
	spec := testSpec("p1")
	spec.Proxy.LogFormat = proxyconf.LogFormatJSON
	var svcUID string
	var sum string
	for i, step := range steps {
		settings := spec.Proxy
		settings.Metrics = step.metrics
		var inst backend.Instance
		var err error
		if step.reconfigs {
			inst, err = b.Reconfigure(ctx, testID(), settings)
		} else {
			s := spec
			s.Proxy = settings
			inst, err = b.Create(ctx, s)
		}
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		d, _ := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
		svc, _ := cs.CoreV1().Services(testNS).Get(ctx, "p1", metav1.GetOptions{})
		np, _ := cs.NetworkingV1().NetworkPolicies(testNS).Get(ctx, "p1", metav1.GetOptions{})
		cm, _ := cs.CoreV1().ConfigMaps(testNS).Get(ctx, "p1", metav1.GetOptions{})
		t.Run(step.name, func(t *testing.T) {
			checkMetricsObjects(t, step.metrics, d, svc, np, cm)
			if inst.Proxy == nil || !cmp.Equal(inst.Proxy.Metrics, step.metrics) {
				t.Errorf("read back metrics %+v, want %+v", inst.Proxy, step.metrics)
			}
			if i > 0 {
				if string(svc.UID) != svcUID {
					t.Error("the Service was replaced")
				}
				if rolled := d.Spec.Template.Annotations[annotationChecksum] != sum; rolled != step.wantRoll {
					t.Errorf("the pods rolled: %t, want %t", rolled, step.wantRoll)
				}
			}
		})
		svcUID, sum = string(svc.UID), d.Spec.Template.Annotations[annotationChecksum]
	}
}

// TestMetricsNeedTheNetworkPolicy: mtail and the exporter answer whoever reaches them, so a proxy without its
// NetworkPolicy is refused metrics, on Create before anything is made and on Reconfigure before anything is
// written.
func TestMetricsNeedTheNetworkPolicy(t *testing.T) {
	t.Parallel()
	metrics := &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"10.9.0.0/16"}}
	for name, reconfigure := range map[string]bool{"create": false, "reconfigure": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			b, cs := newFake(t)
			controller(ctx, t, cs, nil)
			spec := testSpec("p1")
			spec.Proxy.LogFormat = proxyconf.LogFormatJSON
			spec.Placement.Options = &Options{NetworkPolicy: false}
			var err error
			if reconfigure {
				if _, err := b.Create(ctx, spec); err != nil {
					t.Fatal(err)
				}
				cs.ClearActions()
				next := spec.Proxy
				next.Metrics = metrics
				_, err = b.Reconfigure(ctx, testID(), next)
			} else {
				spec.Proxy.Metrics = metrics
				_, err = b.Create(ctx, spec)
			}
			if !errors.Is(err, errMetricsNeedPolicy) || backend.ClassOf(err) != backend.ClassPermanent {
				t.Fatalf("got %v, want the Permanent refusal %q", err, errMetricsNeedPolicy)
			}
			for _, a := range cs.Actions() {
				if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
					t.Errorf("refused, yet it did %s %s", v, a.GetResource().Resource)
				}
			}
		})
	}
}

// TestSidecarsRunWhatTheImageHas: the sidecars run programs guest.MetricsImageNeeds lists, those
// scripts/build-k8s-image.sh installs, and mount nothing but mtail's program.
func TestSidecarsRunWhatTheImageHas(t *testing.T) {
	t.Parallel()
	spec := testSpec("p1")
	spec.Proxy.LogFormat = proxyconf.LogFormatJSON
	spec.Proxy.Metrics = &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"10.9.0.0/16"}}
	b, _ := newFake(t)
	o, err := b.render(spec, testID())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range o.deployment.Spec.Template.Spec.Containers[1:] {
		if len(c.Command) == 0 || !slices.Contains(guest.MetricsImageNeeds, c.Command[0]) {
			t.Errorf("%s runs %q, not a program of guest.MetricsImageNeeds %v", c.Name, c.Command, guest.MetricsImageNeeds)
		}
	}
	script, err := os.ReadFile("../../../scripts/build-k8s-image.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range guest.MetricsImageNeeds {
		if !strings.Contains(string(script), p) {
			t.Errorf("scripts/build-k8s-image.sh does not name %s", p)
		}
	}
}

// TestMonitorExamplesSelectTheProxy: the PodMonitor and ServiceMonitor of examples/metrics select what a proxy
// with metrics is made of, by labels its pods and its Service carry, on port names its containers and its
// Service have.
func TestMonitorExamplesSelectTheProxy(t *testing.T) {
	t.Parallel()
	spec := testSpec("p1")
	spec.Proxy.LogFormat = proxyconf.LogFormatJSON
	spec.Proxy.Metrics = &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"10.9.0.0/16"}}
	b, _ := newFake(t)
	o, err := b.render(spec, testID())
	if err != nil {
		t.Fatal(err)
	}
	var podPorts, svcPorts []string
	for _, c := range o.deployment.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			podPorts = append(podPorts, p.Name)
		}
	}
	for _, p := range o.service.Spec.Ports {
		svcPorts = append(svcPorts, p.Name)
	}
	type endpoint struct {
		Port string `yaml:"port"`
		Path string `yaml:"path"`
	}
	for file, tc := range map[string]struct {
		kind   string
		labels map[string]string
		ports  []string
	}{
		"podmonitor.yaml":     {"PodMonitor", o.deployment.Spec.Template.Labels, podPorts},
		"servicemonitor.yaml": {"ServiceMonitor", o.service.Labels, svcPorts},
	} {
		raw, err := os.ReadFile("../../../examples/metrics/" + file)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Kind string `yaml:"kind"`
			Spec struct {
				Selector struct {
					MatchLabels map[string]string `yaml:"matchLabels"`
				} `yaml:"selector"`
				PodMetricsEndpoints []endpoint `yaml:"podMetricsEndpoints"`
				Endpoints           []endpoint `yaml:"endpoints"`
			} `yaml:"spec"`
		}
		if err := yaml.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if m.Kind != tc.kind || len(m.Spec.Selector.MatchLabels) == 0 {
			t.Errorf("%s: kind %s, selector %v", file, m.Kind, m.Spec.Selector.MatchLabels)
		}
		for k, v := range m.Spec.Selector.MatchLabels {
			if tc.labels[k] != v {
				t.Errorf("%s selects %s=%s; the proxy's labels are %v", file, k, v, tc.labels)
			}
		}
		var ports []string
		for _, e := range append(m.Spec.PodMetricsEndpoints, m.Spec.Endpoints...) {
			ports = append(ports, e.Port)
			if e.Path != proxyconf.MetricsPath {
				t.Errorf("%s scrapes %s on %s, want %s", file, e.Path, e.Port, proxyconf.MetricsPath)
			}
		}
		if !slices.Equal(ports, []string{metricsPortName, squidMetricsPortName}) {
			t.Errorf("%s scrapes ports %v, want %s and %s", file, ports, metricsPortName, squidMetricsPortName)
		}
		for _, p := range ports {
			if !slices.Contains(tc.ports, p) {
				t.Errorf("%s scrapes port %s, which the proxy's %s lacks (it has %v)", file, p, tc.kind, tc.ports)
			}
		}
	}
}
