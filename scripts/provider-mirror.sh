# provider-mirror.sh: sourced, not run. What the scripts that install providers from a local filesystem mirror
# instead of a registry share (validate-examples.sh, bench-k8s.sh, bench-kvm.sh).
# shellcheck shell=bash

# mirror_provider MIRROR ADDRESS VERSION BINARY puts BINARY into the mirror as the provider at ADDRESS
# (hostname/namespace/type), version VERSION, for this machine's platform, under the name the CLIs look for.
mirror_provider() {
	local dir
	dir="$1/$2/$3/$(go env GOOS)_$(go env GOARCH)"
	mkdir -p "$dir"
	cp "$4" "$dir/terraform-provider-${2##*/}_v$3"
}

# mirror_cli_config MIRROR FILE ADDRESS... writes to FILE a CLI configuration that installs the providers at
# ADDRESS... from the mirror and never from a registry, and points Terraform and OpenTofu at it.
mirror_cli_config() {
	local mirror=$1 file=$2 list
	shift 2
	list=$(printf '"%s", ' "$@")
	list=${list%, }
	cat >"$file" <<RC
provider_installation {
  filesystem_mirror {
    path    = "$mirror"
    include = [$list]
  }
  direct {
    exclude = [$list]
  }
}
RC
	export TF_CLI_CONFIG_FILE="$file" TOFU_CLI_CONFIG_FILE="$file" TF_IN_AUTOMATION=1 CHECKPOINT_DISABLE=1
}
