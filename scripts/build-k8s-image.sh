#!/usr/bin/env bash
# build-k8s-image.sh: builds the proxy's container image for Kubernetes from Debian packages, as an OCI image
# archive that `ctr images import` (and `docker load`, `skopeo copy oci-archive:`) reads, and prints its path.
#
# The root filesystem is a debootstrap (minbase) tree of Debian 12 with squid-openssl, the same Squid the proxy
# VMs run (Debian's default squid is the GnuTLS build, whose TLS listener leaves a certificate's intermediates
# out); internal/proxyconf's Kubernetes form starts it with /bin/sh, chown and /usr/sbin/squid, all in it. One
# layer, no registry needed. The same archive holds a second image, the pod sandbox ("pause") image of the
# test cluster: the same layer with /bin/sleep as its process, so the cluster needs no image from a registry.
#
# Cached under $HOME/.cache/terraform-provider-egress/images/ with a stamp holding the hash of this script;
# when it matches, nothing is rebuilt. To use the image on a real cluster, push it to your registry, e.g.
#   docker load -i squid-oci.tar && docker tag egress-proxies/squid:debian12 REGISTRY/egress/squid:debian12 &&
#   docker push REGISTRY/egress/squid:debian12
# (both images carry the ref name debian12; the image names are in io.containerd.image.name) and set the
# provider's or the proxy's kubernetes image to that reference.
set -euo pipefail

[[ $(id -u) == 0 ]] || { echo "build-k8s-image: must run as root (debootstrap)" >&2; exit 1; }
cache=${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}
out=${1:-$cache/images/squid-oci.tar}
mirror=${EGRESS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
# The names the images are imported under; kubelets normalise "egress-proxies/squid:debian12" to the first.
squid_ref=docker.io/egress-proxies/squid:debian12
pause_ref=docker.io/egress-proxies/pause:debian12
stamp=$out.stamp

log() { printf '%s build-k8s-image: %s\n' "$(date +%T)" "$*" >&2; }

want=$(sha256sum "$0" | cut -d' ' -f1)
if [[ -f $out && -f $stamp && $(cat "$stamp") == "$want" ]]; then
	echo "$out"
	exit 0
fi
for tool in debootstrap jq sha256sum; do
	command -v "$tool" >/dev/null || { echo "build-k8s-image: $tool is missing (scripts/k8s-env.sh installs it)" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/egress-k8s-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
debs=${EGRESS_IMAGE_DEB_CACHE:-$cache/images/debs}
mkdir -p "$debs" "$(dirname "$out")"
log "debootstrap $suite (minbase, squid-openssl) from $mirror"
if ! debootstrap --variant=minbase --cache-dir="$debs" --include=squid-openssl "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1; then
	tail -n 40 "$work/debootstrap.log" >&2
	exit 1
fi
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

# image REF ENTRYPOINT_JSON: writes the config and manifest of one image and prints its index entry.
image() {
	local ref=$1 entrypoint=$2 config manifest
	jq -n --arg diff "sha256:$diff_id" --argjson ep "$entrypoint" '{
		architecture: "amd64", os: "linux", created: "1970-01-01T00:00:00Z",
		config: {Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], Entrypoint: $ep, WorkingDir: "/"},
		rootfs: {type: "layers", diff_ids: [$diff]},
		history: [{created: "1970-01-01T00:00:00Z", created_by: "scripts/build-k8s-image.sh: debootstrap minbase bookworm + squid"}]
	}' >"$work/config.json"
	read -r config config_size < <(blob "$work/config.json")
	jq -n --arg c "sha256:$config" --argjson cs "$config_size" --arg l "sha256:$layer" --argjson ls "$layer_size" '{
		schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
		config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $c, size: $cs},
		layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: $l, size: $ls}]
	}' >"$work/manifest.json"
	read -r manifest manifest_size < <(blob "$work/manifest.json")
	jq -n --arg m "sha256:$manifest" --argjson ms "$manifest_size" --arg ref "$ref" '{
		mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $m, size: $ms,
		platform: {architecture: "amd64", os: "linux"},
		annotations: {"io.containerd.image.name": $ref, "org.opencontainers.image.ref.name": ($ref | sub(".*:"; ""))}
	}'
}

squid=$(image "$squid_ref" '["/usr/sbin/squid", "-N"]')
pause=$(image "$pause_ref" '["/bin/sleep", "infinity"]')
jq -n --argjson a "$squid" --argjson b "$pause" '{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: [$a, $b]}' >"$oci/index.json"
echo '{"imageLayoutVersion": "1.0.0"}' >"$oci/oci-layout"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$oci" -cf "$out.tmp" .
mv "$out.tmp" "$out"
echo "$want" >"$stamp"
log "built $out ($(du -h "$out" | cut -f1))"
echo "$out"
