#!/usr/bin/env bash
# Installs the Debian packages the tests run for real (squid-openssl, the Squid build the proxy image runs, for
# the data-plane tests; xorriso/genisoimage to read back seed ISOs, openssh-server for the kvm backend's ssh
# transport test, tcpdump for the tests that look at the bytes between client and proxy); libvirt's own packages are
# installed by scripts/libvirt-env.sh, which must keep their daemons out of the root network namespace. Quick
# when everything is present.
set -euo pipefail
packages=(squid-openssl apache2-utils genisoimage curl jq openssh-server tcpdump)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "install-deps: need root to install ${missing[*]}" >&2
	exit 1
fi
# Package scripts must not start squid or sshd as system services: tests start their own on loopback ports.
policy=/usr/sbin/policy-rc.d made=
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made=1
fi
trap '[ -n "$made" ] && rm -f "$policy"' EXIT
DEBIAN_FRONTEND=noninteractive apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
