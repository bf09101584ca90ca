#!/usr/bin/env bash
# bench-dataplane-k8s.sh [SUBJECT...]
#
# The data-plane benchmark's pods leg: the measurements of scripts/bench-dataplane.sh with the proxy where the
# kubernetes backend runs it, a pod of the proxy image on the test cluster (scripts/k8s-env.sh start), and
# the client and the origin in the cluster node's network namespace. The subjects (all by default):
#
#   direct               straight to the origin: the floor
#   squid-plain          the backend's Deployment of the same image with plain Squid's allow-all squid.conf
#   rendered-small       egress_proxy's pod as the kubernetes backend makes it (Create), 10 destinations
#   rendered-small-tls   the same with TLS on the proxy port
#   rendered-large       500 destinations, 200 client ranges, 10 rule sets and a login
#   rendered-large-tls   the same with TLS on the proxy port
#
# and, named only, two variants of rendered-large for what its parts cost: rendered-large-noauth (without the
# login) and rendered-large-norules (the rule sets' destinations in the proxy's own allow-list, no rule set).
#
# (bench dataplane-pod, internal/cmd/bench, makes and removes them; the lists are dataplane-render's.) The
# figures are the machine leg's: requests/s at saturation (wrk), tunnels/s at saturation (bench tunnels), p50
# and p99 added at half load (hey, bench tunnels -rate) over the origin reached straight at that rate, and the
# resident memory of the pod's Squid and its helpers idle and with BENCH_HELD tunnels open (bench hold, on the
# container's processes, which the node's /proc shows). Squid's processes are pinned to the last CPU (taskset
# on the pod's processes, found through its cgroup), the client and the origin to the others, as on the
# machine. Prints the same table, with ratios to plain Squid, and fails if any subject saw an error or a
# refusal (bench dataplane-check).
#
# What differs from the machine leg: the path (client -> the node's pod bridge -> the pod's veth -> back to the
# node; the direct leg never leaves the node's namespace), the origin's ports (18080 and 18443, allowed in the
# rendered configs: the cluster's own test origin has port 80 on every address), and name resolution (the
# pod's Squid asks the cluster's name server, which learns the origin's name from a hosts file of this run in
# its hosts directory). Compare the ratios, not the figures, with the machine leg's.
#
# It adds to the node's namespace, for as long as it runs, the client's source addresses (198.18.2.11-18 on
# its loopback: the per-client connection limit counts per address, and 1,000 tunnels need several), the
# origin's address (198.18.3.2 on its loopback: the node's own is in a private range the rendered configs
# refuse as a destination, and the machine leg's origin is not), its name in $EGRESS_K8S_STATE/dns-hosts, a route
# to the measured pod's address from the first of them (wrk and hey cannot choose their source; the node's
# own address on the pod bridge is not in the rendered configs' client ranges) and the origin's process, and works in a Kubernetes namespace of its own, egress-dpbench-PID; it removes all of
# them at the end and touches nothing else of the cluster's. Needs root.
#
# Environment: EGRESS_K8S_STATE and EGRESS_K8S_NETNS (the cluster's, as scripts/k8s-env.sh takes them),
# KUBECONFIG (the cluster's by default), IMAGE (the proxy image, the dev image the test cluster imports by
# default), BENCH_SECONDS (default 10), BENCH_HELD (default 1000), OUT (a directory to keep results.txt and
# table.md in), KEEP, BENCH_BIN (a bench command to run instead of building one).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"

