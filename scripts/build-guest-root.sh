#!/usr/bin/env bash
# Unpacks the proxy VM image's root filesystem into a directory tree, for tests that boot it as a container
# (systemd-nspawn) instead of a VM: the gcp backend's startup script is proved there on the image's own Squid
# and systemd. The tree is a read-only lower layer; tests write into an overlay of their own.
#
#   scripts/build-guest-root.sh [image]   prints the tree's path on stdout
#   scripts/build-guest-root.sh packages  installs the Debian packages it runs, and exits (make test-deps)
#
# Default image: ${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}/images/debian-12-squid.qcow2 (make
# image); the tree goes beside it as <image>.root, with a stamp holding the image's own stamp, so it is rebuilt
# whenever the image is. Like build-image.sh it mounts nothing: qemu-img makes a raw copy and debugfs copies
# the ext4 partition's files out, keeping owners and modes; curl is added (see below). Needs root and Debian
# packages.
set -euo pipefail

# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"

# install_tools installs what the tree's build and its tests run: debugfs, and systemd-nspawn, which boots it.
install_tools() {
	"$(dirname "$0")/install-packages.sh" --for debugfs:e2fsprogs systemd-nspawn:systemd-container
}
if [[ ${1:-} == packages ]]; then
	install_tools
	exit 0
fi

cache=${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}
image=${1:-$cache/images/debian-12-squid.qcow2}
tree=${image%.qcow2}.root
stamp=$tree.stamp

[[ -f $image && -f $image.stamp ]] || { echo "build-guest-root: no image at $image (make image)" >&2; exit 1; }
want=$(cat "$image.stamp")
if [[ -d $tree && -f $stamp && $(cat "$stamp") == "$want" ]]; then
	echo "$tree"
	exit 0
fi
[[ $(id -u) == 0 ]] || { echo "build-guest-root: must run as root (file owners)" >&2; exit 1; }

install_tools

exec 9>"$tree.lock"
flock 9
if [[ -d $tree && -f $stamp && $(cat "$stamp") == "$want" ]]; then
	echo "$tree"
	exit 0
fi

start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/var/tmp}/egress-guest-root.XXXXXX")
trap 'rm -rf "$work"' EXIT
qemu-img convert -O raw "$image" "$work/disk.raw"
# The root filesystem is the first partition; its offset comes from the partition table build-image.sh wrote.
offset=$(sfdisk -J "$work/disk.raw" | jq '.partitiontable.partitions[0].start * 512')
mkdir "$work/root"
debugfs -R "rdump / $work/root" "$work/disk.raw?offset=$offset" >/dev/null 2>"$work/debugfs.log" ||
	{ cat "$work/debugfs.log" >&2; exit 1; }
[[ -x $work/root/usr/sbin/squid && -x $work/root/lib/systemd/systemd ]] ||
	{ echo "build-guest-root: $image holds no squid or systemd" >&2; exit 1; }
# Debian's GCE images ship curl, which the startup script needs to reach the metadata server; the VM image
# does not (cloud-init reads its seed ISO). Installed as the image installs its packages: from Debian, with
# no service started by a package script.
printf '#!/bin/sh\nexit 101\n' >"$work/root/usr/sbin/policy-rc.d"
chmod 755 "$work/root/usr/sbin/policy-rc.d"
systemd-nspawn -q -D "$work/root" --register=no --keep-unit --resolv-conf=copy-host --pipe \
	sh -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends curl ca-certificates && apt-get clean' >&2
rm -f "$work/root/usr/sbin/policy-rc.d"
rm -rf "$tree" "$stamp"
mv "$work/root" "$tree"
printf '%s\n' "$want" >"$stamp"
log "unpacked $image into $tree in $(($(date +%s) - start))s"
echo "$tree"
