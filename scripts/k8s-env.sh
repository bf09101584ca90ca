#!/usr/bin/env bash
# k8s-env.sh start|stop|status
#
# The single-node Kubernetes cluster the kubernetes backend's acceptance tests run against: etcd, the API
# server, controller manager, scheduler, kubelet and kube-proxy (one binary, scripts/build-k8s.sh), Debian's
# containerd and runc, and the bridge CNI plugin, all inside a network namespace of their own and a private
# mount namespace. Pods, their bridge, the service range and kube-proxy's iptables rules exist only there.
# The root namespace gets nothing but one socat process listening on 127.0.0.1 that forwards to the API
# server, through a unix socket the namespace's side listens on.
#
# Written for the tests: $STATE/kubeconfig (admin), the Squid image imported into containerd, a name server
# and a small HTTP origin inside the namespace (every name under egress-k8s.test resolves to it from pods)
# that the tests send proxied requests to. start is idempotent; stop ends every process, removes the namespaces'
# objects, the pods' cgroups and $STATE, and leaves nothing behind.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NETNS=${EGRESS_K8S_NETNS:-egress-k8s}
STATE=${EGRESS_K8S_STATE:-/var/tmp/egress-k8s}
API_PORT=${EGRESS_K8S_API_PORT:-16443}
CACHE=${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}
NODE=egress-node
# Addresses private to the namespace: the node's own, the pods' and the services'.
NODE_IP=172.31.255.1
PEER_IP=172.31.255.2
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
SERVICE_API_IP=10.96.0.1
# Every name under this domain resolves to the namespace's HTTP origin, so tests can allow one name and deny
# another that is served all the same.
ORIGIN_DOMAIN=egress-k8s.test
PACKAGES=(containerd runc containernetworking-plugins socat iptables dnsmasq-base debootstrap jq curl openssl)
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

log() { echo "k8s-env: $(date +%T) $*" >&2; }

need_root() {
	[ "$(id -u)" = 0 ] || { log "must run as root"; exit 1; }
}

install_packages() {
	local missing=() p
	for p in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return
	log "installing ${missing[*]}"
	# The packages' scripts would start containerd in the root namespace: forbid service starts meanwhile.
	local policy=/usr/sbin/policy-rc.d made=
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 || {
		[ -n "$made" ] && rm -f "$policy"
		exit 1
	}
	[ -n "$made" ] && rm -f "$policy"
	return 0
}

api() { # api PATH: GET from the API server as admin, through the forwarded port
	curl -sf --max-time 5 --cacert "$STATE/pki/ca.crt" --cert "$STATE/pki/admin.crt" --key "$STATE/pki/admin.key" \
		"https://127.0.0.1:$API_PORT$1"
}

node_ready() {
	api "/api/v1/nodes/$NODE" 2>/dev/null |
		jq -e '.status.conditions[] | select(.type == "Ready") | .status == "True"' >/dev/null 2>&1
}

