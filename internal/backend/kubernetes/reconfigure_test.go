package kubernetes

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// TestReconfigureKeepsThePodsImage: a rule change rolls the pods onto the new configuration and keeps the image
// they run, whichever it is: an earlier release's default, a user's own, or today's default. The image is part
// of the placement (a change of it replaces the proxy), and a new provider version changes nothing by itself;
// so what Reconfigure writes must be understood by the image the pods already run (guest.ImageNeeds), and
// TestAccUpgrade_kubernetesOlderImage proves it on the cluster with the baseline's image.
func TestReconfigureKeepsThePodsImage(t *testing.T) {
	t.Parallel()
	for name, image := range map[string]string{
		"an earlier release's default": ImageRepository + ":0.1.0",
		"a user's own":                 "registry.example/mirror/squid:5.7-bookworm",
		"today's default":              DefaultImage,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pod, _ := reconfigureAnOlderPod(t, func(old *corev1.PodSpec) { old.Containers[0].Image = image })
			if got := pod.Containers[0].Image; got != image {
				t.Errorf("after Reconfigure the pods run %s, want the image they ran, %s", got, image)
			}
		})
	}
}

// TestWhatThePodTakesFromItsImage: every program the rendered pod runs (the container's command, its hooks'
// and probes') is listed in guest.ImageNeeds, and every absolute path it names, in squid.conf (with
// authentication and TLS, the most it names) and in those commands, is in one of the pod's own mounts, a
// device, or listed there too: a new thing taken from the image cannot come in unlisted, past the rule
// written there.
func TestWhatThePodTakesFromItsImage(t *testing.T) {
	t.Parallel()
	spec := testSpec("p1")
	spec.Proxy.Users = []proxyconf.BasicAuth{{Username: "u", Password: "password-1"}}
	tlsSettings := testTLS()
	spec.Proxy.TLS = &tlsSettings
	b, _ := newFake(t)
	o, err := b.render(spec, testID())
	if err != nil {
		t.Fatal(err)
	}
	c := o.deployment.Spec.Template.Spec.Containers[0]
	var mounts []string
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, m.MountPath+"/")
	}
	covered := func(path string) bool {
		return slices.Contains(guest.ImageNeeds, path) || strings.HasPrefix(path, "/dev/") || strings.HasPrefix(path, "/proc/self/") ||
			slices.ContainsFunc(mounts, func(m string) bool { return strings.HasPrefix(path, m) })
	}
	// Every program the container runs: its command, and those of its hooks and probes.
	texts := map[string]string{
		"squid.conf":              o.configMap.Data[guest.ConfigKey],
		"the container's command": strings.Join(append(slices.Clone(c.Command), c.Args...), " "),
	}
	programs := map[string][]string{"the container's command": c.Command}
	if l := c.Lifecycle; l != nil {
		for what, h := range map[string]*corev1.LifecycleHandler{"the preStop hook": l.PreStop, "the postStart hook": l.PostStart} {
			if h != nil && h.Exec != nil {
				programs[what], texts[what] = h.Exec.Command, strings.Join(h.Exec.Command, " ")
			}
		}
	}
	for what, p := range map[string]*corev1.Probe{"the readiness probe": c.ReadinessProbe, "the liveness probe": c.LivenessProbe, "the startup probe": c.StartupProbe} {
		if p != nil && p.Exec != nil {
			programs[what], texts[what] = p.Exec.Command, strings.Join(p.Exec.Command, " ")
		}
	}
	for what, command := range programs {
		if len(command) > 0 && !slices.Contains(guest.ImageNeeds, command[0]) {
			t.Errorf("%s runs %s, which is not in guest.ImageNeeds %v", what, command[0], guest.ImageNeeds)
		}
	}
	for what, text := range texts {
		for line := range strings.Lines(text) {
			if strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			for _, field := range strings.FieldsFunc(line, func(r rune) bool { return strings.ContainsRune(" \t\n'\"=;()<>", r) }) {
				path := strings.TrimPrefix(field, "stdio:")
				// Paths in URLs are the proxy's to answer (the readiness probe's, from Squid's icons: listed).
				if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, proxyconf.HealthPath) || covered(path) {
					continue
				}
				t.Errorf("%s names %s, which is in no mount of the pod and not in guest.ImageNeeds", what, path)
			}
		}
	}
}
