#!/usr/bin/env bash
# The README's first command: make an egress proxy VM on a local, confined libvirt environment and show it at
# work. `scripts/quickstart.sh destroy` removes it.
#
# Everything runs on this machine: a private libvirtd of the quickstart's own (scripts/libvirt-env.sh instance
# "quickstart": its own network and mount namespaces, folders and socket; the machine's own libvirt, if it has
# one, is never touched), the proxy VM on that namespace's libvirt network, and two small web servers there
# (allowed.test and denied.test, named on the network's DNS) for the proxy to let through or refuse. `destroy`
# removes the proxy, then the private libvirtd with everything it had.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}
work=$cache/quickstart
export EGRESS_LIBVIRT_INSTANCE=quickstart
netns=egress-$EGRESS_LIBVIRT_INSTANCE
uri="qemu:///system?socket=/var/lib/egress-$EGRESS_LIBVIRT_INSTANCE/run/libvirt-sock"
gateway=198.18.0.1
dns_entry="<host ip='$gateway'><hostname>allowed.test</hostname><hostname>denied.test</hostname></host>"

say() { printf '\n==> %s\n' "$*" >&2; }

# The web server is stopped by the pid recorded when it started, and only while that pid is still our server:
# on a shared machine another process may have the same command line, or the pid may have been reused.
upstream_pid=$work/upstream.pid
stop_upstream() {
	local pid
	pid=$(cat "$upstream_pid" 2>/dev/null) || return 0
	if [[ $pid =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--directory $work/upstream"; then
		kill "$pid" 2>/dev/null || true
	fi
	rm -f "$upstream_pid"
}

tofu=$(scripts/build-opentofu.sh)
mkdir -p "$work"
cp examples/quickstart/main.tf "$work/main.tf"
go build -o "$work/bin/terraform-provider-egress" .
cat >"$work/cli.tfrc" <<CFG
provider_installation {
  dev_overrides {
    "registry.terraform.io/egress-proxies/egress" = "$work/bin"
  }
  direct {}
}
CFG
export TF_CLI_CONFIG_FILE=$work/cli.tfrc TF_IN_AUTOMATION=1 CHECKPOINT_DISABLE=1
image=$(scripts/build-image.sh)

if [[ ${1:-} == destroy ]]; then
	say "destroying the quickstart proxy"
	if [[ -S ${uri#*socket=} ]]; then
		"$tofu" -chdir="$work" destroy -auto-approve -var "image_file=$image" -var "libvirt_uri=$uri"
	fi
	stop_upstream
	scripts/libvirt-env.sh stop
	# The proxy went with the private libvirtd, if the destroy could not reach it.
	rm -f "$work"/terraform.tfstate "$work"/terraform.tfstate.backup
	exit 0
fi

say "starting the confined libvirt environment"
scripts/install-deps.sh quickstart
scripts/libvirt-env.sh start >/dev/null

say "starting allowed.test and denied.test inside the namespace"
virsh -q -c "$uri" net-update egress-test delete dns-host "$dns_entry" --live 2>/dev/null || true
virsh -q -c "$uri" net-update egress-test add dns-host "$dns_entry" --live
stop_upstream
mkdir -p "$work/upstream"
echo "hello from the allowed side" >"$work/upstream/index.html"
ip netns exec "$netns" python3 -m http.server 80 --bind "$gateway" --directory "$work/upstream" >/dev/null 2>&1 &
echo $! >"$upstream_pid"

say "applying examples/quickstart with OpenTofu (the VM boots under QEMU: a few minutes)"
"$tofu" -chdir="$work" apply -auto-approve -var "image_file=$image" -var "libvirt_uri=$uri" \
	-var "domain_type=${QUICKSTART_DOMAIN_TYPE:-qemu}"
proxy=$("$tofu" -chdir="$work" output -raw proxy_url)
proxy=${proxy#http://}

say "waiting until the proxy at $proxy answers (cloud-init installs its configuration on first boot)"
for _ in $(seq 1 144); do
	code=$(ip netns exec "$netns" curl -s -o /dev/null -w '%{http_code}' --max-time 5 -x "http://$proxy" http://allowed.test/ || true)
	[[ $code != 000 ]] && break
	sleep 5
done

say "an allowed destination through the proxy"
ip netns exec "$netns" curl -sS -i --max-time 10 -x "http://$proxy" http://allowed.test/ | sed -n '1p;$p'
say "a destination outside allowed_destinations"
ip netns exec "$netns" curl -sS -o /dev/null -w 'HTTP %{http_code} (refused by the proxy)\n' --max-time 10 -x "http://$proxy" http://denied.test/

say "done. The proxy is $proxy on the namespace's network; remove it and its private libvirtd with: make quickstart-destroy"