# The pid files outlive their processes when the machine restarts, and a pid can then belong to anything: a
# pid counts as ours only while its process still runs where ours ran (the supervisor and the daemons in the
# namespace, the forwarder with our port on its command line).
in_netns() { [ "$(ip netns identify "$1" 2>/dev/null)" = "$NETNS" ]; }
cmdline_has() { [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "$2"; }

running() {
	[ -f "$STATE/supervisor.pid" ] || return 1
	local pid
	pid=$(cat "$STATE/supervisor.pid")
	[ -n "$pid" ] && in_netns "$pid" && cmdline_has "$pid" "k8s-env.sh _inside"
}

# pki makes a CA and the certificates the components use; kept for the life of $STATE.
pki() {
	local d=$STATE/pki
	[ -f "$d/done" ] && return
	mkdir -p "$d"
	openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=egress-k8s-ca" -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
	cert() { # cert NAME SUBJECT [SANs]
		openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$d/$1.key" -out "$d/$1.csr" 2>/dev/null
		local ext=$d/$1.ext
		echo "extendedKeyUsage=serverAuth,clientAuth" >"$ext"
		[ -n "${3:-}" ] && echo "subjectAltName=$3" >>"$ext"
		openssl x509 -req -in "$d/$1.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 3650 \
			-extfile "$ext" -out "$d/$1.crt" 2>/dev/null
	}
	cert apiserver "/CN=kube-apiserver" "IP:127.0.0.1,IP:$NODE_IP,IP:$SERVICE_API_IP,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:localhost"
	cert admin "/O=system:masters/CN=egress-admin"
	cert kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
	openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
	openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
	touch "$d/done"
}

kubeconfig() { # kubeconfig FILE SERVER
	local ca crt key
	ca=$(base64 -w0 <"$STATE/pki/ca.crt")
	crt=$(base64 -w0 <"$STATE/pki/admin.crt")
	key=$(base64 -w0 <"$STATE/pki/admin.key")
	cat >"$1" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: egress-k8s
  cluster: {server: "$2", certificate-authority-data: "$ca"}
users:
- name: egress-admin
  user: {client-certificate-data: "$crt", client-key-data: "$key"}
contexts:
- name: egress-k8s
  context: {cluster: egress-k8s, user: egress-admin}
current-context: egress-k8s
KUBECONFIG
}

configs() {
	local c=$STATE/config
	mkdir -p "$c" "$STATE/cni" "$STATE/sysctl" "$STATE/var-lib" "$STATE/var-log" "$STATE/run" "$STATE/log" "$STATE/origin"
	kubeconfig "$c/components.kubeconfig" "https://$NODE_IP:6443"
	kubeconfig "$STATE/kubeconfig" "https://127.0.0.1:$API_PORT"
	cat >"$c/containerd.toml" <<TOML
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/egress-proxies/pause:debian12"
  # Root here lacks CAP_SYS_RESOURCE: without this every pod sandbox fails to start.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni"
TOML
	cat >"$STATE/cni/10-egress-k8s.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "egress-k8s", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
]}
JSON
	cat >"$c/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This kind of machine runs cgroup v1 (hybrid); the kubelet refuses it unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: $NODE_IP
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization: {mode: Webhook}
failSwapOn: false
resolvConf: $STATE/config/pod-resolv.conf
# A test machine's disk is often fuller than the defaults tolerate; pods are never evicted here.
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
YAML
	# Pods resolve through the namespace's name server, which knows the test origin's domain and nothing else.
	echo "nameserver $NODE_IP" >"$c/pod-resolv.conf"
	cat >"$c/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $c/components.kubeconfig}
hostnameOverride: $NODE
clusterCIDR: $POD_CIDR
# Zero leaves the host-wide conntrack table size alone.
conntrack: {maxPerCore: 0, min: 0}
YAML
	echo "egress-k8s origin" >"$STATE/origin/index.html"
	# The values the kubelet insists on, in plain files bind-mounted over the machine-wide sysctls it would
	# otherwise rewrite (see inside).
	echo 1 >"$STATE/sysctl/overcommit_memory"
	echo 10 >"$STATE/sysctl/panic"
	echo 1 >"$STATE/sysctl/panic_on_oops"
}

network() {
	ip netns list | grep -qw "^$NETNS" || ip netns add "$NETNS"
	local nsx=(ip netns exec "$NETNS")
	"${nsx[@]}" ip link set lo up
	# The node's interface: a veth pair with both ends inside the namespace (this machine has no dummy
	# driver). Its peer is the default route, so traffic to service addresses finds a route before
	# kube-proxy's rules rewrite it.
	if ! "${nsx[@]}" ip link show k8s-node >/dev/null 2>&1; then
		"${nsx[@]}" ip link add k8s-node type veth peer name k8s-peer
		"${nsx[@]}" ip addr add "$NODE_IP/24" dev k8s-node
		"${nsx[@]}" ip addr add "$PEER_IP/24" dev k8s-peer
	fi
	"${nsx[@]}" ip link set k8s-node up
	"${nsx[@]}" ip link set k8s-peer up
	"${nsx[@]}" ip route replace default via "$PEER_IP" dev k8s-node
	"${nsx[@]}" sysctl -qw net.ipv4.ip_forward=1
}

