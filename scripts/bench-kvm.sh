#!/usr/bin/env bash
# bench-kvm.sh [N]: how egress_proxy on the kvm backend compares with raw virsh doing the same work, N proxies
# (default 30, or BENCH_N), on a private libvirt instance of scripts/libvirt-env.sh. A benchmark, run by hand
# (not part of `make test`):
#
#   EGRESS_LIBVIRT_INSTANCE=bench scripts/libvirt-env.sh start
#   EGRESS_LIBVIRT_INSTANCE=bench scripts/bench-kvm.sh 30
#   EGRESS_LIBVIRT_INSTANCE=bench PROVIDER_BIN=/path/to/older/terraform-provider-egress scripts/bench-kvm.sh 30
#   EGRESS_LIBVIRT_INSTANCE=bench scripts/libvirt-env.sh stop
#
# In one run, one after the other on the same instance:
#   - raw virsh, all N at once, then again WINDOW at a time (BENCH_WINDOW, default 10: Terraform's default
#     parallelism), one virsh process (one connection) per proxy running that proxy's commands in a row. create: the seed volume (a NoCloud ISO built with genisoimage, uploaded), the root volume (a qcow2
#     overlay of the instance's base volume), define, start. destroy: destroy, undefine, both volumes.
#   - egress_proxy through Terraform (TERRAFORM, default the 1.15.9 the project builds) at its default
#     parallelism (10), N proxies by count: apply, plan (a refresh of every proxy, nothing to change), destroy.
#     The provider is built from this tree once (or PROVIDER_BIN) and installed from a local filesystem mirror,
#     as scripts/validate-examples.sh does.
# Then a table of seconds and the ratios egress/raw (the arithmetic is internal/cmd/bench's, built first).
#
# Every destroy, on both sides, waits until QEMU's process is gone, that is reaped: scripts/libvirt-env.sh runs
# its daemons under tini as a child subreaper, which reaps at once. (Under an init that reaps late, as some
# sandboxes' do every second or two, destroys end in waves a reaping apart, and N at once needs fewer waves
# than Terraform's ten at a time; the WINDOW column shows the same work in the same waves.)
#
# The same work on both sides, as far as honest: the same base volume, pool and network, the same volume names,
# formats and sizes, a domain with the devices of the backend's domainXML (internal/backend/kvm/domainxml.go),
# memory 128 MiB, 1 vCPU, domain type qemu, no wait for the guest (the instance's base volume is blank: QEMU
# runs, nothing boots, which is what create and destroy do on the host's side). What differs: the raw domain
# carries no provider metadata (it must not look like a proxy of the provider's) and its seed holds a
# placeholder user-data instead of the rendered one, of about the same size; the provider's own checks on create
# (capabilities, memory, pool space, an existing-name lookup) have no counterpart on the raw side, which is
# part of what the ratio measures.
#
# DHCP reservations: a proxy without a fixed ip reserves nothing, so by default neither side does. With
# BENCH_FIXED_IP=1 each proxy gets 198.18.0.(10+i) on both sides (kvm.ip; virsh net-update add-last/delete
# ip-dhcp-host, live and persistent, as the backend does), which adds the network update to create and destroy;
# at most 90 proxies then, below the instance's DHCP range.
#
# It makes only a temporary folder, domains and volumes named bench-raw-<run>-<i> and the proxies of owner
# bench-<run> on the instance named by EGRESS_LIBVIRT_INSTANCE (required: never the machine's own libvirt),
# and removes all of them on exit, also after a failure or Ctrl-C. Set KEEP=1 to keep the folder (logs).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/provider-mirror.sh
. "$root/scripts/provider-mirror.sh"
# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"

N=${1:-${BENCH_N:-30}}
[[ $N =~ ^[1-9][0-9]*$ ]] || { log "N=$N: want a positive number of proxies"; exit 2; }
FIXED_IP=${BENCH_FIXED_IP:-0}
# The raw side also runs WINDOW at a time, Terraform's default parallelism: the ratio to that run is what the
# provider adds, the ratio to N at once what a user waits for beside a script. 0 skips it.
WINDOW=${BENCH_WINDOW:-10}
[[ $WINDOW =~ ^[0-9]+$ ]] || { log "BENCH_WINDOW=$WINDOW: want a number"; exit 2; }
if [ "$FIXED_IP" = 1 ] && ((N > 90)); then
  log "BENCH_FIXED_IP=1 takes at most 90 proxies (198.18.0.10 to .99)"
  exit 2
