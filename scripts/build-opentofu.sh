#!/usr/bin/env bash
# Builds the OpenTofu CLI from source through the Go module proxy (the Terraform binary cannot be built here)
# and caches it outside the repository. Prints the binary's path on stdout.
set -euo pipefail
version="${TOFU_VERSION:-1.12.6}"
cache="${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}"
bin="$cache/tofu-v$version/tofu"
if [ -x "$bin" ] && "$bin" version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d "$cache/tofu-build.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
# go mod download needs a module context that does not pin anything else.
dir=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "github.com/opentofu/opentofu@v$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || { echo "download of opentofu v$version failed" >&2; exit 1; }
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
echo "building OpenTofu v$version (several minutes on 2 cores, cached afterwards)" >&2
(cd "$work/src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/tofu" ./cmd/tofu)
mkdir -p "$(dirname "$bin")"
mv "$work/tofu" "$bin"
"$bin" version >&2
echo "$bin"