# inside runs in the namespaces (started by start): mounts, then every daemon, then waits on them.
inside() {
	# Written by the supervisor itself: setsid forks when it is started as a process group leader, and then
	# the pid the starter saw is not the one that runs.
	echo $$ >"$STATE/supervisor.pid"
	trap 'echo "k8s-env: supervisor failed at line $LINENO: $BASH_COMMAND" >&2' ERR
	# The kubelet and containerd write under /var/lib, /var/log and /run, and the kubelet sets
	# vm.overcommit_memory, kernel.panic and kernel.panic_on_oops machine-wide: all of them land on files
	# of this environment instead.
	mount --bind "$STATE/var-lib" /var/lib
	mount --bind "$STATE/var-log" /var/log
	mount --bind "$STATE/run" /run
	mkdir -p /run/netns
	mount --bind "$STATE/sysctl/overcommit_memory" /proc/sys/vm/overcommit_memory
	mount --bind "$STATE/sysctl/panic" /proc/sys/kernel/panic
	mount --bind "$STATE/sysctl/panic_on_oops" /proc/sys/kernel/panic_on_oops

	local bin=$CACHE/k8s c=$STATE/config l=$STATE/log p=$STATE/pids
	mkdir -p "$p"
	daemon() { # daemon NAME CMD...: starts CMD in the background with its log and pid file
		local name=$1
		shift
		"$@" >"$l/$name.log" 2>&1 &
		echo $! >"$p/$name.pid"
	}
	daemon containerd containerd --config "$c/containerd.toml"
	daemon dnsmasq dnsmasq --no-daemon --user=root --no-resolv --no-hosts --bind-interfaces --listen-address="$NODE_IP" \
		--address="/$ORIGIN_DOMAIN/$NODE_IP" --pid-file=
	daemon origin /usr/bin/python3 -m http.server 80 --bind "$NODE_IP" --directory "$STATE/origin"
	daemon apiserver-socket socat "UNIX-LISTEN:$STATE/apiserver.sock,fork,unlink-early,mode=600" "TCP:$NODE_IP:6443"
	daemon etcd "$bin/etcd" --data-dir "$STATE/etcd" --listen-client-urls http://127.0.0.1:2379 \
		--advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
		--initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster default=http://127.0.0.1:2380 \
		--unsafe-no-fsync --quota-backend-bytes=1073741824 --log-level=warn
	for _ in $(seq 100); do
		[ -S /run/containerd/containerd.sock ] && break
		sleep 0.2
	done
	# The socket file can appear a moment before containerd serves on it.
	local tries
	for tries in $(seq 20); do
		ctr -n k8s.io images import "$CACHE/images/squid-oci.tar" >"$l/import.log" 2>&1 && break
		[ "$tries" = 20 ] && { echo "k8s-env: importing the image failed:" >&2; cat "$l/import.log" >&2; exit 1; }
		sleep 1
	done
	daemon kube-apiserver "$bin/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
		--bind-address="$NODE_IP" --secure-port=6443 --advertise-address="$NODE_IP" \
		--tls-cert-file="$STATE/pki/apiserver.crt" --tls-private-key-file="$STATE/pki/apiserver.key" \
		--client-ca-file="$STATE/pki/ca.crt" \
		--kubelet-client-certificate="$STATE/pki/kubelet-client.crt" --kubelet-client-key="$STATE/pki/kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP \
		--service-account-key-file="$STATE/pki/sa.pub" --service-account-signing-key-file="$STATE/pki/sa.key" \
		--service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range="$SERVICE_CIDR" \
		--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction,ResourceQuota \
		--allow-privileged=true --profiling=false
	daemon kube-controller-manager "$bin/kube-controller-manager" --kubeconfig="$c/components.kubeconfig" \
		--authentication-kubeconfig="$c/components.kubeconfig" --authorization-kubeconfig="$c/components.kubeconfig" \
		--service-account-private-key-file="$STATE/pki/sa.key" --root-ca-file="$STATE/pki/ca.crt" \
		--cluster-signing-cert-file="$STATE/pki/ca.crt" --cluster-signing-key-file="$STATE/pki/ca.key" \
		--use-service-account-credentials=true --leader-elect=false --bind-address=127.0.0.1 \
		--service-cluster-ip-range="$SERVICE_CIDR" --controllers='*,-nodeipam'
	daemon kube-scheduler "$bin/kube-scheduler" --kubeconfig="$c/components.kubeconfig" \
		--authentication-kubeconfig="$c/components.kubeconfig" --authorization-kubeconfig="$c/components.kubeconfig" \
		--leader-elect=false --bind-address=127.0.0.1
	daemon kubelet "$bin/kubelet" --config="$c/kubelet.yaml" --kubeconfig="$c/components.kubeconfig" \
		--hostname-override="$NODE" --node-ip="$NODE_IP" --root-dir=/var/lib/kubelet
	daemon kube-proxy "$bin/kube-proxy" --config="$c/kube-proxy.yaml"
	wait
}

