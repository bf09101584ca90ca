#!/usr/bin/env bash
# rehearse-fresh-root.sh: does make test-deps bring, on a bare Debian 12 machine, every program the project runs?
#
# A machine that has run the tests before already has their packages, so no run there can see one missing from
# the scripts (nftables was, and only a new machine found it). This makes a bare machine of its own: a Debian 12
# root from debootstrap's minbase variant (the packages of priority required, and apt: what the smallest Debian 12,
# a container image's, has; an installer's "important" ones such as iproute2, procps and nftables are not there,
# and a bare machine here lacked them), the Go toolchain bound in
# read-only, and a clone of the repository's HEAD (committed work only). In a mount and PID namespace of its own
# it chroots there, installs make as .ci/run does, runs make test-deps, and then looks up every program of
# scripts/host-programs.tsv (but the optional ones) with command -v. It fails naming each program missing, its
# package and the script the table says installs it. It prints how long the package install took: the part of a
# bare machine's cold time that a machine with the packages never shows.
#
# Nothing of the machine's is touched: packages are installed into the root only, the mounts live in the
# namespace and go with it, the root is a temporary folder removed at the end. Downloads go through the machine's
# network to Debian's mirror, as any apt-get does. The pristine root and the downloaded packages are cached
# under EGRESS_CACHE (a warm run takes a few minutes; the first, about ten), never required.
#
#   scripts/rehearse-fresh-root.sh            run the rehearsal on HEAD
#   EGRESS_REHEARSAL_KEEP=1 ...               keep the root afterwards, to look around
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
cache=${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}/fresh-root
mirror=${EGRESS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
goroot=$(go env GOROOT 2>/dev/null || echo /usr/local/go)

# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"

[[ $(id -u) == 0 ]] || die "must run as root (debootstrap, chroot, namespaces)"
[[ -x $goroot/bin/go ]] || die "no Go toolchain at $goroot"
command -v debootstrap >/dev/null || "$here/install-packages.sh" debootstrap

mkdir -p "$cache/debs" "$cache/archives"
exec 9>"$cache/lock"
flock 9 # one rehearsal at a time per cache: the pristine root and the package cache are shared

# The pristine root: a tarball, so that each run starts from the same bytes and a half-made root is never kept.
pristine=$cache/debian-12-$suite-minbase.tar
if [[ ! -s $pristine ]]; then
	log "debootstrap $suite (minbase) from $mirror, once"
	build=$(mktemp -d /var/tmp/egress-fresh-root-build.XXXXXX)
	trap 'rm -rf "$build"' EXIT
	if ! debootstrap --variant=minbase --cache-dir="$cache/debs" "$suite" "$build/root" "$mirror" >"$build/debootstrap.log" 2>&1; then
		tail -n 30 "$build/debootstrap.log" >&2
		die "debootstrap failed"
	fi
	tar -C "$build/root" -cf "$pristine.tmp" . && mv "$pristine.tmp" "$pristine"
	rm -rf "$build"
	trap - EXIT
fi

work=$(mktemp -d /var/tmp/egress-rehearsal.XXXXXX)
cleanup() {
	if [[ -n ${EGRESS_REHEARSAL_KEEP:-} ]]; then log "kept $work/root"; else rm -rf "$work"; fi
}
trap cleanup EXIT
root=$work/root
mkdir "$root"
tar -C "$root" -xf "$pristine"
git clone -q --no-hardlinks "$repo" "$root/src"
log "bare root of HEAD $(git -C "$root/src" rev-parse --short HEAD) at $root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mkdir -p "$root/usr/local/go"

# The programs to look up: every row but the optional ones, with the package and the installer for the message.
awk -F'\t' '!/^#/ && NF == 4 && $4 != "optional" { print $1 "\t" $3 "\t" $4 }' "$repo/scripts/host-programs.tsv" >"$root/programs.tsv"

cat >"$root/rehearse" <<'EOF'
#!/bin/bash
# Runs inside the bare root, as .ci/run would on a new machine, then looks every program up.
set -euo pipefail
export PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
export DEBIAN_FRONTEND=noninteractive
cd /src
start=$(date +%s)
if ! command -v make >/dev/null; then
	apt-get update -q >/dev/null && apt-get install -y -q make >/dev/null
fi
make --no-print-directory test-deps >/var/tmp/test-deps.log 2>&1 || { tail -n 40 /var/tmp/test-deps.log; exit 3; }
echo "packages installed in $(( $(date +%s) - start )) s"
missing=0
while IFS=$'\t' read -r program package installer; do
	if [[ $program == /* ]]; then [[ -e $program ]] && continue; else command -v "$program" >/dev/null && continue; fi
	echo "missing: $program (package $package, installed by $installer)"
	missing=$((missing + 1))
done </programs.tsv
echo "$(wc -l </programs.tsv) programs looked up, $missing missing"
[[ $missing == 0 ]]
EOF
chmod +x "$root/rehearse"

log "make test-deps in the bare root"
rc=0
# shellcheck disable=SC2016 # the script's own arguments, expanded inside the namespace
unshare --mount --pid --fork --propagation private -- bash -euc '
	root=$1 goroot=$2 archives=$3
	mount -t proc proc "$root/proc"
	mount -t sysfs sysfs "$root/sys"
	mount --rbind /dev "$root/dev"
	mount --bind "$goroot" "$root/usr/local/go"
	mount -o remount,bind,ro "$root/usr/local/go"
	mount --bind "$archives" "$root/var/cache/apt/archives"
	exec chroot "$root" /rehearse
' rehearse "$root" "$goroot" "$cache/archives" || rc=$?
case $rc in
0) log "passed: make test-deps on a bare Debian 12 root brings every program of scripts/host-programs.tsv" ;;
3) die "make test-deps failed in the bare root (its log's end above)" ;;
*) die "programs missing on a bare Debian 12 root after make test-deps (above): add their packages to the scripts the table names" ;;
esac
