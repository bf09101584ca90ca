#!/usr/bin/env bash
# Builds the proxy VM base image: a bootable qcow2 disk used exactly like a cloud image (the kvm backend clones it
# as the backing file of each proxy's root volume and attaches a NoCloud seed ISO labelled "cidata").
#
#   scripts/build-image.sh [--force] [output-path]   build (or reuse) the image; prints its path on stdout
#   scripts/build-image.sh --smoke-test [image]      boot a throw-away copy inside the egress-test namespace
#                                                    (see scripts/image/smoke-test.sh)
#   scripts/build-image.sh packages                  install the Debian packages the build runs, and exit
#                                                    (make test-deps: every package before any test starts)
#
# Default output: ${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}/images/debian-12-squid.qcow2. A stamp
# file beside it holds a hash of this script's inputs; when it matches, the script prints the path and exits.
#
# Offline except for Debian packages (EGRESS_DEBIAN_MIRROR, default http://deb.debian.org/debian). Needs root.
#
# How the disk is made, and why: no loop, nbd or mount is used at all, so it works in containers and on machines
# without loop devices. The root filesystem is a debootstrap tree; mkfs.ext4 -d writes it straight into a sparse
# raw disk file at the partition's offset (-E offset=); sfdisk writes an MBR partition table into the same file;
# the bootloader is GRUB for BIOS (i386-pc), installed by hand the way grub-install would on a hard disk: boot.img
# in the first 440 bytes of the MBR, and a core.img made by grub-mkimage (every module it needs built in, prefix
# (hd0,msdos1)/boot/grub) in the gap between the MBR and the first partition at 1 MiB. grub-mkimage already writes
# the blocklist of a core.img that sits right after the MBR, so no grub-bios-setup (which wants a block device)
# is needed. extlinux was not chosen because it can only be installed into a mounted filesystem. GRUB reads
# /boot/grub/grub.cfg, written here (not by update-grub: no bootloader package is installed in the guest), which
# boots /vmlinuz and /initrd.img, the symlinks Debian's kernel packages keep current.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
imagedir=$here/image

# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"
# shellcheck source=debcache.sh
. "$(dirname "${BASH_SOURCE[0]}")/debcache.sh"

# install_tools installs the packages of the programs (and GRUB's boot sector file) the build runs, those missing.
install_tools() {
	"$(dirname "$0")/install-packages.sh" --for debootstrap:debootstrap qemu-img:qemu-utils sfdisk:fdisk \
		mkfs.ext4:e2fsprogs grub-mkimage:grub-common /usr/lib/grub/i386-pc/boot.img:grub-pc-bin
}

if [[ ${1:-} == packages ]]; then
	install_tools
	exit 0
fi

if [[ ${1:-} == --smoke-test ]]; then
	shift
	exec "$imagedir/smoke-test.sh" "$@"
fi

force=0
if [[ ${1:-} == --force ]]; then
	force=1
	shift
fi

