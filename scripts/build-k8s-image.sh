#!/usr/bin/env bash
# build-k8s-image.sh [OUT]: builds the proxy's container image for Kubernetes from Debian packages, as an OCI
# image archive that `ctr images import` (and `docker load`, `skopeo copy oci-archive:`) reads, and prints its
# path. The release builds the same image with this script, once per architecture, and publishes it as
# ghcr.io/egress-proxies/squid:<provider version>, the provider's default image (.github/workflows/release.yml).
#
# The root filesystem is a debootstrap (minbase) tree of Debian 12 with squid-openssl, the same Squid the proxy
# VMs run (Debian's default squid is the GnuTLS build, whose TLS listener leaves a certificate's intermediates
# out); the kubernetes guest's pod (internal/backend/kubernetes/guest) starts it with /bin/sh, chown and
# /usr/sbin/squid, all in it. A proxy with metrics runs two sidecars from the same image (internal/metrics):
# Debian's mtail, and the one program of Debian's prometheus-squid-exporter, taken out of its package: the
# package depends on systemd-sysv for its unit, which a container has no use for. One layer, no registry needed. The same archive holds a second image, the pod
# sandbox ("pause") image of the test cluster: the same layer with /bin/sleep as its process, so the cluster
# needs no image from a registry.
# Each image has a ref name (org.opencontainers.image.ref.name: squid, pause) to pick it by, and the name it is
# imported under (io.containerd.image.name): localhost/egress-proxies/squid:dev, the image a provider built
# from a tree that follows no release defaults to (internal/backend/kubernetes/config.go), and
# localhost/egress-proxies/pause:dev. Both are local names no registry serves: the test cluster has them
# from the import and never pulls them.
#
# EGRESS_IMAGE_ARCH (amd64 or arm64; default: the machine's) is the image's architecture. debootstrap runs
# the packages' scripts, so it must be the machine's own: the release builds each on a runner of that
# architecture.
#
# Cached under $HOME/.cache/terraform-provider-egress/images/ with a stamp holding the hash of this script and
# the architecture; when it matches, nothing is rebuilt. To run the image on a real cluster, push it to your
# registry and set the provider's or the proxy's kubernetes image to that reference, e.g. from tools/ociimage:
#   go run ./pushimage REGISTRY/egress/squid:TAG ~/.cache/terraform-provider-egress/images/squid-oci.tar
# or with skopeo: skopeo copy oci-archive:squid-oci.tar:squid docker://REGISTRY/egress/squid:TAG
set -euo pipefail

[[ $(id -u) == 0 ]] || { echo "build-k8s-image: must run as root (debootstrap)" >&2; exit 1; }
cache=${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}
out=${1:-$cache/images/squid-oci.tar}
mirror=${EGRESS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
# The names the images are imported under (see above).
squid_ref=localhost/egress-proxies/squid:dev
pause_ref=localhost/egress-proxies/pause:dev
stamp=$out.stamp
host_arch=$(dpkg --print-architecture)
arch=${EGRESS_IMAGE_ARCH:-$host_arch}
case $arch in
amd64 | arm64) ;; # Debian's and OCI's names agree for these two
*)
	echo "build-k8s-image: EGRESS_IMAGE_ARCH=$arch: amd64 or arm64" >&2
	exit 2
	;;
esac

# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"
# shellcheck source=debcache.sh
. "$(dirname "${BASH_SOURCE[0]}")/debcache.sh"

# The same script builds a different archive per architecture: both go into the stamp.
want="$(sha256sum "$0" | cut -d' ' -f1) $arch"
if [[ -f $out && -f $stamp && $(cat "$stamp") == "$want" ]]; then
	echo "$out"
	exit 0
fi
if [[ $arch != "$host_arch" ]]; then
	echo "build-k8s-image: an $arch image is built on an $arch machine (this one is $host_arch): debootstrap runs its packages' scripts" >&2
	exit 2