fi
INSTANCE=${EGRESS_LIBVIRT_INSTANCE:-}
if [[ ! $INSTANCE =~ ^[a-z0-9][a-z0-9-]{0,20}$ ]]; then
  log "set EGRESS_LIBVIRT_INSTANCE to a running scripts/libvirt-env.sh instance (got '$INSTANCE')"
  exit 2
fi
URI="qemu:///system?socket=/var/lib/egress-$INSTANCE/run/libvirt-sock"
POOL=${EGRESS_LIBVIRT_POOL:-egress-test}
NETWORK=${EGRESS_LIBVIRT_NETWORK:-egress-test}
BASE_VOLUME=${EGRESS_LIBVIRT_BASE_VOLUME:-egress-base.qcow2}
TERRAFORM=${TERRAFORM:-$HOME/.cache/terraform-provider-egress/terraform-v1.15.9/terraform}
MEMORY_MIB=128
DISK_GIB=2

for tool in virsh genisoimage "$TERRAFORM"; do
  command -v "$tool" >/dev/null || { log "$tool not found"; exit 1; }
done
virsh_() { virsh -q -c "$URI" "$@"; }
if ! virsh_ pool-info "$POOL" >/dev/null 2>&1 || ! virsh_ net-info "$NETWORK" >/dev/null 2>&1; then
  log "instance $INSTANCE is not running, or lacks pool $POOL or network $NETWORK: start it with EGRESS_LIBVIRT_INSTANCE=$INSTANCE scripts/libvirt-env.sh start"
  exit 1
fi
base_path=$(virsh_ vol-path --pool "$POOL" "$BASE_VOLUME")
base_format=$(virsh_ vol-dumpxml --pool "$POOL" "$BASE_VOLUME" | sed -n "s/.*<format type='\([a-z0-9]*\)'.*/\1/p" | head -1)

run=$(date +%s)-$$
owner=bench-$run
tmp=$(mktemp -d "${TMPDIR:-/tmp}/egress-bench-kvm.XXXXXX")
bench=$tmp/bench
raw_name() { echo "bench-raw-$run-$1"; }
fixed_ip() { echo "198.18.0.$((10 + $1))"; }
# A MAC in QEMU's range, distinct per run and proxy.
raw_mac() { printf '52:54:00:%02x:%02x:%02x' $((RANDOM % 256)) $(($1 / 256)) $(($1 % 256)); }

# cleanup removes whatever of the run is left, in any state: Terraform's proxies through Terraform, the raw
# proxies by name. Errors are expected (most things are already gone) and not shown.
tf_ready=no
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "$tf_ready" = yes ] && [ -s "$tmp/tf/terraform.tfstate" ] &&
    [ "$("$TERRAFORM" -chdir="$tmp/tf" state list 2>/dev/null | wc -l)" -gt 0 ]; then
    log "cleaning up: destroying the proxies Terraform still has"
    if ! "$TERRAFORM" -chdir="$tmp/tf" destroy -auto-approve -input=false -no-color >"$tmp/cleanup-destroy.log" 2>&1; then
      log "cleanup destroy failed, see $tmp/cleanup-destroy.log (kept)"
      KEEP=1
    fi
  fi
  local prefix="bench-raw-$run-" name
  for name in $(virsh_ list --all --name 2>/dev/null | grep "^$prefix" || true); do
    virsh_ destroy "$name" >/dev/null 2>&1 || true
    virsh_ undefine "$name" --nvram >/dev/null 2>&1 || true
  done
  for name in $(virsh_ vol-list --pool "$POOL" 2>/dev/null | awk -v p="$prefix" 'index($1, p) == 1 { print $1 }'); do
    virsh_ vol-delete --pool "$POOL" "$name" >/dev/null 2>&1 || true
  done
  for name in $(virsh_ net-dumpxml "$NETWORK" 2>/dev/null | grep -o "name='${prefix}[0-9]*'" | cut -d"'" -f2); do
    virsh_ net-update "$NETWORK" delete ip-dhcp-host "<host name='$name'/>" --live --config >/dev/null 2>&1 || true
  done
  if [ -n "${KEEP:-}" ]; then log "kept $tmp"; else rm -rf "$tmp"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
# record LABEL START: the seconds since START, to a tenth, in the timings the table reads.
record() { echo "$1 $("$bench" elapsed -decimals 1 "$2" "$(now)")" >>"$tmp/seconds"; }

# ---- raw virsh ----

