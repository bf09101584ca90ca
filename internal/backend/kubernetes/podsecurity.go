package kubernetes

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
)

// proxyUID is the uid and gid of the proxy user in the Squid image: Debian's base-passwd gives proxy the
// fixed id 13 (group 13), so every Debian-based Squid image, scripts/build-k8s-image.sh's included, has it.
// The pod runs as that user from the start: Squid, not root, needs no user switch, and the restricted Pod
// Security Standard admits it.
const proxyUID = 13

// scratchDirs are the folders Squid may write in, each an emptyDir named here, as the root filesystem is
// read-only: its state and IPC folder, its log folder (for anything logged to a file) and /tmp. The pid file
// is off, and the logs go to stdout and the termination log (guest.RenderPod). /var/spool/squid,
// coredump_dir, stays read-only on purpose: a core of Squid holds the passwords of recent clients in clear,
// and must not land on the node's disk.
var scratchDirs = []struct{ volume, path string }{
	{"squid-run", "/var/run/squid"},
	{"squid-log", "/var/log/squid"},
	{"tmp", "/tmp"},
}

// scratchLimit bounds each writable folder: Squid keeps a few small files there, no cache.
const scratchLimit = "16Mi"

// scratchVolumes are the emptyDirs behind scratchDirs and their mounts.
func scratchVolumes() ([]corev1.Volume, []corev1.VolumeMount) {
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, d := range scratchDirs {
		// A Quantity of its own for each volume: encoding one caches its string form in it, so a Quantity
		// shared by the Deployments that proxies create side by side is written by each (a data race).
		limit := resource.MustParse(scratchLimit)
		vols = append(vols, corev1.Volume{Name: d.volume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: d.volume, MountPath: d.path})
	}
	return vols, mounts
}

// podSecurityContext and containerSecurityContext meet the restricted Pod Security Standard, so the proxy
// runs in namespaces labelled pod-security.kubernetes.io/enforce: restricted. Seccomp is set on both levels:
// the pod's covers any container added later, the container's says it where one reads the container.
func podSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To(int64(proxyUID)),
		RunAsGroup:     ptr.To(int64(proxyUID)),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func containerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To(int64(proxyUID)),
		RunAsGroup:               ptr.To(int64(proxyUID)),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// upgradePodTemplate brings the Squid container of a pod template, perhaps made by an older provider, to
// today's form: command, its downward API variables, termination message file, security contexts, scratch
// folders and the pause before it stops. Reconfigure runs it with every rollout, so a proxy's pods never pair
// a new squid.conf (cache log in the termination file, own-address list) with an old command (no copy of it on
// stderr, no list written), and older proxies become restricted with their next change.
func upgradePodTemplate(pod *corev1.PodSpec, k guest.Pod) {
	pod.SecurityContext = podSecurityContext()
	vols, mounts := scratchVolumes()
	for i := range pod.Containers {
		c := &pod.Containers[i]
		if c.Name != containerName {
			continue
		}
		c.Command, c.Args = k.Command, k.Args
		c.Env = fieldEnv(k)
		c.TerminationMessagePath = k.TerminationMessagePath
		c.SecurityContext = containerSecurityContext()
		c.Lifecycle = drainBeforeStop()
		for _, m := range mounts {
			if !slices.ContainsFunc(c.VolumeMounts, func(have corev1.VolumeMount) bool { return have.Name == m.Name }) {
				c.VolumeMounts = append(c.VolumeMounts, m)
			}
		}
	}
	for _, v := range vols {
		if !slices.ContainsFunc(pod.Volumes, func(have corev1.Volume) bool { return have.Name == v.Name }) {
			pod.Volumes = append(pod.Volumes, v)
		}
	}
}
