#!/usr/bin/env bash
# Builds the Terraform CLI from source through the Go module proxy and caches it outside the repository, for the
# acceptance suite's Terraform leg. Prints the binary's path on stdout.
#
# The proxy serves github.com/hashicorp/terraform but not the nine remote-state backends that live in it as
# nested modules (its go.mod replaces them with directories the module's zip leaves out), so a plain build
# fails. The build patches a copy of the module: it drops those nine modules from go.mod and their imports and
# registrations from the backend list. The tests only use local state. Every patch checks that it found the
# lines it expects and stops otherwise, so a new version whose layout differs fails here instead of building
# something else.
set -euo pipefail
version="${TERRAFORM_VERSION:-1.15.9}"
cache="${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}"
bin="$cache/terraform-v$version/terraform"
# `terraform version` would otherwise ask the network for the latest release.
export CHECKPOINT_DISABLE=1
if [ -x "$bin" ] && "$bin" version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d "$cache/terraform-build.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
# go mod download needs a module context that does not pin anything else.
dir=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "github.com/hashicorp/terraform@v$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || { echo "download of terraform v$version failed" >&2; exit 1; }
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"

# drop_lines FILE EXPECTED REGEX removes the lines of FILE matching the extended REGEX, and fails unless there
# were exactly EXPECTED of them.
drop_lines() {
  local file=$1 expected=$2 regex=$3 found
  found=$(grep -cE -- "$regex" "$file" || true)
  if [ "$found" -ne "$expected" ]; then
    echo "build-terraform.sh: expected $expected lines matching '$regex' in ${file#"$work/src/"}, found $found:" \
      "Terraform v$version's layout differs from what this script patches" >&2
    exit 1
  fi
  grep -vE -- "$regex" "$file" >"$file.new"
  mv "$file.new" "$file"
}

backends='azure|consul|cos|gcs|kubernetes|oci|oss|pg|s3'
module='github\.com/hashicorp/terraform/internal/backend/remote-state'
gomod="$work/src/go.mod"
initgo="$work/src/internal/backend/init/init.go"
drop_lines "$gomod" 9 "^[[:space:]]*$module/($backends) v"
drop_lines "$gomod" 9 "^replace $module/($backends) =>"
# The backend list registers each by its import name (backendS3.New()), so read those names off the imports first.
import_regex="^[[:space:]]*[A-Za-z0-9_]+ \"$module/($backends)\"\$"
aliases=$(grep -E -- "$import_regex" "$initgo" | awk '{print $1}' | paste -sd '|' -)
drop_lines "$initgo" 9 "$import_regex"
drop_lines "$initgo" 9 "return ($aliases)\.New\(\)"

echo "building Terraform v$version without the nine remote-state backends (about 4 minutes of CPU, cached afterwards)" >&2
# -mod=mod: go.mod lost requirements, so let the build settle the module graph (and go.sum) itself.
(cd "$work/src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$work/terraform" .)
mkdir -p "$(dirname "$bin")"
mv "$work/terraform" "$bin"
"$bin" version >&2
echo "$bin"