# raw_xml NAME MAC: the domain the backend defines (domainXML), by hand.
raw_xml() {
  local iface
  iface="<interface type='network'><mac address='$2'/><source network='$NETWORK'/><model type='virtio'/></interface>"
  cat <<XML
<domain type='qemu'>
  <name>$1</name>
  <memory unit='MiB'>$MEMORY_MIB</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type><boot dev='hd'/></os>
  <features><acpi/><apic/></features>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='volume' device='disk'><driver name='qemu' type='qcow2'/><source pool='$POOL' volume='$1-root.qcow2'/><target dev='vda' bus='virtio'/></disk>
    <disk type='volume' device='cdrom'><driver name='qemu' type='raw'/><source pool='$POOL' volume='$1-seed.iso'/><target dev='sda' bus='sata'/><readonly/></disk>
    $iface
    <serial type='pty'><target port='0'/></serial>
    <console type='pty'><target type='serial' port='0'/></console>
    <channel type='unix'><source mode='bind'/><target type='virtio' name='org.qemu.guest_agent.0'/></channel>
    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
  </devices>
</domain>
XML
}

# raw_prepare I: the files proxy I's create reads (the domain XML, the seed ISO), made before the clock starts:
# the backend renders both in memory.
raw_prepare() {
  local i=$1 name dir
  name=$(raw_name "$i")
  dir="$tmp/raw/$i"
  mkdir -p "$dir/seed"
  raw_xml "$name" "$(raw_mac "$i")" >"$dir/domain.xml"
  printf 'instance-id: %s\nlocal-hostname: %s\n' "$name" "$name" >"$dir/seed/meta-data"
  # Placeholder user-data of about the size of the rendered one (cloud-config with squid.conf).
  { echo '#cloud-config'; head -c 3000 /dev/zero | tr '\0' '#'; echo; } >"$dir/seed/user-data"
  genisoimage -quiet -output "$dir/seed.iso" -volid cidata -joliet -rock "$dir/seed/user-data" "$dir/seed/meta-data"
}

# raw_create I and raw_destroy I: one virsh, one connection, the proxy's commands in a row.
raw_create() {
  local i=$1 name dir size cmds
  name=$(raw_name "$i")
  dir="$tmp/raw/$i"
  size=$(stat -c %s "$dir/seed.iso")
  cmds="vol-create-as $POOL $name-seed.iso $size --format raw; vol-upload --pool $POOL $name-seed.iso $dir/seed.iso"
  cmds+="; vol-create-as $POOL $name-root.qcow2 ${DISK_GIB}G --format qcow2 --backing-vol $base_path --backing-vol-format $base_format"
  if [ "$FIXED_IP" = 1 ]; then
    cmds+="; net-update $NETWORK add-last ip-dhcp-host \"<host mac='$(grep -o "52:54:00[:0-9a-f]*" "$dir/domain.xml")' name='$name' ip='$(fixed_ip "$i")'/>\" --live --config"
  fi
  cmds+="; define $dir/domain.xml; start $name"
  virsh_ "$cmds" >"$dir/create.log" 2>&1
}

raw_destroy() {
  local i=$1 name cmds
  name=$(raw_name "$i")
  cmds="destroy $name"
  if [ "$FIXED_IP" = 1 ]; then
    cmds+="; net-update $NETWORK delete ip-dhcp-host \"<host name='$name' ip='$(fixed_ip "$i")'/>\" --live --config"
  fi
  cmds+="; vol-delete --pool $POOL $name-root.qcow2; vol-delete --pool $POOL $name-seed.iso"
  cmds+="; undefine $name --managed-save --snapshots-metadata --nvram --checkpoints-metadata"
  virsh_ "$cmds" >"$tmp/raw/$i/destroy.log" 2>&1
}

