#!/usr/bin/env bash
# install-packages.sh PACKAGE...
# install-packages.sh --for PROGRAM:PACKAGE...   the packages of the programs that are missing (a name looked up
#                                                on PATH, or a path that must exist): for a script that needs a
#                                                program, whatever package brought it
#
# Installs the Debian packages given that are missing, the one way every script of this project installs one,
# so that an install leaves the machine's services as they were: nothing it brings is started (a policy-rc.d
# forbids it for the install, and is removed after unless the machine had one of its own) and nothing it
# brings stays enabled for the next boot (a package's scripts enable its units and init scripts; each
# enablement link that appears during the install is undone with the tool that made it, so a later upgrade
# of the package keeps it disabled too). Packages already installed are not touched. Needs root only when
# something is missing. Quiet when there is nothing to do.
set -euo pipefail

# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"

if [[ ${1:-} == --for ]]; then
	shift
	wanted=()
	for pair in "$@"; do
		program=${pair%%:*} package=${pair#*:}
		if [[ $program == /* ]]; then [[ -e $program ]] && continue; else command -v "$program" >/dev/null && continue; fi
		wanted+=("$package")
	done
	set -- "${wanted[@]}"
fi

missing_packages() {
	missing=()
	local p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
}
missing_packages "$@"
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	log "need root to install ${missing[*]}"
	exit 1
fi
# One install at a time: the test groups start side by side, and dpkg takes one at a time too. What another
# install brought meanwhile is not installed again.
# The lock is this script's own file, so nothing is left behind for it.
exec 8<"${BASH_SOURCE[0]}"
flock 8
missing_packages "$@"
[ ${#missing[@]} -eq 0 ] && exit 0

# enablement_links lists the links that make a service start at boot: systemd's wants/requires links and
# aliases, and SysV runlevel links.
enablement_links() {
	find /etc/systemd/system /etc/rc0.d /etc/rc1.d /etc/rc2.d /etc/rc3.d /etc/rc4.d /etc/rc5.d /etc/rc6.d /etc/rcS.d \
		-type l 2>/dev/null | sort
}

policy=/usr/sbin/policy-rc.d made_policy=
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\n# Made by terraform-provider-egress scripts/install-packages.sh for one install; removed after.\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	made_policy=1
fi
trap '[ -n "$made_policy" ] && rm -f "$policy"' EXIT

before=$(mktemp)
enablement_links >"$before"
log "installing ${missing[*]}"
DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}" >&2

# Undo what the packages' scripts enabled: deb-systemd-helper for systemd units (it also records the unit as
# disabled, which upgrades respect), update-rc.d for init scripts (disable keeps the links as stop links,
# which is how Debian records "disabled" for an init script).
disabled=()
while read -r link; do
	case "$link" in
	/etc/systemd/system/*)
		unit=$(basename "$(readlink "$link")")
		[[ $unit == *.* ]] || unit=$(basename "$link")
		deb-systemd-helper disable "$unit" >/dev/null 2>&1 || rm -f "$link"
		disabled+=("$unit")
		;;
	/etc/rc*)
		name=$(basename "$link")
		name=${name:3}
		if [[ $(basename "$link") == S* ]]; then
			update-rc.d "$name" disable >/dev/null 2>&1 || true
			disabled+=("$name (init script)")
		fi
		;;
	esac
done < <(comm -13 "$before" <(enablement_links))
rm -f "$before"
if [ ${#disabled[@]} -gt 0 ]; then
	mapfile -t disabled < <(printf '%s\n' "${disabled[@]}" | sort -u)
	log "left disabled what the packages enabled: ${disabled[*]}"
fi
