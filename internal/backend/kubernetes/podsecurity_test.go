package kubernetes

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// restrictedRules are the Pod Security Standards' restricted profile (which includes baseline), rule by rule
// as https://kubernetes.io/docs/concepts/security/pod-security-standards/ lists them, each returning why the
// pod breaks it. The real API server enforces the same in the acceptance tests' labelled namespaces.
var restrictedRules = map[string]func(corev1.PodSpec) error{
	"host namespaces": func(p corev1.PodSpec) error {
		if p.HostNetwork || p.HostPID || p.HostIPC {
			return fmt.Errorf("host network, pid or ipc")
		}
		return nil
	},
	"privileged containers": eachContainer(func(c corev1.Container) error {
		if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
			return fmt.Errorf("privileged")
		}
		return nil
	}),
	"host path volumes and volume types": func(p corev1.PodSpec) error {
		for _, v := range p.Volumes {
			vs := v.VolumeSource
			if vs.ConfigMap == nil && vs.Secret == nil && vs.EmptyDir == nil && vs.Projected == nil && vs.DownwardAPI == nil &&
				vs.CSI == nil && vs.Ephemeral == nil && vs.PersistentVolumeClaim == nil {
				return fmt.Errorf("volume %s is of a type the restricted profile refuses", v.Name)
			}
		}
		return nil
	},
	"host ports": eachContainer(func(c corev1.Container) error {
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				return fmt.Errorf("host port %d", p.HostPort)
			}
		}
		return nil
	}),
	"privilege escalation": eachContainer(func(c corev1.Container) error {
		if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			return fmt.Errorf("allowPrivilegeEscalation is not false")
		}
		return nil
	}),
	"running as non-root": func(p corev1.PodSpec) error {
		podSays := p.SecurityContext != nil && p.SecurityContext.RunAsNonRoot != nil && *p.SecurityContext.RunAsNonRoot
		return eachContainer(func(c corev1.Container) error {
			sc := c.SecurityContext
			if sc != nil && sc.RunAsNonRoot != nil {
				if !*sc.RunAsNonRoot {
					return fmt.Errorf("runAsNonRoot false")
				}
				return nil
			}
			if !podSays {
				return fmt.Errorf("runAsNonRoot unset")
			}
			return nil
		})(p)
	},
	"running as non-root user": func(p corev1.PodSpec) error {
		if p.SecurityContext != nil && p.SecurityContext.RunAsUser != nil && *p.SecurityContext.RunAsUser == 0 {
			return fmt.Errorf("pod runAsUser 0")
		}
		return eachContainer(func(c corev1.Container) error {
			if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil && *c.SecurityContext.RunAsUser == 0 {
				return fmt.Errorf("runAsUser 0")
			}
			return nil
		})(p)
	},
	"seccomp": func(p corev1.PodSpec) error {
		ok := func(s *corev1.SeccompProfile) bool {
			return s != nil && (s.Type == corev1.SeccompProfileTypeRuntimeDefault || s.Type == corev1.SeccompProfileTypeLocalhost)
		}
		var pod *corev1.SeccompProfile
		if p.SecurityContext != nil {
			pod = p.SecurityContext.SeccompProfile
		}
		// The issue asks for both levels: the pod's for any container added later, the container's to be explicit.
		if !ok(pod) {
			return fmt.Errorf("pod seccompProfile is not RuntimeDefault or Localhost")
		}
		return eachContainer(func(c corev1.Container) error {
			if c.SecurityContext == nil || !ok(c.SecurityContext.SeccompProfile) {
				return fmt.Errorf("container seccompProfile is not RuntimeDefault or Localhost")
			}
			return nil
		})(p)
	},
	"capabilities": eachContainer(func(c corev1.Container) error {
		sc := c.SecurityContext
		if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			return fmt.Errorf("capabilities do not drop ALL")
		}
		for _, a := range sc.Capabilities.Add {
			if a != "NET_BIND_SERVICE" {
				return fmt.Errorf("adds capability %s", a)
			}
		}
		return nil
	}),
	"proc mount, sysctls, SELinux, AppArmor": func(p corev1.PodSpec) error {
		if p.SecurityContext != nil && len(p.SecurityContext.Sysctls) > 0 {
			return fmt.Errorf("sysctls")
		}
		return eachContainer(func(c corev1.Container) error {
			if sc := c.SecurityContext; sc != nil && (sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount ||
				sc.SELinuxOptions != nil || sc.AppArmorProfile != nil && sc.AppArmorProfile.Type == corev1.AppArmorProfileTypeUnconfined) {
				return fmt.Errorf("proc mount, SELinux options or an unconfined AppArmor profile")
			}
			return nil
		})(p)
	},
	// Not in the profile, asked by the issue: nothing in the image can be changed by a compromised Squid.
	"read-only root filesystem": eachContainer(func(c corev1.Container) error {
		if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
			return fmt.Errorf("root filesystem is writable")
		}
		return nil
	}),
}

func eachContainer(f func(corev1.Container) error) func(corev1.PodSpec) error {
	return func(p corev1.PodSpec) error {
		for _, c := range append(append([]corev1.Container{}, p.InitContainers...), p.Containers...) {
			if err := f(c); err != nil {
				return fmt.Errorf("container %s: %w", c.Name, err)
			}
		}
		return nil
	}
}