# side_by_side FN WINDOW: FN 0 .. N-1, WINDOW of them at a time (a new one as soon as one ends, as Terraform
# schedules); fails naming the proxies whose FN failed.
side_by_side() {
  local fn=$1 window=$2 i running=0 failed=()
  rm -f "$tmp"/raw/*/failed
  for ((i = 0; i < N; i++)); do
    if ((running >= window)); then
      wait -n || true
      running=$((running - 1))
    fi
    { "$fn" "$i" || touch "$tmp/raw/$i/failed"; } &
    running=$((running + 1))
  done
  wait
  for ((i = 0; i < N; i++)); do
    [ ! -e "$tmp/raw/$i/failed" ] || failed+=("$i")
  done
  if [ ${#failed[@]} -gt 0 ]; then
    log "$fn failed for proxies ${failed[*]}; first log:"
    cat "$tmp/raw/${failed[0]}/"*.log >&2
    return 1
  fi
}

# ---- egress_proxy through Terraform ----

tf_setup() {
  local version address=registry.terraform.io/egress-proxies/egress
  version=$(sed -n 's/^## \([0-9][0-9.]*\) .*/\1/p' "$root/CHANGELOG.md" | head -1)
  mkdir -p "$tmp/tf"
  if [ -n "${PROVIDER_BIN:-}" ]; then
    cp "$PROVIDER_BIN" "$tmp/provider"
  else
    (cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$tmp/provider" .)
  fi
  mirror_provider "$tmp/mirror" "$address" "$version" "$tmp/provider"
  mirror_cli_config "$tmp/mirror" "$tmp/clirc" "$address"
  local ip=null
  [ "$FIXED_IP" = 1 ] && ip='cidrhost("198.18.0.0/24", 10 + count.index)'
  cat >"$tmp/tf/main.tf" <<TF
terraform {
  required_providers {
    egress = { source = "$address" }
  }
}

provider "egress" {
  owner = "$owner"
  kvm = {
    hosts       = { local = { uri = "$URI" } }
    pool        = "$POOL"
    network     = "$NETWORK"
    base_volume = "$BASE_VOLUME"
    domain_type = "qemu"
  }
}

resource "egress_proxy" "bench" {
  count                = $N
  kvm                  = { memory_mib = $MEMORY_MIB, vcpus = 1, disk_gib = $DISK_GIB, wait_for_address = false, ip = $ip }
  allowed_client_cidrs = ["198.18.0.0/24"]
  allowed_destinations = [".example.com"]
}
TF
  unset TF_CLI_ARGS TF_CLI_ARGS_apply TF_CLI_ARGS_plan TF_CLI_ARGS_destroy TF_CLI_ARGS_init TF_PLUGIN_CACHE_DIR TF_DATA_DIR TF_WORKSPACE TF_LOG
  "$TERRAFORM" -chdir="$tmp/tf" init -input=false -no-color >"$tmp/tf-init.log" 2>&1 || { cat "$tmp/tf-init.log" >&2; return 1; }
  tf_ready=yes
}

# tf STEP ARGS...: runs a Terraform command, showing its log when it fails.
tf() {
  local step=$1
  shift
  "$TERRAFORM" -chdir="$tmp/tf" "$@" -input=false -no-color >"$tmp/tf-$step.log" 2>&1 || {
    log "terraform $step failed:"
    tail -40 "$tmp/tf-$step.log" >&2
    return 1
  }
}

# ---- the run ----

log "instance $INSTANCE, $N proxies, fixed IPs: $([ "$FIXED_IP" = 1 ] && echo yes || echo no), provider: ${PROVIDER_BIN:-built from $root}"
(cd "$root" && go build -o "$bench" ./internal/cmd/bench)
tf_setup
for ((i = 0; i < N; i++)); do raw_prepare "$i"; done

log "raw virsh, $N at once: create"
t=$(now)
side_by_side raw_create "$N"
record raw-create "$t"
log "raw virsh, $N at once: destroy"
t=$(now)
side_by_side raw_destroy "$N"
record raw-destroy "$t"
if ((WINDOW > 0)); then
  log "raw virsh, $WINDOW at a time: create"
  t=$(now)
  side_by_side raw_create "$WINDOW"
  record window-create "$t"
  log "raw virsh, $WINDOW at a time: destroy"
  t=$(now)
  side_by_side raw_destroy "$WINDOW"
  record window-destroy "$t"
fi

log "egress_proxy: plan (before the apply)"
t=$(now)
tf plan-new plan
record egress-plan-new "$t"
log "egress_proxy: apply"
t=$(now)
tf apply apply -auto-approve
record egress-apply "$t"
log "egress_proxy: plan (refresh)"
t=$(now)
tf plan plan -detailed-exitcode
record egress-plan "$t"
log "egress_proxy: destroy"
t=$(now)
tf destroy destroy -auto-approve
record egress-destroy "$t"

# Seconds, the ratios egress/raw, and egress's own share: Terraform plans before an apply and refreshes every
# proxy before a destroy, which virsh does not; the last column takes that step's time (measured alone) off
# before dividing.
fixed=()
[ "$FIXED_IP" = 1 ] && fixed=(-fixed-ip)
"$bench" kvm-table -proxies "$N" -instance "$INSTANCE" -window "$WINDOW" "${fixed[@]}" <"$tmp/seconds"
