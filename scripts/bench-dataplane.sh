#!/usr/bin/env bash
# bench-dataplane.sh [SUBJECT...]
#
# Measures the data plane: what a request and a tunnel cost through each proxy, side by side, in one run on
# this machine, the same client and the same origin for all. The subjects (all of them by default):
#
#   direct               straight to the origin: the floor
#   squid-plain          Squid (Debian's squid-openssl, the build the proxy image runs) with a minimal
#                        allow-all forward config, what a hand-written module ships
#   rendered-small       this project's squid.conf (internal/proxyconf RenderSquidConf): 10 destinations
#   rendered-small-tls   the same with TLS on the proxy port
#   rendered-large       500 destinations and 200 client ranges over its allow-list and 10 rule sets (the
#                        client in the last), and a login: the longest lists a proxy takes
#   rendered-large-tls   the same with TLS on the proxy port
#   tinyproxy            Debian's tinyproxy, its defaults but for the address and more clients at once
#   smokescreen          Stripe's Smokescreen v0.1.0 without an ACL (scripts/build-smokescreen.sh)
#
# For each: HTTP requests/s at saturation (wrk, keep-alive, 64 connections), new CONNECT tunnels/s at
# saturation (bench tunnels, internal/cmd/bench: a new connection, CONNECT, one exchange through the tunnel,
# close; wrk and hey cannot open a tunnel without a TLS handshake with the origin inside it); the p50 and p99
# latency each adds at half its own saturation rate (hey -q for requests, bench tunnels -rate for tunnels),
# over the origin reached straight at that same rate; and the resident memory of the proxy's processes idle
# and with 1,000 tunnels held open (bench hold). The proxy runs alone on the last CPU (taskset), so the rates
# are per core: Squid with one worker, Smokescreen with GOMAXPROCS 1; the client and the origin share the
# other CPUs. Prints the table, with ratios to plain Squid, the issue's targets met or missed, and what TLS on
# the proxy port costs; then fails if any subject saw an error or a refusal (bench dataplane-check).
#
# Everything runs in three network namespaces of its own, egbench-PID-{client,proxy,origin}, joined by veth
# pairs made inside them (198.18.0.0/24 client-proxy, 198.18.1.0/24 proxy-origin; the proxy namespace
# forwards between them for the direct leg), each process in a mount namespace of its own where a hosts file
# and a resolv.conf of the run's stand for /etc's: the origin's name resolves without DNS, and other lookups
# get "no such name" from a resolver in the origin's namespace. The namespaces' sysctls
# (ports, TIME_WAIT reuse, forwarding) are theirs alone. All of it is removed on exit; nothing of the
# machine's is touched. It needs root and the machine to itself: other load skews the figures (the load
# average is printed before and after). Compare ratios measured in one run; figures depend on the machine.
#
# Environment: BENCH_SECONDS (length of each measurement, default 10; make test's short run uses 1),
# BENCH_HELD (tunnels held open for the memory figure, default 1000), OUT (a directory to keep results,
# results.txt and table.md in), KEEP (keep the work directory), BENCH_BIN (a bench command to run instead of
# building one: the short run's test runs itself as it), EGRESS_CACHE.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"