start() {
	need_root
	if running && node_ready; then
		log "already running (kubeconfig $STATE/kubeconfig)"
		return
	fi
	# Whatever an earlier cluster left (its processes gone with a restarted machine, its sockets, pid files and
	# netns still there) goes first: containerd's stale socket alone would make the image import fail.
	if running || [ -e "$STATE" ] || ip netns list | grep -qw "^$NETNS"; then
		stop
	fi
	install_packages
	"$HERE/build-k8s.sh" >/dev/null
	"$HERE/build-k8s-image.sh" >/dev/null
	local t0
	t0=$(date +%s)
	mkdir -p "$STATE"
	pki
	configs
	network
	# One process holds the private mount namespace; every daemon is its child. setsid gives it a process
	# group of its own for stop. nsenter, not `ip netns exec`: the latter mounts a fresh /sys without the
	# cgroup hierarchies runc needs.
	rm -f "$STATE/supervisor.pid"
	setsid unshare --mount --propagation private -- nsenter --net="/run/netns/$NETNS" -- "$HERE/k8s-env.sh" _inside \
		</dev/null >"$STATE/log/supervisor.log" 2>&1 &
	local launcher=$! i
	for i in $(seq 100); do
		[ -s "$STATE/supervisor.pid" ] && break
		kill -0 "$launcher" 2>/dev/null || [ -s "$STATE/supervisor.pid" ] || {
			# A forked setsid's parent exits at once: give the child its moment to write its pid.
			sleep 1
			[ -s "$STATE/supervisor.pid" ] && break
			log "the cluster's supervisor did not start; logs in $STATE/log"
			cat "$STATE/log/supervisor.log" >&2
			exit 1
		}
		sleep 0.1
	done
	setsid socat "TCP-LISTEN:$API_PORT,bind=127.0.0.1,reuseaddr,fork" "UNIX-CONNECT:$STATE/apiserver.sock" \
		</dev/null >"$STATE/log/forward.log" 2>&1 &
	echo $! >"$STATE/forward.pid"
	for i in $(seq 600); do
		node_ready && break
		running || { log "the cluster stopped; logs in $STATE/log"; tail -n 20 "$STATE"/log/*.log >&2; exit 1; }
		sleep 0.5
	done
	node_ready || { log "node not Ready after 300s; logs in $STATE/log"; exit 1; }
	# The default ServiceAccount appears shortly after the controller manager starts; pods need it.
	for i in $(seq 120); do
		api /api/v1/namespaces/default/serviceaccounts/default >/dev/null 2>&1 && break
		sleep 0.5
	done
	log "ready in $(($(date +%s) - t0)) s; KUBECONFIG=$STATE/kubeconfig"
}

kill_pidfile() { # kill_pidfile FILE: ends the daemon the file names if it still runs in the namespace
	[ -f "$1" ] || return 0
	local pid
	pid=$(cat "$1")
	[ -n "$pid" ] && in_netns "$pid" && kill -TERM "$pid" 2>/dev/null
	return 0
}

stop() {
	need_root
	# The kubelet first, so it restarts nothing; then every container the runtime runs.
	kill_pidfile "$STATE/pids/kubelet.pid"
	if running; then
		local mnt=/proc/$(cat "$STATE/supervisor.pid")/ns/mnt
		local ctrx=(nsenter --mount="$mnt" --net=/run/netns/"$NETNS" ctr -n k8s.io)
		local t
		for t in $("${ctrx[@]}" tasks ls -q 2>/dev/null); do
			"${ctrx[@]}" tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
		done
	fi
	local f
	for f in "$STATE"/pids/*.pid; do
		[ -e "$f" ] && kill_pidfile "$f"
	done
	if [ -f "$STATE/forward.pid" ]; then
		local forward
		forward=$(cat "$STATE/forward.pid")
		cmdline_has "$forward" "TCP-LISTEN:$API_PORT," && kill -TERM "$forward" 2>/dev/null
	fi
	if running; then
		kill -TERM -- "-$(cat "$STATE/supervisor.pid")" 2>/dev/null || true
	fi
	# Whatever still runs in the namespace (container shims, pod processes whose pod namespace is gone).
	local pid i
	for i in $(seq 40); do
		local left=()
		if ip netns list | grep -qw "^$NETNS"; then
			mapfile -t left < <(ip netns pids "$NETNS" 2>/dev/null)
		fi
		mapfile -t -O "${#left[@]}" left < <(cat /sys/fs/cgroup/*/kubepods/cgroup.procs /sys/fs/cgroup/*/kubepods/*/cgroup.procs \
			/sys/fs/cgroup/*/kubepods/*/*/cgroup.procs /sys/fs/cgroup/*/kubepods/*/*/*/cgroup.procs 2>/dev/null || true)
		[ ${#left[@]} -eq 0 ] && break
		for pid in "${left[@]}"; do
			kill -"$([ "$i" -gt 10 ] && echo KILL || echo TERM)" "$pid" 2>/dev/null || true
		done
		sleep 0.25
	done
	# The kubelet's pod cgroups (cgroupfs driver) in every hierarchy, deepest first.
	find /sys/fs/cgroup -depth -type d -path '*/kubepods*' -exec rmdir {} + 2>/dev/null || true
	ip netns list | grep -qw "^$NETNS" && ip netns del "$NETNS"
	rm -rf "$STATE"
	log "stopped"
}

status() {
	if running && node_ready; then
		echo "running: KUBECONFIG=$STATE/kubeconfig"
	else
		echo "not running"
		return 1
	fi
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
_inside) inside ;;
*)
	echo "usage: $0 start|stop|status" >&2
	exit 2
	;;
esac