fi
for tool in debootstrap jq sha256sum; do
	command -v "$tool" >/dev/null || { echo "build-k8s-image: $tool is missing (scripts/k8s-env.sh installs it)" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/egress-k8s-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
# The packages are kept for the next build in a cache this build copies from and gives back to (debcache.sh).
shared_debs=${EGRESS_IMAGE_DEB_CACHE:-$cache/images/debs}
debs=$work/debs
mkdir -p "$(dirname "$out")"
debcache_take "$shared_debs" "$debs"
log "debootstrap $suite $arch (minbase, squid-openssl) from $mirror"
if ! debootstrap --arch="$arch" --variant=minbase --cache-dir="$debs" --include=squid-openssl,mtail "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1; then
	tail -n 40 "$work/debootstrap.log" >&2
	exit 1
fi
debcache_give "$debs" "$shared_debs"
# The exporter's program alone (see above), from the same suite and mirror as the rest of the tree.
log "prometheus-squid-exporter's program"
echo "deb $mirror $suite main" >"$root/etc/apt/sources.list"
if ! { chroot "$root" apt-get -q update && chroot "$root" sh -c 'cd /tmp && apt-get -q download prometheus-squid-exporter'; } >"$work/exporter.log" 2>&1; then
	tail -n 40 "$work/exporter.log" >&2
	exit 1
fi
dpkg-deb -x "$root"/tmp/prometheus-squid-exporter_*.deb "$work/exporter"
install -m 0755 "$work/exporter/usr/bin/prometheus-squid-exporter" "$root/usr/bin/prometheus-squid-exporter"
rm -f "$root"/tmp/*.deb
for prog in /usr/bin/mtail /usr/bin/prometheus-squid-exporter; do
	[[ -x $root$prog ]] || { echo "build-k8s-image: $prog is missing from the image" >&2; exit 1; }
done
# The active-requests sidecar's shell and the programs its script calls by name (guest.MetricsImageNeeds),
# looked up inside the image, where awk is an alternative's link.
for prog in /bin/bash awk timeout; do
	# shellcheck disable=SC2016 # the inner shell expands its own argument
	chroot "$root" /bin/sh -c 'command -v "$1"' sh "$prog" >/dev/null || { echo "build-k8s-image: $prog is missing from the image" >&2; exit 1; }
done
if ! chroot "$root" /usr/sbin/squid -v | grep -q -- --with-openssl; then
	chroot "$root" /usr/sbin/squid -v >&2 || true
	echo "build-k8s-image: the image's squid is not the OpenSSL build" >&2
	exit 1
fi
# A container needs no package manager caches, docs or the logs of the install; squid's own directories stay.
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
	"$root"/usr/share/info/* "$root"/var/log/*.log "$root"/var/log/apt/* "$root"/debootstrap
: >"$root/etc/machine-id"

log "writing the OCI archive"
oci=$work/oci
mkdir -p "$oci/blobs/sha256"
# Reproducible enough: sorted names, fixed owner and time.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$root" -cf "$work/layer.tar" .
diff_id=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -n -1 -c "$work/layer.tar" >"$work/layer.tar.gz"
layer=$(sha256sum "$work/layer.tar.gz" | cut -d' ' -f1)
mv "$work/layer.tar.gz" "$oci/blobs/sha256/$layer"
layer_size=$(stat -c %s "$oci/blobs/sha256/$layer")

# blob FILE: moves FILE into the blob store and prints "digest size".
blob() {
	local d s
	d=$(sha256sum "$1" | cut -d' ' -f1)
	s=$(stat -c %s "$1")
	mv "$1" "$oci/blobs/sha256/$d"
	echo "$d $s"
}

# image REF REF_NAME ENTRYPOINT_JSON: writes the config and manifest of one image and prints its index entry.
image() {
	local ref=$1 ref_name=$2 entrypoint=$3 config manifest
	jq -n --arg diff "sha256:$diff_id" --arg arch "$arch" --argjson ep "$entrypoint" '{
		architecture: $arch, os: "linux", created: "1970-01-01T00:00:00Z",
		config: {Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], Entrypoint: $ep, WorkingDir: "/"},
		rootfs: {type: "layers", diff_ids: [$diff]},
		history: [{created: "1970-01-01T00:00:00Z", created_by: "scripts/build-k8s-image.sh: debootstrap minbase bookworm + squid, mtail, prometheus-squid-exporter"}]
	}' >"$work/config.json"
	read -r config config_size < <(blob "$work/config.json")
	jq -n --arg c "sha256:$config" --argjson cs "$config_size" --arg l "sha256:$layer" --argjson ls "$layer_size" '{
		schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
		config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $c, size: $cs},
		layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: $l, size: $ls}]
	}' >"$work/manifest.json"
	read -r manifest manifest_size < <(blob "$work/manifest.json")
	jq -n --arg m "sha256:$manifest" --argjson ms "$manifest_size" --arg ref "$ref" --arg name "$ref_name" --arg arch "$arch" '{
		mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $m, size: $ms,
		platform: {architecture: $arch, os: "linux"},
		annotations: {"io.containerd.image.name": $ref, "org.opencontainers.image.ref.name": $name}
	}'
}

squid=$(image "$squid_ref" squid '["/usr/sbin/squid", "-N"]')
pause=$(image "$pause_ref" pause '["/bin/sleep", "infinity"]')
jq -n --argjson a "$squid" --argjson b "$pause" '{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: [$a, $b]}' >"$oci/index.json"
echo '{"imageLayoutVersion": "1.0.0"}' >"$oci/oci-layout"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$oci" -cf "$out.tmp" .
mv "$out.tmp" "$out"
echo "$want" >"$stamp"
log "built $out ($(du -h "$out" | cut -f1))"
echo "$out"
