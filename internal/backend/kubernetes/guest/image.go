package guest

import "github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"

// ImageNeeds is everything the pod a provider renders takes from its image, besides the files the backend
// mounts (ConfigDir, SecretDir and the scratch folders): the programs its start command and its hooks run, and
// the files its squid.conf names. The image's Squid must also parse that squid.conf, and the image must have the proxy
// user as uid 13 (the pod runs as it).
//
// A proxy's pods keep the image they were made with: the image is part of the placement, a change of it
// replaces the proxy, and a new provider version changes nothing by itself. A rule change made by a newer
// provider is therefore written onto pods running an older image, with the newer provider's squid.conf, password
// file and start command (Reconfigure brings the pod template to today's form). So the rule is: what RenderPod
// writes is understood by the image of every earlier release, which is Debian 12's squid-openssl (Squid 5.7)
// from scripts/build-k8s-image.sh. Adding to this list, or writing a directive an earlier image's Squid does not
// know, breaks that; then RenderPod must write the older form for an older image instead. Squid 5.7 does not
// start with a directive it does not recognize (nor does `squid -k parse` pass it), so such a change fails the
// rollout: the new pods crash, the apply reports it, and the pods of the previous configuration keep serving
// until they restart. The acceptance test checks what the rolled pods serve, not only that they start.
// TestWhatThePodTakesFromItsImage keeps this list whole, and TestAccUpgrade_kubernetesOlderImage runs a newer
// provider's rule change on the baseline's image.
var ImageNeeds = []string{
	"/bin/sh",
	"chown",      // the start command runs it by name: coreutils, in every Debian image
	"/bin/sleep", // the preStop hook's pause (kubernetes' drainBeforeStop): coreutils too
	SquidPath,
	proxyconf.AuthHelperPath,
	proxyconf.CoredumpDir,
	// Squid answers the readiness probe's proxyconf.HealthPath from its own icons.
	"/usr/share/squid/icons/SN.png",
}

// MetricsImageNeeds is what a proxy with metrics takes from its image besides ImageNeeds: the sidecars'
// programs (metrics.go), which scripts/build-k8s-image.sh installs since metrics came. They break the rule
// above for those proxies alone: an image of an earlier release lacks them, so metrics turned on for a proxy
// that runs one fail their rollout (the sidecars cannot start; the apply reports it, and the pods of the
// previous configuration keep serving), and such a proxy gets metrics by moving to today's image, a
// replacement. A proxy without metrics takes nothing new. The active-requests sidecar's script
// (internal/metrics/active.go) runs with bash and calls awk and timeout by name: debootstrap's minbase brings
// them (bash, mawk, coreutils), and the image build checks that they are there.
var MetricsImageNeeds = []string{MtailPath, SquidExporterPath, "/bin/bash", "awk", "timeout"}