all=(direct squid-plain rendered-small rendered-small-tls rendered-large rendered-large-tls tinyproxy smokescreen)
subjects=("$@")
[ ${#subjects[@]} -gt 0 ] || subjects=("${all[@]}")
for s in "${subjects[@]}"; do
	[[ " ${all[*]} " == *" $s "* ]] || die "no subject $s (subjects: ${all[*]})"
done
seconds=${BENCH_SECONDS:-10}
held=${BENCH_HELD:-1000}

[ "$(id -u)" = 0 ] || die "needs root: it makes network namespaces"
for p in ip wrk hey tinyproxy squid taskset unshare go; do
	command -v "$p" >/dev/null || die "no $p on PATH (scripts/install-deps.sh test installs the packages)"
done
cpus=$(nproc)
[ "$cpus" -ge 2 ] || die "needs 2 CPUs at least: one for the proxy, one for the client and the origin"
proxy_cpu=$((cpus - 1))
client_cpus=0-$((cpus - 2))
client_threads=$((cpus - 1))

tmp=$(mktemp -d "${TMPDIR:-/tmp}/egress-bench-dataplane.XXXXXX")
# Squid's user reaches its files in here after it drops from root.
chmod 755 "$tmp"
ns_c=egbench-$$-client ns_p=egbench-$$-proxy ns_o=egbench-$$-origin
made_ns=()
pids=()
squid_name=egbench$$

cleanup() {
	local pid ns
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	for ns in "${made_ns[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
	# Squid names its shared memory after the service name, which is this run's.
	rm -f /dev/shm/"$squid_name"-* 2>/dev/null || true
	if [ -n "${KEEP:-}" ]; then log "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building the bench command and Smokescreen"
bench=${BENCH_BIN:-$tmp/bench}
[ -n "${BENCH_BIN:-}" ] || (cd "$root" && go build -o "$bench" ./internal/cmd/bench)
smokescreen=$("$root/scripts/build-smokescreen.sh")

# The network: client -- proxy -- origin.
proxy_ip=198.18.0.2 origin_ip=198.18.1.2 client_range=198.18.0.0/24
sources=198.18.0.11,198.18.0.12,198.18.0.13,198.18.0.14,198.18.0.15,198.18.0.16,198.18.0.17,198.18.0.18
origin=origin.bench.example
for ns in "$ns_c" "$ns_p" "$ns_o"; do
	ip netns add "$ns"
	made_ns+=("$ns")
	ip -n "$ns" link set lo up
done
ip -n "$ns_c" link add c0 type veth peer name p0 netns "$ns_p"
ip -n "$ns_p" link add p1 type veth peer name o0 netns "$ns_o"
ip -n "$ns_c" addr add 198.18.0.1/24 dev c0
for a in ${sources//,/ }; do ip -n "$ns_c" addr add "$a/24" dev c0; done
ip -n "$ns_p" addr add "$proxy_ip/24" dev p0
ip -n "$ns_p" addr add 198.18.1.1/24 dev p1
ip -n "$ns_o" addr add "$origin_ip/24" dev o0
ip -n "$ns_c" link set c0 up
ip -n "$ns_p" link set p0 up
ip -n "$ns_p" link set p1 up
ip -n "$ns_o" link set o0 up
ip -n "$ns_c" route add default via "$proxy_ip"
ip -n "$ns_o" route add default via 198.18.1.1
# Tens of thousands of short connections a run: every port, and TIME_WAIT's reused, in these namespaces only.
for ns in "$ns_c" "$ns_p" "$ns_o"; do
	ip netns exec "$ns" sysctl -q -w net.ipv4.ip_local_port_range="1024 65535" net.ipv4.tcp_tw_reuse=1
done
ip netns exec "$ns_p" sysctl -q -w net.ipv4.ip_forward=1
# The machine's own names stay: Squid without visible_hostname (plain Squid's config) looks its host name up
# with the C library for every request, and a name missing from /etc/hosts costs each request a DNS query.
{
	cat /etc/hosts
	echo "$origin_ip $origin"
} >"$tmp/hosts"
# The origin answers DNS too, "no such name" to all: what the proxies ask besides the origin's name (Squid
# looks up each new client's address) gets a real resolver's quick answer, not the machine's unreachable one.
echo "nameserver $origin_ip" >"$tmp/resolv.conf"

# ns_prefix NS CPUS sets prefix to the command line that runs a command in network namespace NS on CPUS, with
# the run's hosts file and resolv.conf for /etc's (a private mount namespace: the machine's files are
# untouched). Each step execs the next, so a command started with it in the background is $!, the process to
# measure and to stop.
ns_prefix() {
	# shellcheck disable=SC2016 # the inner shell expands its own arguments
	prefix=(ip netns exec "$1" unshare --mount --propagation private
		sh -c 'mount --bind "$1/hosts" /etc/hosts && mount --bind "$1/resolv.conf" /etc/resolv.conf &&
			cpus=$2 && shift 2 && exec taskset -c "$cpus" "$@"' sh "$tmp" "$2")
}
# in_ns NS CPUS COMMAND... runs COMMAND so, in the foreground.
in_ns() {
	local prefix
	ns_prefix "$1" "$2"
	shift 2
	"${prefix[@]}" "$@"
}
client() { in_ns "$ns_c" "$client_cpus" "$@"; }

# Many tunnels at once need file descriptors: the limit systemd gives a service (Squid raises its own to the
# hard limit, up to 65536; the others take what they are given).
ulimit -n "$(ulimit -Hn)"

log "load average at start: $(cat /proc/loadavg)"
log "origin on $origin_ip (ports 80 and 443, plain HTTP; DNS), proxies on $proxy_ip:3128 pinned to CPU $proxy_cpu, client on CPUs $client_cpus"
ns_prefix "$ns_o" "$client_cpus"
"${prefix[@]}" "$bench" origin -dns "$origin_ip:53" "$origin_ip:80" "$origin_ip:443" >"$tmp/origin.log" 2>&1 &
pids+=($!)
client "$bench" wait "$origin_ip:80" "$origin_ip:443"

results=$tmp/results.txt
: >"$results"
record() { sed "s/^/$1 $2 /" >>"$results"; }

# start_proxy SUBJECT: starts it on the proxy CPU; sets proxy_pid, proxy_url (what wrk and hey are pointed
# at), ca (the CA to trust for TLS, or "") and auth_file (the Proxy-Authorization value's file, may be empty).
start_proxy() {
	local s=$1 dir=$tmp/$1
	mkdir -p "$dir"
	chown proxy:proxy "$dir"
	ca="" proxy_url=http://$proxy_ip:3128
	auth_file=$dir/client-auth
	: >"$auth_file"
	case "$s" in
	squid-plain)
		cat >"$dir/squid.conf" <<-CONF
			# What a hand-written module ships: forward everything, keep nothing, log every request.
			http_port $proxy_ip:3128
			http_access allow all
			cache deny all
			access_log stdio:$dir/access.log
			cache_log $dir/cache.log
			pid_filename none
			coredump_dir $dir
			hosts_file $tmp/hosts
			shutdown_lifetime 1 seconds
		CONF
		;;
	rendered-*)
		local size=${s#rendered-} tls=()
		size=${size%-tls}
		[[ $s == *-tls ]] && tls=(-tls)
		"$bench" dataplane-render -size "$size" "${tls[@]}" -dir "$dir" -listen "$proxy_ip" -origin "$origin" \
			-client "$client_range" -hosts "$tmp/hosts"
		if [[ $s == *-tls ]]; then
			ca=$dir/ca.pem proxy_url=https://$proxy_ip:3128
		fi
		;;
	tinyproxy)
		cat >"$dir/tinyproxy.conf" <<-CONF
			# Debian's tinyproxy.conf as shipped, but for the address and MaxClients (100 there: too few for
			# 1,000 tunnels), and the files in the run's directory.
			User nobody
			Group nogroup
			Port 3128
			Listen $proxy_ip
			Timeout 600
			DefaultErrorFile "/usr/share/tinyproxy/default.html"
			StatFile "/usr/share/tinyproxy/stats.html"
			LogFile "$dir/tinyproxy.log"
			LogLevel Info
			PidFile "$dir/tinyproxy.pid"
			MaxClients 2000
			ViaProxyName "tinyproxy"
		CONF
		chmod 777 "$dir"
		;;
	esac
	local prefix
	ns_prefix "$ns_p" "$proxy_cpu"
	case "$s" in
	squid-plain | rendered-*)
		"${prefix[@]}" squid -N -n "$squid_name" -f "$dir/squid.conf" >"$dir/squid.out" 2>&1 &
		;;
	tinyproxy)
		"${prefix[@]}" tinyproxy -d -c "$dir/tinyproxy.conf" >"$dir/tinyproxy.out" 2>&1 &
		;;
	smokescreen)
		"${prefix[@]}" "$smokescreen" --listen-ip "$proxy_ip" --listen-port 3128 >"$dir/smokescreen.log" 2>&1 &
		;;
	esac
	proxy_pid=$!
	pids+=("$proxy_pid")
	if ! client "$bench" wait "$proxy_ip:3128"; then
		tail -n 20 "$dir"/*.out "$dir"/*.log 2>/dev/null >&2 || true
		die "$s did not start"
	fi
}

stop_proxy() {
	kill "$proxy_pid" 2>/dev/null || true
	wait "$proxy_pid" 2>/dev/null || true
	rm -f /dev/shm/"$squid_name"-* 2>/dev/null || true
}

origin_url=http://$origin/ origin_tunnel=$origin:443 proxy_name=""
# shellcheck source=bench-measure.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench-measure.sh"

measure_all "${subjects[@]}"
