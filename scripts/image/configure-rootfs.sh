#!/usr/bin/env bash
# Configures a debootstrapped tree as the proxy base image. Called by scripts/build-image.sh:
#   configure-rootfs.sh ROOT FILES
# ROOT is the tree, FILES the directory whose files are copied over it (scripts/image/rootfs).
# Runs no program inside ROOT that could reach the network or start a service.
set -euo pipefail

root=$1 files=$2
[[ -d $root/etc && $root != / ]] || { echo "configure-rootfs: $root is not a guest tree" >&2; exit 1; }

in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 "$@"; }

# Files of the image: owned by root, readable by all.
(cd "$files" && find . -type f) | while read -r f; do
	install -D -o root -g root -m 0644 "$files/$f" "$root/${f#./}"
done
in_root chown root:proxy /etc/squid/squid.conf

echo localhost >"$root/etc/hostname"
cat >"$root/etc/hosts" <<'EOF'
127.0.0.1	localhost
::1		localhost ip6-localhost ip6-loopback
ff02::1		ip6-allnodes
ff02::2		ip6-allrouters
EOF
: >"$root/etc/resolv.conf" # dhclient writes it

# The kernel and initramfs the boot menu names.
for link in vmlinuz initrd.img; do
	if [[ ! -e $root/$link ]]; then
		newest=$(cd "$root/boot" && printf '%s\n' "$link"-* | grep -v '\*$' | sort -V | tail -n 1)
		[[ -n $newest ]] || { echo "configure-rootfs: no /boot/$link-*" >&2; exit 1; }
		ln -sfn "boot/$newest" "$root/$link"
	fi
done

# Squid: installed, not started at boot until cloud-init has written the proxy's configuration (the user-data
# runs "systemctl enable squid" and "systemctl restart squid").
in_root systemctl disable squid.service 2>&1 | sed 's/^/  /' >&2 || true
# The metrics programs: installed, not started at boot. Their packages enable them, and the exporter would
# listen on every address; a proxy with metrics gets drop-ins that run them on its ports, behind its backstop's
# metrics rule, and enables them (internal/proxyconf/vmguest/metrics.go).
in_root systemctl disable mtail.service prometheus-squid-exporter.service 2>&1 | sed 's/^/  /' >&2 || true
# keepalived: installed, not started at boot. A proxy of several instances gets its configuration and enables it
# (internal/backend/kvm/guest/vrrp.go); a proxy of one never runs VRRP.
in_root systemctl disable keepalived.service 2>&1 | sed 's/^/  /' >&2 || true
# Nothing periodic reaches out: no package list refresh or upgrade, no time sync.
for unit in apt-daily.timer apt-daily-upgrade.timer apt-daily.service apt-daily-upgrade.service \
	systemd-timesyncd.service; do
	ln -sfn /dev/null "$root/etc/systemd/system/$unit"
done
rm -f "$root/etc/systemd/system/timers.target.wants/apt-daily.timer" \
	"$root/etc/systemd/system/timers.target.wants/apt-daily-upgrade.timer"
# The serial console gets a login prompt (a getty for the console= device) and the boot messages.
in_root systemctl enable serial-getty@ttyS0.service 2>&1 | sed 's/^/  /' >&2 || true

# Nobody logs in with a password.
in_root passwd -l root >/dev/null

# Each clone gets its own identity: systemd writes a new machine-id on first boot when the file is empty.
: >"$root/etc/machine-id"
if [[ -f $root/var/lib/dbus/machine-id && ! -L $root/var/lib/dbus/machine-id ]]; then
	rm -f "$root/var/lib/dbus/machine-id"
fi
rm -f "$root"/etc/ssh/ssh_host_* "$root/var/lib/systemd/random-seed" "$root/var/lib/systemd/credential.secret"
rm -rf "$root/var/lib/cloud"/* "$root/var/lib/dhcp"/*

# Clean: package lists and caches, logs, debootstrap leftovers.
in_root apt-get clean
rm -rf "$root/var/lib/apt/lists"/* "$root"/var/cache/apt/*.bin "$root/var/cache/debconf"/*-old \
	"$root/var/lib/dpkg"/*-old "$root/tmp"/* "$root/var/tmp"/* "$root/root/.bash_history" "$root/debootstrap"
mkdir -p "$root/var/lib/apt/lists/partial"
find "$root/var/log" -type f -delete

# What the image promises, checked.
expect() { # PATTERN COMMAND...: the first line COMMAND prints in the guest tree must match PATTERN
	local want=$1 got
	shift
	got=$(in_root "$@" 2>/dev/null | head -n 1 || true)
	# shellcheck disable=SC2053 # want is a glob pattern on purpose ('root L *')
	[[ $got == $want ]] || { echo "configure-rootfs: $* gave '$got', want '$want'" >&2; exit 1; }
}
expect disabled systemctl is-enabled squid.service
expect disabled systemctl is-enabled mtail.service
expect disabled systemctl is-enabled prometheus-squid-exporter.service
expect disabled systemctl is-enabled keepalived.service
expect masked systemctl is-enabled systemd-timesyncd.service
expect masked systemctl is-enabled apt-daily.timer
expect masked systemctl is-enabled apt-daily-upgrade.timer
expect 'root L *' passwd -S root
# rsyslog starts at boot and takes the image's rsyslog.conf with the journal-only access log drop-in the image
# ships (internal/backend/kvm/guest: TestImageShipsTheJournalDropIn); without an output it would not start.
expect enabled systemctl is-enabled rsyslog.service
in_root rsyslogd -N1 -f /etc/rsyslog.conf >/dev/null 2>&1 ||
	{ in_root rsyslogd -N1 -f /etc/rsyslog.conf >&2 || true; echo "configure-rootfs: rsyslogd refuses /etc/rsyslog.conf" >&2; exit 1; }
[[ ! -s $root/etc/machine-id ]] || { echo "configure-rootfs: machine-id not empty" >&2; exit 1; }