cache=${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}
out=${1:-$cache/images/debian-12-squid.qcow2}
mirror=${EGRESS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
disk_mib=${EGRESS_IMAGE_DISK_MIB:-2048} # virtual size; cloud-init grows the root partition to the proxy's disk

# The kernel is installed after debootstrap, from the security suite when newer there. Not Debian's smaller
# linux-image-cloud-amd64: it lacks AHCI (CONFIG_SATA_AHCI), and the kvm backend's q35 domains attach the seed
# ISO as a SATA cdrom.
kernel=${EGRESS_IMAGE_KERNEL:-linux-image-amd64}
# squid-openssl, not Debian's default squid: that one is built with GnuTLS, and its Squid 5.7 TLS listener (the
# proxy's optional tls) sends only the first certificate of the chain, so clients cannot verify a certificate
# issued by an intermediate CA. The OpenSSL build sends the whole chain (internal/proxyconf's TLS test).
# nftables: the guest loads the proxy's backstop below Squid with nft before Squid starts
# (internal/proxyconf/nftables.go); minbase leaves it out.
# rsyslog: follows Squid's access log file into the journal (imfile, omjournal) and, when the proxy has a
# syslog_target, forwards it there (omfwd) (internal/backend/kvm/guest/accesslog.go); its configuration is the
# image's own rsyslog.conf (scripts/image/rootfs), which reads nothing else.
# mtail, prometheus-squid-exporter: a proxy with metrics runs them (internal/proxyconf/vmguest/metrics.go);
# installed but not started at boot (configure-rootfs.sh), so a proxy without metrics opens no port for them.
# keepalived: a proxy of several instances moves its virtual address between them by VRRP
# (internal/backend/kvm/guest/vrrp.go); installed but not started at boot, so a proxy of one runs no VRRP.
packages=(
	systemd-sysv udev kmod dbus initramfs-tools
	cloud-init cloud-guest-utils fdisk python3-cffi-backend
	squid-openssl
	nftables
	rsyslog
	mtail prometheus-squid-exporter
	keepalived
	ifupdown isc-dhcp-client iproute2 netbase
	qemu-guest-agent
)


# What the image is made from: this script, configure-rootfs.sh and the guest files it copies in (not the smoke test).
inputs_hash() {
	{
		sha256sum "$here/build-image.sh" "$imagedir/configure-rootfs.sh"
		find "$imagedir/rootfs" -type f -print0 2>/dev/null | sort -z | xargs -0 -r sha256sum
		printf '%s\n' "$mirror" "$suite" "$disk_mib" "$kernel" "${packages[*]}"
	} | sed "s#$here##" | sha256sum | cut -d' ' -f1
}

mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
stamp=$out.stamp
hash=$(inputs_hash)

valid() {
	[[ -f $out && -f $stamp && $(cat "$stamp") == "$hash" ]] &&
		qemu-img info --output=json "$out" 2>/dev/null | grep -q '"format": "qcow2"'
}

if [[ $force == 0 ]] && valid; then
	echo "$out"
	exit 0
fi

[[ $(id -u) == 0 ]] || { echo "build-image: must run as root (debootstrap, chroot)" >&2; exit 1; }

# One build per output at a time; the second waits and then finds the image ready.
exec 9>"$out.lock"
flock 9
if [[ $force == 0 ]] && valid; then
	echo "$out"
	exit 0
fi

start=$(date +%s)
install_tools

work=$(mktemp -d "${TMPDIR:-/var/tmp}/egress-image.XXXXXX")
root=$work/root

# Unmount whatever is still mounted under the tree before removing it, and never cross into another filesystem.
cleanup() {
	local m
	while read -r m; do
		umount -l "$m" || true
	done < <(awk -v r="$root" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/mounts | sort -r)
	if awk -v r="$root" '$2 == r || index($2, r "/") == 1 {found=1} END {exit !found}' /proc/mounts; then
		echo "build-image: $root still has mounts; leaving $work" >&2
		return
	fi
	rm -rf --one-file-system "$work"
}
trap cleanup EXIT

in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"; }

log "debootstrap $suite (minbase) from $mirror into $work"
include=$(IFS=,; echo "${packages[*]}")
# Downloaded packages are kept for the next build (a changed script rebuilds without downloading them again), in a
# cache this build copies from and gives back to (debcache.sh), never shares while it runs.
shared_debs=${EGRESS_IMAGE_DEB_CACHE:-$cache/images/debs}
debs=$work/debs
mkdir -p "$shared_debs"
find "$shared_debs" -name '*.deb' -mtime +60 -delete 2>/dev/null || true
debcache_take "$shared_debs" "$debs"
if ! debootstrap --variant=minbase --cache-dir="$debs" --include="$include" "$suite" "$root" "$mirror" \
	>"$work/debootstrap.log" 2>&1; then
	tail -n 40 "$work/debootstrap.log" >&2
	[[ -f $root/debootstrap/debootstrap.log ]] && tail -n 40 "$root/debootstrap/debootstrap.log" >&2
	exit 1
fi

# Keep it small from here on (see rootfs/etc/dpkg/dpkg.cfg.d/90-egress-image), and drop what debootstrap already
# unpacked of the same.
install -D -m 0644 "$imagedir/rootfs/etc/dpkg/dpkg.cfg.d/90-egress-image" "$root/etc/dpkg/dpkg.cfg.d/90-egress-image"
find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$root/usr/share/man"/* "$root/usr/share/info"/*
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +

# Security and point updates, then anything debootstrap left unconfigured (it does not resolve virtual packages,
# which is why python3-cffi-backend is named above: cloud-init's dependencies need it).
# These sources stay in the image (cloud-init keeps them: preserve_sources_list); nothing in the guest uses them
# unless someone runs apt by hand.
log "updating packages from $suite-security and $suite-updates"
cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb ${EGRESS_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security} $suite-security main
EOF
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" # start no service inside the chroot
chmod 755 "$root/usr/sbin/policy-rc.d"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
in_root dpkg --configure -a >&2
find "$debs" -maxdepth 1 -name '*.deb' -exec cp -t "$root/var/cache/apt/archives/" {} +
in_root apt-get -q update >&2
apt_opts=(-q -y -o Dpkg::Options::=--force-confold -o APT::Install-Recommends=false)
in_root apt-get "${apt_opts[@]}" dist-upgrade >&2
in_root apt-get "${apt_opts[@]}" install "$kernel" "${packages[@]}" >&2
umount "$root/proc"
cp -n -t "$debs" "$root"/var/cache/apt/archives/*.deb 2>/dev/null || true
debcache_give "$debs" "$shared_debs"
if in_root dpkg --audit | grep -q .; then
	in_root dpkg --audit >&2
	echo "build-image: packages left unconfigured" >&2
	exit 1
fi
# The drivers a proxy VM boots with (q35 or pc machine, virtio disk and network, SATA or IDE cdrom seed).
kconfig=$(printf '%s\n' "$root"/boot/config-* | sort -V | tail -n 1)
for opt in VIRTIO_BLK VIRTIO_NET VIRTIO_PCI SATA_AHCI ATA_PIIX BLK_DEV_SR ISO9660_FS EXT4_FS SERIAL_8250_CONSOLE; do
	grep -Eq "^CONFIG_$opt=[ym]" "$kconfig" || { echo "build-image: $kconfig lacks CONFIG_$opt" >&2; exit 1; }
done
for p in unattended-upgrades systemd-timesyncd chrony ntp ntpsec openssh-server; do
	# shellcheck disable=SC2016 # dpkg-query's own ${Status}, not the shell's
	if in_root dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		in_root apt-get -q -y purge "$p" >&2
	fi
done

log "configuring the guest"
"$imagedir/configure-rootfs.sh" "$root" "$imagedir/rootfs"

# The guest fetches nothing at boot. The proxy VMs' guests (vmguest.InstallIfMissing in internal/proxyconf/vmguest)
# install squid-openssl only when "command -v squid" fails, after an apt-get update; here squid-openssl is
# installed, and even a "packages: [squid-openssl]" from other user-data would be satisfied without package lists or
# a network. Check both, and that the squid there is the OpenSSL build.
rm -f "$root/usr/sbin/policy-rc.d"
if ! in_root sh -c 'command -v squid' >/dev/null ||
	! in_root apt-get -s -o Debug::NoLocking=1 install squid-openssl 2>&1 | grep -q 'squid-openssl is already the newest version' ||
	! in_root squid -v | grep -q -- "--with-openssl"; then
	in_root apt-get -s install squid-openssl >&2 || true
	echo "build-image: squid-openssl is not installed as the user-data expects" >&2
	exit 1
fi

log "guest tree: $(du -sxh "$root" | cut -f1) ($(du -sxh "$root/usr/lib/modules" | cut -f1) kernel modules)"
log "making the disk"
uuid=$(cat /proc/sys/kernel/random/uuid)
sed -i "s/@ROOT_UUID@/$uuid/g" "$root/etc/fstab" "$root/boot/grub/grub.cfg"
raw=$work/disk.raw
part_start=2048 # sectors: 1 MiB, room for GRUB's core.img
truncate -s "${disk_mib}M" "$raw"
printf 'label: dos\nstart=%d, type=83, bootable\n' "$part_start" | sfdisk -q "$raw" >&2
part_sectors=$(sfdisk -l -o Sectors "$raw" | tail -n 1 | tr -d ' ')
# Features GRUB 2.06 reads; metadata_csum_seed and orphan_file it does not.
mkfs.ext4 -q -F -L egress-root -U "$uuid" -O ^metadata_csum_seed,^orphan_file -m 1 \
	-E offset=$((part_start * 512)),root_owner=0:0 -d "$root" "$raw" $((part_sectors / 2))k >&2

grub_dir=/usr/lib/grub/i386-pc
cat >"$work/early.cfg" <<'EOF'
set root=(hd0,msdos1)
set prefix=(hd0,msdos1)/boot/grub
EOF
grub-mkimage -O i386-pc -o "$work/core.img" -c "$work/early.cfg" -p '(hd0,msdos1)/boot/grub' \
	biosdisk part_msdos ext2 normal configfile linux boot serial terminal echo test sleep search search_fs_uuid \
	gzio minicmd
core_bytes=$(stat -c %s "$work/core.img")
((core_bytes < (part_start - 1) * 512)) || { echo "build-image: core.img ($core_bytes bytes) does not fit before the partition" >&2; exit 1; }
cp "$grub_dir/boot.img" "$work/boot.img"
# As grub-install does for a hard disk: replace the jump over the buggy-BIOS boot drive workaround with two nops.
printf '\x90\x90' | dd of="$work/boot.img" bs=1 seek=$((0x66)) conv=notrunc status=none
dd if="$work/boot.img" of="$raw" bs=440 count=1 conv=notrunc status=none
dd if="$work/core.img" of="$raw" bs=512 seek=1 conv=notrunc status=none

log "compressing"
qemu-img convert -q -c -O qcow2 -o compat=1.1 "$raw" "$work/disk.qcow2"
mv "$work/disk.qcow2" "$out"
echo "$hash" >"$stamp"
log "done in $(($(date +%s) - start)) s: $out ($(du -h "$out" | cut -f1), virtual ${disk_mib} MiB)"
echo "$out"
