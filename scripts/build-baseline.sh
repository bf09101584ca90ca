#!/usr/bin/env bash
# Builds the provider at the upgrade tests' baseline commit (internal/provider/testdata/upgrade-baseline, or the
# commit given as $1) once, and caches it outside the repository as a filesystem mirror the CLIs install from.
# Prints the mirror's directory on stdout: it holds the provider registry.terraform.io/egress-proxies/egress at
# version 0.0.0-baseline-<commit>.
#
# build-baseline.sh --k8s-image [COMMIT] prints instead the OCI archive of the proxy's Kubernetes image as that
# commit builds it: the older image the kubernetes upgrade test runs the baseline's pods on, to which HEAD then
# writes new rules. The image is built by the baseline's own scripts/build-k8s-image.sh (it needs root and
# debootstrap, as that script does). When that script and the log helper it sources are the working tree's but
# for comments, the build is the same one with the same inputs (Debian 12's packages), so the archive is the
# working tree's (scripts/build-k8s-image.sh, cached) and nothing is built twice.
#
# The source is a detached worktree of that commit in a temporary folder (removed afterwards), so the checkout
# the caller works in is never touched. Runs beside the suite's other builds (Go's build cache takes concurrent
# builds); two runs for the same commit take turns on a lock, and the second finds the first's result.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=scripts/log.sh
. "$here/log.sh"
cache="${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}"
address=registry.terraform.io/egress-proxies/egress

what=provider
if [[ ${1:-} == --k8s-image ]]; then
  what=k8s-image
  shift
fi
commit=${1:-$(grep -v -e '^#' -e '^[[:space:]]*$' "$repo/internal/provider/testdata/upgrade-baseline" | head -1)}
commit=$(git -C "$repo" rev-parse --verify --quiet "$commit^{commit}") ||
  die "baseline commit ${1:-of internal/provider/testdata/upgrade-baseline} is not in this repository (a shallow clone? git fetch --unshallow)"
short=${commit:0:12}
# A pre-release version: a CLI installs it only when asked for it exactly, so nothing else ever picks it up.
version="0.0.0-baseline-$short"
dir="$cache/baseline-$short"
bin="$dir/mirror/$address/$version/$(go env GOOS)_$(go env GOARCH)/terraform-provider-egress_v$version"

mkdir -p "$cache"

# code FILE [COMMIT]: FILE without its comments and blank lines, at COMMIT or in the working tree; nothing
# when COMMIT lacks it (then it differs).
code() {
  if [[ -n ${2:-} ]]; then git -C "$repo" show "$2:$1" 2>/dev/null; else cat "$repo/$1"; fi | grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$'
}

if [[ $what == k8s-image ]]; then
  same=true
  for f in scripts/build-k8s-image.sh scripts/log.sh; do
    if ! cmp -s <(code "$f" "$commit") <(code "$f"); then
      same=false
    fi
  done
  if $same; then
    log "the baseline $short builds the Kubernetes image as this tree does: its archive is this tree's"
    exec "$repo/scripts/build-k8s-image.sh"
  fi
  exec 9>"$dir.image.lock"
  flock 9
  work=$(mktemp -d "$cache/baseline-image.XXXXXX")
  trap 'git -C "$repo" worktree remove --force "$work/src" 2>/dev/null || true; rm -rf "$work"' EXIT
  log "the Kubernetes image as $short builds it (the upgrade tests' older image), by its own script"
  git -C "$repo" worktree add --quiet --detach "$work/src" "$commit"
  mkdir -p "$dir"
  # The baseline's script caches its archive beside it, under a stamp of that script: a second run prints it.
  "$work/src/scripts/build-k8s-image.sh" "$dir/squid-oci.tar"
  exit 0
fi

exec 9>"$dir.lock"
flock 9
if [ -x "$bin" ]; then
  echo "$dir/mirror"
  exit 0
fi

work=$(mktemp -d "$cache/baseline-build.XXXXXX")
cleanup() {
  git -C "$repo" worktree remove --force "$work/src" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
log "building the provider at $short (the upgrade tests' baseline)"
git -C "$repo" worktree add --quiet --detach "$work/src" "$commit"
# As `make build` builds it; the version stays "dev", as in a developer's build of that commit.
(cd "$work/src" && CGO_ENABLED=0 go build -trimpath -o "$work/terraform-provider-egress" .)
mkdir -p "$(dirname "$bin")"
mv "$work/terraform-provider-egress" "$bin"
echo "$dir/mirror"