all=(direct squid-plain rendered-small rendered-small-tls rendered-large rendered-large-tls)
variants=(rendered-large-noauth rendered-large-norules)
subjects=("$@")
[ ${#subjects[@]} -gt 0 ] || subjects=("${all[@]}")
for s in "${subjects[@]}"; do
	[[ " ${all[*]} ${variants[*]} " == *" $s "* ]] || die "no subject $s (subjects: ${all[*]} ${variants[*]})"
done
seconds=${BENCH_SECONDS:-10}
held=${BENCH_HELD:-1000}
state=${EGRESS_K8S_STATE:-/var/tmp/egress-k8s}
netns=${EGRESS_K8S_NETNS:-egress-k8s}
export KUBECONFIG=${KUBECONFIG:-$state/kubeconfig}
image=${IMAGE:-localhost/egress-proxies/squid:dev}

[ "$(id -u)" = 0 ] || die "needs root: it runs the client in the cluster's network namespace"
for p in ip wrk hey taskset unshare go; do
	command -v "$p" >/dev/null || die "no $p on PATH (scripts/install-deps.sh test installs the packages)"
done
[ -r "$KUBECONFIG" ] || die "no kubeconfig at $KUBECONFIG (start the test cluster: scripts/k8s-env.sh start)"
ip netns list | awk '{print $1}' | grep -qxF -- "$netns" || die "no network namespace $netns (scripts/k8s-env.sh start)"
cpus=$(nproc)
[ "$cpus" -ge 2 ] || die "needs 2 CPUs at least: one for the proxy, one for the client and the origin"
proxy_cpu=$((cpus - 1))
client_cpus=0-$((cpus - 2))
client_threads=$((cpus - 1))

tmp=$(mktemp -d "${TMPDIR:-/tmp}/egress-bench-dataplane-k8s.XXXXXX")
ns=egress-dpbench-$$
pids=()
added_addrs=()
added_route=()
made_ns=""
current=""
pinned=""

# The origin's address and name, on the node.
origin_ip=198.18.3.2
origin=origin.dpbench-$$.test
dns_hosts=$state/dns-hosts/dpbench-$$
http_port=18080 tunnel_port=18443
client_range=198.18.2.0/24
sources=198.18.2.11,198.18.2.12,198.18.2.13,198.18.2.14,198.18.2.15,198.18.2.16,198.18.2.17,198.18.2.18

cleanup() {
	local pid a
	if [ -n "$pinned" ]; then pin_cluster "0-$((cpus - 1))"; fi
	if [ -n "$current" ]; then "$bench" dataplane-pod delete -kubeconfig "$KUBECONFIG" -namespace "$ns" -subject "$current" >/dev/null 2>&1 || true; fi
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [ ${#added_route[@]} -gt 0 ]; then ip -n "$netns" route del "${added_route[@]}" 2>/dev/null || true; fi
	for a in "${added_addrs[@]}"; do ip -n "$netns" addr del "$a/32" dev lo 2>/dev/null || true; done
	rm -f "$dns_hosts"
	if [ -n "$made_ns" ]; then "$bench" namespace delete -kubeconfig "$KUBECONFIG" "$ns" >/dev/null 2>&1 || true; fi
	if [ -n "${KEEP:-}" ]; then log "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The cluster's own daemons (scripts/k8s-env.sh's pid files: the API server, etcd, the kubelet, containerd, the
# network policy controller and the rest) run on the client's CPUs while the run lasts, so that Squid's CPU is
# Squid's: a profile of a run without this found up to a tenth of that CPU taken by them (the API server,
# containerd, iptables of the policy controller), more in one subject's measurement than in the next, which made
# the ratios between subjects drift from run to run. What they start meanwhile inherits it. Only a pid whose
# process runs in the cluster's network namespace is moved, and each gets every CPU back at the end.
cluster_daemons() {
	local f pid
	for f in "$state"/pids/*.pid; do
		pid=$(cat "$f" 2>/dev/null) || continue
		[ -n "$pid" ] && [ "$(ip netns identify "$pid" 2>/dev/null)" = "$netns" ] && echo "$pid"
	done
	return 0
}
pin_cluster() {
	local pid
	for pid in $(cluster_daemons); do taskset -a -c -p "$1" "$pid" >/dev/null 2>&1 || true; done
}
pinned=1
pin_cluster "$client_cpus"

bench=${BENCH_BIN:-$tmp/bench}
if [ -z "${BENCH_BIN:-}" ]; then
	log "building the bench command"
	(cd "$root" && go build -o "$bench" ./internal/cmd/bench)
fi

# The client's and the origin's view of names: the origin's name on the node's address, the rest the machine's.
{
	cat /etc/hosts
	echo "$origin_ip $origin"
} >"$tmp/hosts"
[ -d "$(dirname "$dns_hosts")" ] || die "no $(dirname "$dns_hosts"): is EGRESS_K8S_STATE the cluster's?"
echo "$origin_ip $origin" >"$dns_hosts"
for a in ${sources//,/ } "$origin_ip"; do
	ip -n "$netns" addr add "$a/32" dev lo
	added_addrs+=("$a")
done

# in_node CPUS COMMAND... runs COMMAND in the node's network namespace on CPUS, with the run's hosts file for
# /etc/hosts (in a mount namespace of its own: the machine's file is untouched). Each step execs the next, so
# in the background $! is the command's own process.
in_node() {
	local cpus=$1
	shift
	# shellcheck disable=SC2016 # the inner shell expands its own arguments
	ip netns exec "$netns" unshare --mount --propagation private \
		sh -c 'mount --bind "$1" /etc/hosts && cpus=$2 && shift 2 && exec taskset -c "$cpus" "$@"' sh "$tmp/hosts" "$cpus" "$@"
}
client() { in_node "$client_cpus" "$@"; }

"$bench" namespace create -kubeconfig "$KUBECONFIG" "$ns" >"$tmp/namespace.log" 2>&1 ||
	{ cat "$tmp/namespace.log" >&2; die "could not make namespace $ns"; }
made_ns=1

ulimit -n "$(ulimit -Hn)"
log "load average at start: $(cat /proc/loadavg)"
log "origin on $origin_ip:$http_port and :$tunnel_port in $netns, proxies are pods pinned to CPU $proxy_cpu, client on CPUs $client_cpus"
in_node "$client_cpus" "$bench" origin "$origin_ip:$http_port" "$origin_ip:$tunnel_port" >"$tmp/origin.log" 2>&1 &
pids+=($!)
client "$bench" wait "$origin_ip:$http_port" "$origin_ip:$tunnel_port"

results=$tmp/results.txt
: >"$results"
record() { sed "s/^/$1 $2 /" >>"$results"; }

# pod_squid UID prints the pid, as the node sees it, of the pod's Squid: the process named squid whose parent
# is not one (its helpers are its children). The pod's cgroup, under the cluster's cgroup root, lists them.
pod_squid() {
	local dir pid
	dir=$(find /sys/fs/cgroup -maxdepth 6 -type d -path "*/$netns/*" -name "pod$1" -print -quit 2>/dev/null)
	[ -n "$dir" ] || return 1
	for pid in $(find "$dir" -name cgroup.procs -exec cat {} + | sort -un); do
		if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = squid ] &&
			[ "$(cat "/proc/$(awk '{print $4}' "/proc/$pid/stat")/comm" 2>/dev/null)" != squid ]; then
			echo "$pid"
			return 0
		fi
	done
	return 1
}
# pod_pids UID prints every process of the pod.
pod_pids() {
	local dir
	dir=$(find /sys/fs/cgroup -maxdepth 6 -type d -path "*/$netns/*" -name "pod$1" -print -quit 2>/dev/null)
	find "$dir" -name cgroup.procs -exec cat {} + | sort -un
}

start_proxy() {
	local s=$1 dir=$tmp/$1 out pid uid dev
	mkdir -p "$dir"
	log "$s: making its pod"
	current=$s
	out=$("$bench" dataplane-pod create -kubeconfig "$KUBECONFIG" -namespace "$ns" -subject "$s" -image "$image" \
		-origin "$origin" -client "$client_range" -ports "$http_port,$tunnel_port" -dir "$dir") ||
		die "$s: its pod did not become ready"
	proxy_ip=$(sed -n 's/.*ip=\([^ ]*\).*/\1/p' <<<"$out")
	uid=$(sed -n 's/.*uid=\([^ ]*\).*/\1/p' <<<"$out")
	dev=$(ip -n "$netns" route get "$proxy_ip" | sed -n 's/.* dev \([^ ]*\).*/\1/p')
	[ -n "$dev" ] || die "$s: no route to its pod $proxy_ip"
	added_route=("$proxy_ip/32" dev "$dev" src "${sources%%,*}")
	ip -n "$netns" route add "${added_route[@]}"
	proxy_pid=$(pod_squid "$uid") || die "$s: no Squid process in pod $uid's cgroup"
	# Its helpers start later and inherit the affinity: pin what runs now, the pause process with it.
	for pid in $(pod_pids "$uid"); do taskset -a -c -p "$proxy_cpu" "$pid" >/dev/null 2>&1 || true; done
	auth_file=$dir/client-auth
	ca="" proxy_url=http://$proxy_ip:3128
	if [ -f "$dir/ca.pem" ]; then
		ca=$dir/ca.pem proxy_url=https://$proxy_ip:3128
	fi
	client "$bench" wait "$proxy_ip:3128" || die "$s: its pod does not answer on $proxy_ip:3128"
}

stop_proxy() {
	"$bench" dataplane-pod delete -kubeconfig "$KUBECONFIG" -namespace "$ns" -subject "$1" >"$tmp/$1.delete.log" 2>&1 ||
		{ cat "$tmp/$1.delete.log" >&2; die "$1: its pod could not be removed"; }
	current=""
	ip -n "$netns" route del "${added_route[@]}"
	added_route=()
}

origin_url=http://$origin:$http_port/ origin_tunnel=$origin:$tunnel_port proxy_name=proxy.dataplane.bench
# shellcheck source=bench-measure.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench-measure.sh"

measure_all "${subjects[@]}"