func TestPodMeetsTheRestrictedProfile(t *testing.T) {
	t.Parallel()
	spec := testSpec("p1")
	spec.Proxy.Users = []proxyconf.BasicAuth{{Username: "u", Password: "password-1"}}
	b, _ := newFake(t)
	o, err := b.render(spec, testID())
	if err != nil {
		t.Fatal(err)
	}
	pod := o.deployment.Spec.Template.Spec
	for rule, check := range restrictedRules {
		t.Run(rule, func(t *testing.T) {
			t.Parallel()
			if err := check(pod); err != nil {
				t.Error(err)
			}
		})
	}
	t.Run("runs as the image's proxy user", func(t *testing.T) {
		t.Parallel()
		sc := pod.SecurityContext
		if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != proxyUID || sc.RunAsGroup == nil || *sc.RunAsGroup != proxyUID {
			t.Errorf("pod security context %+v, want uid and gid %d", sc, proxyUID)
		}
	})
	t.Run("every path Squid writes is a volume", func(t *testing.T) {
		t.Parallel()
		conf := o.configMap.Data[guest.ConfigKey]
		mounts := map[string]bool{}
		for _, m := range pod.Containers[0].VolumeMounts {
			if !m.ReadOnly {
				mounts[m.MountPath] = true
			}
		}
		var dirs []string
		for _, d := range scratchDirs {
			dirs = append(dirs, d.path)
			if !mounts[d.path] {
				t.Errorf("%s is not a writable mount", d.path)
			}
		}
		// The files squid.conf names for writing: each must be a device, the termination log or in a mount.
		for _, line := range strings.Split(conf, "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || !slices.Contains([]string{"cache_log", "access_log", "pid_filename"}, f[0]) {
				continue
			}
			path := strings.TrimPrefix(f[1], "stdio:")
			if path == "none" || strings.HasPrefix(path, "/dev/") {
				continue
			}
			if !slices.ContainsFunc(dirs, func(d string) bool { return strings.HasPrefix(path, d+"/") }) {
				t.Errorf("squid.conf %s %s: not in a writable mount", f[0], path)
			}
		}
	})
}

// reconfigureAnOlderPod makes proxy p1, turns its pod template into one an earlier version made (older
// edits it), and changes its rules in place: it returns the pod template after that rollout, and the one
// today's version renders for the new rules.
func reconfigureAnOlderPod(t *testing.T, older func(*corev1.PodSpec)) (got, want corev1.PodSpec) {
	t.Helper()
	ctx := testCtx(t)
	b, cs := newFake(t)
	controller(ctx, t, cs, nil)
	spec := testSpec("p1")
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	d, err := cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	older(&d.Spec.Template.Spec)
	if _, err := cs.AppsV1().Deployments(testNS).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	next := spec.Proxy
	next.AllowedDestinations = []string{"example.org"}
	if _, err := b.Reconfigure(ctx, testID(), next); err != nil {
		t.Fatal(err)
	}
	d, err = cs.AppsV1().Deployments(testNS).Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec.Proxy = next
	rendered, err := b.render(spec, testID())
	if err != nil {
		t.Fatal(err)
	}
	return d.Spec.Template.Spec, rendered.deployment.Spec.Template.Spec
}

// TestReconfigureUpgradesAnOlderPod: a proxy made before the pods were restricted (root, writable root
// filesystem, cache log on stderr) gets today's pod with its next rollout.
func TestReconfigureUpgradesAnOlderPod(t *testing.T) {
	t.Parallel()
	pod, wantPod := reconfigureAnOlderPod(t, func(old *corev1.PodSpec) {
		old.SecurityContext, old.Containers[0].SecurityContext, old.Containers[0].TerminationMessagePath = nil, nil, ""
		old.Containers[0].Command = []string{"/bin/sh", "-c", "exec /usr/sbin/squid -N -f \"$1\"", "egress-proxy"}
		old.Volumes, old.Containers[0].VolumeMounts = old.Volumes[:1], old.Containers[0].VolumeMounts[:1]
	})
	for rule, check := range restrictedRules {
		if err := check(pod); err != nil {
			t.Errorf("%s: %v", rule, err)
		}
	}
	wc := wantPod.Containers[0]
	if c := pod.Containers[0]; !slices.Equal(c.Command, wc.Command) || c.TerminationMessagePath != wc.TerminationMessagePath || len(c.VolumeMounts) != len(wc.VolumeMounts) {
		t.Errorf("container after Reconfigure %+v, want %+v", c, wc)
	}
}

// Each proxy's volumes get Quantities of their own: encoding a Quantity writes its cached string form, so one
// shared between Deployments created side by side was a data race (found under -race on the real cluster).
func TestScratchVolumesShareNoQuantity(t *testing.T) {
	t.Parallel()
	a, _ := scratchVolumes()
	b, _ := scratchVolumes()
	seen := map[*resource.Quantity]bool{}
	for _, v := range append(a, b...) {
		q := v.EmptyDir.SizeLimit
		if q == nil || seen[q] {
			t.Fatalf("volume %s: size limit %p shared or missing", v.Name, q)
		}
		seen[q] = true
	}
}
