#!/usr/bin/env bash
# validate-examples.sh: checks every example under examples/ with each CLI named on the command line
# (`validate-examples.sh TOFU TERRAFORM`), against the provider built from the working tree, offline: the CLIs
# install it with `init` from a local mirror, as the version CHANGELOG.md releases next, so the examples' version
# constraints are checked too, and nothing is downloaded.
#
# Two kinds of example:
#   - directories with a main.tf (backends/*, modules/*, workloads/*, quickstart): complete configurations, run as
#     they are (`init -backend=false`, which installs local modules, then `validate`);
#   - single files (provider/, resources/, data-sources/, actions/, list-resources/): the snippets the generated
#     docs show, each validated as a module of its own, with a required_providers block added when it has none.
# A CLI that cannot read an example's kind says so on one line, and that example is validated by the other CLIs:
# OpenTofu has no `action` blocks and no `.tfquery.hcl` files; Terraform reads both from 1.14 on. The run fails
# when an example is validated by no CLI at all, so no example goes unchecked unnoticed; with --partial first
# (scripts/generate-docs.sh, which has OpenTofu only), it names them and goes on.
#
# The CLIs drop keys that a nested attribute does not have without a word (hashicorp/terraform#33570): the Go test
# TestExamples_nestedKeysAreInTheSchema (internal/provider) checks those keys against the provider's schema.
set -euo pipefail

partial=no
if [ "${1:-}" = --partial ]; then
  partial=yes
  shift
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/provider-mirror.sh
. "$root/scripts/provider-mirror.sh"
address="registry.terraform.io/egress-proxies/egress"
# Examples may write `source = "egress-proxies/egress"`, which OpenTofu resolves on its own registry's host.
tofu_address="registry.opentofu.org/egress-proxies/egress"

[ $# -gt 0 ] || { echo "usage: $0 CLI..." >&2; exit 2; }
for cli in "$@"; do
  [ -x "$cli" ] || { echo "validate-examples: '$cli' is not an executable CLI" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/egress-examples.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"

version=$(sed -n 's/^## \([0-9][0-9.]*\) .*/\1/p' "$root/CHANGELOG.md" | head -1)
[ -n "$version" ] || { log "CHANGELOG.md has no release heading (## X.Y.Z ...)"; exit 1; }
# One build, under both registry addresses the examples' `source` may resolve to.
(cd "$root" && go build -o "$tmp/provider" .)
for a in "$address" "$tofu_address"; do
  mirror_provider "$tmp/mirror" "$a" "$version" "$tmp/provider"
done
mirror_cli_config "$tmp/mirror" "$tmp/clirc" "$address" "$tofu_address"
unset TF_CLI_ARGS TF_CLI_ARGS_validate TF_CLI_ARGS_init TF_PLUGIN_CACHE_DIR TF_DATA_DIR TF_WORKSPACE

requirement='terraform {
  required_providers {
    egress = { source = "'"$address"'" }
  }
}'

# The examples, as paths relative to examples/: directories first, then the files outside them.
mapfile -t dirs < <(cd "$root/examples" && find . -name main.tf -printf '%h\n' | sed 's#^\./##' | LC_ALL=C sort)
in_dir() {
  local d
  for d in "${dirs[@]}"; do [[ $1 == "$d"/* ]] && return 0; done
  return 1
}
files=()
while IFS= read -r f; do
  in_dir "$f" || files+=("$f")
done < <(cd "$root/examples" && find . \( -name '*.tf' -o -name '*.tfquery.hcl' \) | sed 's#^\./##' | LC_ALL=C sort)

# run_cli CLI DIR LABEL ARGS...: init and validate DIR with CLI; prints the CLI's errors when it fails.
run_cli() {
  local cli=$1 dir=$2 label=$3
  shift 3
  if ! "$cli" -chdir="$dir" init -backend=false -input=false -no-color >"$dir.init.log" 2>&1; then
    log "$label: init failed with $(basename "$cli"):"
    sed -n '/^Error/,$p' "$dir.init.log" >&2
    return 1
  fi
  if ! "$cli" -chdir="$dir" validate -no-color "$@" >"$dir.log" 2>&1; then
    log "$label is not valid with $(basename "$cli"):"
    if grep -q '^Error' "$dir.log"; then sed -n '/^Error/,$p' "$dir.log" >&2; else cat "$dir.log" >&2; fi
    return 1
  fi
}

failed=0
declare -A validated=()
for cli in "$@"; do
  cli_version=$("$cli" version 2>/dev/null | sed -n 1p)
  name=$(tr -c 'a-zA-Z0-9\n' _ <<<"$cli_version")
  work="$tmp/$name"
  cp -r "$root/examples" "$work"
  # What this CLI reads: Terraform from 1.14 validates actions and .tfquery.hcl files (with -query).
  actions=no
  if [[ $cli_version =~ ^Terraform\ v1\.([0-9]+)\. ]] && ((BASH_REMATCH[1] >= 14)); then actions=yes; fi
  n=0
  for d in "${dirs[@]}"; do
    run_cli "$cli" "$work/$d" "examples/$d" || failed=1
    validated[$d]=1
    n=$((n + 1))
  done
  for f in "${files[@]}"; do
    args=()
    case "$f" in
      actions/* | *.tfquery.hcl)
        if [ "$actions" = no ]; then
          log "examples/$f: $cli_version reads no actions or .tfquery.hcl files; left to a CLI that does"
          continue
        fi
        [[ $f == *.tfquery.hcl ]] && args=(-query)
        ;;
    esac
    dir="$work/.files/${f//\//_}"
    mkdir -p "$dir"
    cp "$root/examples/$f" "$dir/"
    # Import blocks need the resource they import into: the directory's resource.tf declares it.
    case "$(basename "$f")" in import*.tf) cp "$root/examples/$(dirname "$f")/resource.tf" "$dir/" ;; esac
    grep -q required_providers "$dir"/* || echo "$requirement" >"$dir/zz_required_providers.tf"
    run_cli "$cli" "$dir" "examples/$f" "${args[@]}" || failed=1
    validated[$f]=1
    n=$((n + 1))
  done
  log "$n examples checked with $cli_version"
done
for e in "${dirs[@]}" "${files[@]}"; do
  if [ -z "${validated[$e]:-}" ]; then
    log "examples/$e was validated by none of the CLIs given"
    [ "$partial" = yes ] || failed=1
  fi
done
exit "$failed"
