#!/usr/bin/env bash
# Generates the provider documentation in docs/ from templates/ and examples/ with tfplugindocs (pinned in
# tools/go.mod), without a terraform binary and without any network beyond the Go module proxy:
#
#   1. builds the provider from the working tree;
#   2. asks OpenTofu for its schema (`tofu providers schema -json`) through a dev_overrides CLI config, so nothing is
#      installed or downloaded;
#   3. renames the schema's key from the provider's full address to `egress`, which is what tfplugindocs looks up;
#   4. adds the list resource and action schemas, which OpenTofu leaves out, read from the provider in-process over
#      protocol 6 (internal/cmd/protocol-schema);
#   5. validates every example under examples/ with `tofu validate` (scripts/validate-examples.sh; `make test`
#      runs it with Terraform too, which also reads the action and list resource examples);
#   6. runs `tfplugindocs generate --providers-schema`.
#
# Usage:
#   scripts/generate-docs.sh          regenerate docs/ in place
#   scripts/generate-docs.sh --check  generate into a temporary copy, check it with `tfplugindocs validate`, and fail
#                                     (exit 1, showing the difference) when it differs from docs/
#
# Environment: TOFU, path of an OpenTofu binary (default: what scripts/build-opentofu.sh prints, building it once).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
address="registry.terraform.io/egress-proxies/egress"
# Examples may write `source = "egress-proxies/egress"`, which OpenTofu resolves on its own registry's host.
tofu_address="registry.opentofu.org/egress-proxies/egress"

mode=generate
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  -h | --help)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
    exit 0
    ;;
  *)
    echo "usage: $0 [--check]" >&2
    exit 2
    ;;
esac

tofu="${TOFU:-}"
if [ -z "$tofu" ]; then
  tofu=$("$root/scripts/build-opentofu.sh")
fi
[ -x "$tofu" ] || { echo "generate-docs: no OpenTofu binary at '$tofu'" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/egress-docs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

step() { echo "generate-docs: $*" >&2; }

# Runs a command with its output sent to a log, which is shown only when the command fails.
quiet() {
  local log="$tmp/last.log"
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    return 1
  fi
}

step "building the provider"
mkdir -p "$tmp/plugins"
(cd "$root" && go build -o "$tmp/plugins/terraform-provider-egress" .)

# Always our own CLI config: the environment may point TF_CLI_CONFIG_FILE at a file that does not exist.
cat >"$tmp/tofurc" <<EOF
provider_installation {
  dev_overrides {
    "$address" = "$tmp/plugins"
    "$tofu_address" = "$tmp/plugins"
  }
  direct {}
}
EOF
export TF_CLI_CONFIG_FILE="$tmp/tofurc" TOFU_CLI_CONFIG_FILE="$tmp/tofurc"
export TF_IN_AUTOMATION=1 CHECKPOINT_DISABLE=1
unset TF_CLI_ARGS TF_CLI_ARGS_validate TF_CLI_ARGS_providers TF_PLUGIN_CACHE_DIR TF_DATA_DIR TF_WORKSPACE

requirement='terraform {
  required_providers {
    egress = { source = "'"$address"'" }
  }
}'

step "reading the schema with $("$tofu" version 2>/dev/null | sed -n 1p)"
mkdir -p "$tmp/schema"
echo "$requirement" >"$tmp/schema/main.tf"
# dev_overrides makes tofu warn on stderr; stdout is the JSON document alone.
if ! "$tofu" -chdir="$tmp/schema" providers schema -json >"$tmp/schema-full.json" 2>"$tmp/schema.log"; then
  cat "$tmp/schema.log" >&2
  exit 1
fi
(cd "$root/tools" && go run ./cmd/schema-rekey -from "$address" -to egress) <"$tmp/schema-full.json" >"$tmp/schema-rekeyed.json"
step "adding the list resource and action schemas from the provider"
(cd "$root" && go run ./internal/cmd/protocol-schema -provider egress) <"$tmp/schema-rekeyed.json" >"$tmp/schema.json"

step "validating the examples"
"$root/scripts/validate-examples.sh" --partial "$tofu"

if [ "$mode" = check ]; then
  site="$tmp/site"
  mkdir -p "$site"
  cp -r "$root/examples" "$root/templates" "$site/"
  [ -d "$root/docs" ] && cp -r "$root/docs" "$site/"
else
  site="$root"
fi

step "rendering docs/ with tfplugindocs"
(cd "$root/tools" && quiet go run github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs generate \
  --provider-dir "$site" \
  --provider-name egress \
  --rendered-provider-name egress \
  --providers-schema "$tmp/schema.json" \
  --examples-dir examples \
  --website-source-dir templates \
  --rendered-website-dir docs)

if [ "$mode" = check ]; then
  step "checking the rendered pages with tfplugindocs validate"
  (cd "$root/tools" && quiet go run github.com/hashicorp/terraform-plugin-docs/cmd/tfplugindocs validate \
    --provider-dir "$site" \
    --provider-name egress \
    --providers-schema "$tmp/schema.json")
  mkdir -p "$root/docs"
  if ! diff -r -q "$root/docs" "$site/docs" >"$tmp/diff.txt"; then
    echo "generate-docs: docs/ is out of date; run scripts/generate-docs.sh and commit the result." >&2
    sed -e "s#$site/docs#<generated>#g" -e "s#$root/##g" "$tmp/diff.txt" >&2
    diff -ru "$root/docs" "$site/docs" | sed -e "s#$site/docs#generated#g" -e "s#$root/##g" | head -n 200 >&2 || true
    exit 1
  fi
  step "docs/ is up to date"
else
  step "wrote $(find "$root/docs" -type f | wc -l) files under docs/"
fi
