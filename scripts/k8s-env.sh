#!/usr/bin/env bash
# k8s-env.sh packages|start|stop|status
#
# The single-node Kubernetes cluster the kubernetes backend's acceptance tests run against: etcd, the API
# server, controller manager, scheduler, kubelet, kube-proxy and a NetworkPolicy controller (kube-router's,
# policies only; one binary, scripts/build-k8s.sh), Debian's containerd and runc, and the bridge CNI plugin,
# all inside a network namespace of their own and a private mount namespace. Pods, their bridge, the service
# range, kube-proxy's iptables rules and the policy controller's iptables rules and ipsets exist only there.
# The root namespace gets nothing but one socat process listening on 127.0.0.1 that forwards to the API
# server, through a unix socket the namespace's side listens on, and the namespace's own mount under
# /run/netns.
#
# Safe beside a containerd, kubelet or Docker the machine runs itself: ours reads its own config from $STATE,
# and its /run (socket /run/containerd/containerd.sock, state) and /var/lib (root /var/lib/containerd, the
# kubelet's folder) are folders of $STATE bound over them in the private mount namespace, so the machine's
# are never read, written or signalled. The kubelet's cgroup root is a folder of its own (/$NETNS in every
# cgroup hierarchy, not the usual /kubepods a machine's kubelet uses), and the machine-wide sysctls the
# kubelet would set are files of $STATE bound over them (see inside). stop ends only what this script
# started: the pids it recorded while they still run where it started them, the processes in its network
# namespace, those in its cgroup root and those carrying its mark in their environment; never a process
# found by name.
#
# Written for the tests: $STATE/kubeconfig (admin), the Squid image imported into containerd, a name server
# and a small HTTP origin inside the namespace (every name under egress-k8s.test resolves to it from pods)
# that the tests send proxied requests to; tests add names of their own as hosts files in $STATE/dns-hosts.
# The origin answers on every address of the namespace, the metadata servers' 169.254.169.254 among them,
# for the tests of what the proxy's network policy refuses. containerd may pull over plain HTTP from one
# registry, $REGISTRY on the node's address, which a test serves while it runs (nothing listens there
# otherwise); no other registry host has settings of its own.
# start is idempotent; stop ends every process, removes the namespaces' objects, the pods' cgroups and
# $STATE, and leaves nothing behind.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NETNS=${EGRESS_K8S_NETNS:-egress-k8s}
STATE=${EGRESS_K8S_STATE:-/var/tmp/egress-k8s}
API_PORT=${EGRESS_K8S_API_PORT:-16443}
CACHE=${EGRESS_CACHE:-$HOME/.cache/terraform-provider-egress}
NODE=egress-node
# The kubelet's cgroup root (cgroupfs driver): every pod's cgroups live below this folder of each cgroup
# hierarchy, which start makes and stop empties and removes. A kubelet the machine runs keeps /kubepods.
CGROUP_ROOT=/$NETNS
# Set in the environment of the two processes start launches (the supervisor and the forwarder), and so
# inherited by every daemon: stop still finds them when $STATE's pid files or the namespace are gone.
MARK=EGRESS_K8S_ENV_INSTANCE=$NETNS
# Addresses private to the namespace: the node's own, the pods' and the services'.
NODE_IP=172.31.255.1
PEER_IP=172.31.255.2
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
SERVICE_API_IP=10.96.0.1
# The registry the tests push images to and the cluster pulls them from (internal/provider's registry test
# serves it here for as long as it runs): plain HTTP, allowed for this host alone in containerd's hosts config.
REGISTRY=$NODE_IP:5000
# Every name under this domain resolves to the namespace's HTTP origin, so tests can allow one name and deny
# another that is served all the same.
ORIGIN_DOMAIN=egress-k8s.test
# The cloud metadata servers' address, on the namespace's loopback: the origin answers there too, so a test
# proves the proxy's NetworkPolicy is what keeps a pod from it (on a real cloud a server answers there).
METADATA_IP=169.254.169.254
# ipset: the NetworkPolicy controller keeps the addresses its rules match in ipsets, through the ipset tool.
PACKAGES=(containerd runc containernetworking-plugins socat iptables ipset dnsmasq-base debootstrap jq curl openssl)
# The sysctls the kubelet (v1.37, pkg/kubelet/cm/container_manager_linux.go setupKernelTunables) sets to these
# values unless they have them. Each is machine-wide (not per network, mount or IPC namespace): overcommit and
# the OOM and panic policies of the whole kernel, and the key quota of root in the initial user namespace.
# inside binds a file holding the value over each, so the kubelet finds it set and writes nothing.
KUBELET_SYSCTLS=(vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1
	kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000)
sysctl_file() { echo "${1//\//.}"; } # the file of $STATE/sysctl standing in for /proc/sys/$1

# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"

need_root() {
	[ "$(id -u)" = 0 ] || { log "must run as root"; exit 1; }
}

# The packages' scripts would start and enable containerd as the machine's service: install-packages.sh starts
# and enables nothing.
install_packages() {
	"$HERE/install-packages.sh" "${PACKAGES[@]}"
}

api() { # api PATH: GET from the API server as admin, through the forwarded port
	curl -sf --max-time 5 --cacert "$STATE/pki/ca.crt" --cert "$STATE/pki/admin.crt" --key "$STATE/pki/admin.key" \
		"https://127.0.0.1:$API_PORT$1"
}

node_ready() {
	api "/api/v1/nodes/$NODE" 2>/dev/null |
		jq -e '.status.conditions[] | select(.type == "Ready") | .status == "True"' >/dev/null 2>&1
}

# policy_controller_ready: kube-router's jump into its own chain is in the namespace's FORWARD chain. Read in
# the cluster's network and mount namespaces, as its daemons run: the machine's rules are never listed, and an
# iptables that takes its lock file takes the cluster's (under $STATE/run), not the machine's.
policy_controller_ready() {
	running || return 1
	nsenter --mount="/proc/$(cat "$STATE/supervisor.pid")/ns/mnt" --net="/run/netns/$NETNS" iptables -S FORWARD 2>/dev/null |
		grep -q -- '-j KUBE-ROUTER-FORWARD'
}

# The pid files outlive their processes when the machine restarts, and a pid can then belong to anything: a
# pid counts as ours only while its process still runs where ours ran (the supervisor and the daemons in the
# namespace, the forwarder with our port on its command line).
in_netns() { [ "$(ip netns identify "$1" 2>/dev/null)" = "$NETNS" ]; }
cmdline_has() { [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "$2"; }
netns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF -- "$NETNS"; }

# cgroup_mounts lists where the machine's cgroup hierarchies are mounted (v1 controllers, name=systemd, the
# v2 one): the kubelet's cgroup root is a folder in each.
cgroup_mounts() {
	awk '{ for (i = 7; $i != "-"; i++); if ($(i + 1) == "cgroup" || $(i + 1) == "cgroup2") print $5 }' /proc/self/mountinfo |
		sort -u
}

# marked_pids prints the processes that carry this instance's MARK: the ones start launched and their children.
marked_pids() {
	local p
	for p in /proc/[0-9]*; do
		[ "${p#/proc/}" != $$ ] && [ "${p#/proc/}" != "$BASHPID" ] &&
			grep -qzxF -- "$MARK" "$p/environ" 2>/dev/null && echo "${p#/proc/}"
	done
	return 0
}

# ours_cgroup DIR: DIR is shaped like the cgroup root start made, no process of its own and no child but the
# kubelet's kubepods. A guard against a name that happens to be one of the machine's cgroups (the names
# are the namespace's): stop leaves any other alone.
ours_cgroup() {
	local c
	[ -d "$1" ] && [ -z "$(cat "$1/cgroup.procs" 2>/dev/null)" ] || return 1
	for c in "$1"/*/; do
		[ "$c" = "$1/*/" ] || [ "$c" = "$1/kubepods/" ] || return 1
	done
}

# cgroup_pids prints the processes in the kubelet's cgroup root: the pods' (their own network namespaces
# are not ours, so `ip netns pids` misses them).
cgroup_pids() {
	local m
	for m in $(cgroup_mounts); do
		if ours_cgroup "$m$CGROUP_ROOT"; then
			find "$m$CGROUP_ROOT" -name cgroup.procs -exec cat {} + 2>/dev/null || true
		fi
	done
}

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
	mkdir -p "$c" "$STATE/cni" "$STATE/sysctl" "$STATE/var-lib" "$STATE/var-log" "$STATE/run" "$STATE/log" "$STATE/origin" \
		"$STATE/dns-hosts"
	kubeconfig "$c/components.kubeconfig" "https://$NODE_IP:6443"
	kubeconfig "$STATE/kubeconfig" "https://127.0.0.1:$API_PORT"
	cat >"$c/containerd.toml" <<TOML
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
# Its default, /opt/containerd, is outside what the mount namespace replaces: it would be made on the machine.
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/egress-proxies/pause:dev"
  # Root here lacks CAP_SYS_RESOURCE: without this every pod sandbox fails to start.
  restrict_oom_score_adj = true
  # On an AppArmor machine containerd would load its cri-containerd.apparmor.d profile into the kernel,
  # where it outlives the cluster.
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni"
  # Per-registry settings, one folder per host: only the tests' registry has one.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$STATE/certs.d"
TOML
	mkdir -p "$STATE/certs.d/$REGISTRY"
	cat >"$STATE/certs.d/$REGISTRY/hosts.toml" <<TOML
# The tests' registry speaks plain HTTP: containerd may pull from it so, and from no other host.
server = "http://$REGISTRY"
[host."http://$REGISTRY"]
  capabilities = ["pull", "resolve"]
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
# The pods' cgroups go under $CGROUP_ROOT/kubepods in each hierarchy (start makes $CGROUP_ROOT, the kubelet
# checks it exists), apart from a kubelet the machine runs, whose /kubepods stop never touches.
cgroupRoot: $CGROUP_ROOT
cgroupsPerQOS: true
# The kubelet wants six machine-wide sysctls set its way (vm.overcommit_memory, vm.panic_on_oom, kernel.panic,
# kernel.panic_on_oops, kernel.keys.root_maxkeys, kernel.keys.root_maxbytes); none is per network namespace.
# inside binds files holding its values over them; with this, a value it would have to change makes it fail
# instead of writing to the machine.
protectKernelDefaults: true
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
# Zero everywhere makes kube-proxy (v1.37, pkg/proxy/conntrack/sysctls.go) write none of the conntrack
# sysctls (it only sets those configured above zero). maxPerCore 0: nf_conntrack_max is machine-wide (read-only
# from any other network namespace) and raising it would also rewrite nf_conntrack's hashsize module
# parameter. The TCP timeouts default to 24h and 1h, which kube-proxy would set; they and the UDP ones and
# tcp_be_liberal are per network namespace on recent kernels (6.18 here), on older ones they were not:
# leaving them alone is safe either way. (route_localnet, which kube-proxy sets for localhost node ports,
# is net.ipv4.conf.all of our namespace only.)
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s, tcpBeLiberal: false,
  udpTimeout: 0s, udpStreamTimeout: 0s}
YAML
	echo "egress-k8s origin" >"$STATE/origin/index.html"
	# The values the kubelet insists on (v1.37 setupKernelTunables), in plain files bind-mounted over the
	# machine-wide sysctls it would otherwise rewrite (see inside).
	local kv
	for kv in "${KUBELET_SYSCTLS[@]}"; do
		echo "${kv#*=}" >"$STATE/sysctl/$(sysctl_file "${kv%%=*}")"
	done
}

network() {
	if ! netns_exists; then
		# The first `ip netns add` of a machine makes /run/netns a shared mount of itself, which `ip netns del`
		# leaves: stop unmounts it again if it was not one before and holds nothing else by then.
		mountpoint -q /run/netns 2>/dev/null || touch "$STATE/netns-run-mount"
		[ -d /run/netns ] || touch "$STATE/netns-run-dir"
		ip netns add "$NETNS"
	fi
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
	"${nsx[@]}" ip addr replace "$METADATA_IP/32" dev lo
	"${nsx[@]}" sysctl -qw net.ipv4.ip_forward=1
}

# inside runs in the namespaces (started by start): mounts, then every daemon, then waits on them.
inside() {
	# Written by the supervisor itself: setsid forks when it is started as a process group leader, and then
	# the pid the starter saw is not the one that runs.
	echo $$ >"$STATE/supervisor.pid"
	trap 'echo "k8s-env: supervisor failed at line $LINENO: $BASH_COMMAND" >&2' ERR
	# The kubelet and containerd write under /var/lib, /var/log and /run (containerd's root /var/lib/containerd,
	# its state and socket /run/containerd, the kubelet's /var/lib/kubelet, CNI's /var/lib/cni, the pods'
	# network namespaces in /run/netns), and the kubelet sets machine-wide sysctls: all of them land on files
	# of this environment instead. The mounts are private to this namespace (unshare --propagation private),
	# so a containerd or kubelet the machine runs keeps seeing its own /run and /var/lib. -n: mount would
	# otherwise take its lock in the machine's /run/mount (our /run is not bound yet).
	mount -n --bind "$STATE/var-lib" /var/lib
	mount -n --bind "$STATE/var-log" /var/log
	mount -n --bind "$STATE/run" /run
	mkdir -p /run/netns
	local kv f
	for kv in "${KUBELET_SYSCTLS[@]}"; do
		f=${kv%%=*}
		mount -n --bind "$STATE/sysctl/$(sysctl_file "$f")" "/proc/sys/$f"
	done
	# Checked, not assumed: a daemon started on the machine's own paths would meet a containerd the machine runs.
	if [ "$(stat -c %d:%i /run)" != "$(stat -c %d:%i "$STATE/run")" ] ||
		[ "$(stat -c %d:%i /var/lib)" != "$(stat -c %d:%i "$STATE/var-lib")" ]; then
		echo "k8s-env: /run and /var/lib are not this environment's" >&2
		exit 1
	fi

	local bin=$CACHE/k8s c=$STATE/config l=$STATE/log p=$STATE/pids
	mkdir -p "$p"
	daemon() { # daemon NAME CMD...: starts CMD in the background with its log and pid file
		local name=$1
		shift
		"$@" >"$l/$name.log" 2>&1 &
		echo $! >"$p/$name.pid"
	}
	daemon containerd containerd --config "$c/containerd.toml"
	# --hostsdir: a test adds names for addresses known only once a pod runs (its own, which the proxy must
	# refuse) as hosts files in $STATE/dns-hosts, which dnsmasq reads as they appear.
	daemon dnsmasq dnsmasq --no-daemon --user=root --no-resolv --no-hosts --bind-interfaces --listen-address="$NODE_IP" \
		--address="/$ORIGIN_DOMAIN/$NODE_IP" --hostsdir="$STATE/dns-hosts" --pid-file=
	# On every address of the namespace (the node's, its peer's, the metadata stand-in's), so that only a
	# network policy keeps a pod from any of them.
	daemon origin /usr/bin/python3 -m http.server 80 --bind 0.0.0.0 --directory "$STATE/origin"
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
	# The controller manager exits at once when the API server does not answer yet (it reads a ConfigMap as it
	# starts), and nothing restarts it: a cluster without it makes no ServiceAccounts. So the components start
	# once the API server is ready (anonymous /readyz, which every API server serves).
	for _ in $(seq 600); do
		curl -sf --max-time 2 --cacert "$STATE/pki/ca.crt" "https://$NODE_IP:6443/readyz" >/dev/null && break
		sleep 0.2
	done
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
	# NetworkPolicies are enforced for real (the acceptance tests prove the proxy's policy drops what it must):
	# kube-router's policy controller, in this namespace like the rest, where its iptables chains and ipsets
	# stay. kube-router v2.1.0 has published security advisories; it is only ever a test cluster's component.
	daemon network-policy "$bin/network-policy" --kubeconfig="$c/components.kubeconfig" --hostname-override="$NODE" \
		--service-cluster-ip-range="$SERVICE_CIDR"
	wait
}

# cgroups makes the kubelet's cgroup root in every hierarchy: the kubelet refuses a cgroup root that is
# missing from any of the v1 hierarchies it uses (cpu, cpuacct, cpuset, memory, pids, name=systemd), or (v2)
# whose cgroup.controllers lacks one it uses. It makes kubepods and the pods' cgroups below, and runc the
# containers' below those.
cgroups() {
	local m
	for m in $(cgroup_mounts); do
		if [ -e "$m$CGROUP_ROOT" ] && ! ours_cgroup "$m$CGROUP_ROOT"; then
			log "$m$CGROUP_ROOT exists and is not an earlier cluster's: name the cluster otherwise (EGRESS_K8S_NETNS)"
			exit 1
		fi
		mkdir -p "$m$CGROUP_ROOT"
	done
}

start() {
	need_root
	if running && node_ready; then
		log "already running (kubeconfig $STATE/kubeconfig)"
		return
	fi
	# Whatever an earlier cluster left (its processes gone with a restarted machine, its sockets, pid files and
	# netns still there) goes first: containerd's stale socket alone would make the image import fail.
	if running || [ -e "$STATE" ] || netns_exists; then
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
	cgroups
	# One process holds the private mount namespace; every daemon is its child. setsid gives it a process
	# group of its own for stop. nsenter, not `ip netns exec`: the latter mounts a fresh /sys without the
	# cgroup hierarchies runc needs.
	rm -f "$STATE/supervisor.pid"
	env "$MARK" setsid unshare --mount --propagation private -- nsenter --net="/run/netns/$NETNS" -- "$HERE/k8s-env.sh" _inside \
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
	# The one process of the root namespace. It writes its own pid, as the supervisor does (setsid may fork), and
	# leads a process group of its own, which holds the children it forks for each connection.
	# shellcheck disable=SC2016 # expanded by the inner shell
	env "$MARK" setsid bash -c 'echo $$ >"$0/forward.pid" && exec socat "TCP-LISTEN:$1,bind=127.0.0.1,reuseaddr,fork" \
		"UNIX-CONNECT:$0/apiserver.sock"' "$STATE" "$API_PORT" </dev/null >"$STATE/log/forward.log" 2>&1 &
	for i in $(seq 600); do
		node_ready && break
		running || { log "the cluster stopped; logs in $STATE/log"; tail -n 20 "$STATE"/log/*.log >&2; exit 1; }
		sleep 0.5
	done
	node_ready || { log "node not Ready after 300s; logs in $STATE/log"; exit 1; }
	# The policy controller hooks its chains into FORWARD once it runs; a test's policy is enforced from then on.
	for i in $(seq 240); do
		policy_controller_ready && break
		running || { log "the cluster stopped; logs in $STATE/log"; tail -n 20 "$STATE"/log/*.log >&2; exit 1; }
		sleep 0.5
	done
	policy_controller_ready || { log "the NetworkPolicy controller did not start in 120s; logs in $STATE/log"; exit 1; }
	# The default ServiceAccount appears shortly after the controller manager starts; pods need it. Without it
	# the cluster is not ready: every namespace a test makes would wait for its ServiceAccount in vain.
	for i in $(seq 240); do
		api /api/v1/namespaces/default/serviceaccounts/default >/dev/null 2>&1 && break
		running || { log "the cluster stopped; logs in $STATE/log"; tail -n 20 "$STATE"/log/*.log >&2; exit 1; }
		sleep 0.5
	done
	api /api/v1/namespaces/default/serviceaccounts/default >/dev/null 2>&1 ||
		{ log "no default ServiceAccount after 120s (the controller manager's log: $STATE/log/kube-controller-manager.log)"; exit 1; }
	log "ready in $(($(date +%s) - t0)) s; KUBECONFIG=$STATE/kubeconfig"
}

kill_pidfile() { # kill_pidfile FILE: ends the daemon the file names if it still runs in the namespace
	[ -f "$1" ] || return 0
	local pid
	pid=$(cat "$1")
	[ -n "$pid" ] && in_netns "$pid" && kill -TERM "$pid" 2>/dev/null
	return 0
}

# forwarder prints the pid of the API server's forwarder if the recorded one still runs as ours: socat with
# our port and our socket on its command line, leading its own process group (setsid).
forwarder() {
	[ -f "$STATE/forward.pid" ] || return 1
	local pid
	pid=$(cat "$STATE/forward.pid")
	[ -n "$pid" ] && cmdline_has "$pid" "TCP-LISTEN:$API_PORT," && cmdline_has "$pid" "UNIX-CONNECT:$STATE/apiserver.sock" &&
		[ "$(ps -o pgid= -p "$pid" | tr -d ' ')" = "$pid" ] && echo "$pid"
}

stop() {
	need_root
	# Only what this script started ends here: the pids it recorded, each checked to still run where it was
	# started (kill_pidfile, forwarder, running), the processes in its network namespace, those in its cgroup
	# root and those carrying its MARK. Never a process picked by name: a containerd, kubelet or Docker of the
	# machine runs on.
	# The kubelet first, so it restarts nothing; then every container the runtime runs.
	kill_pidfile "$STATE/pids/kubelet.pid"
	if running; then
		local mnt
		mnt=/proc/$(cat "$STATE/supervisor.pid")/ns/mnt
		# Our containerd, through our socket: the command runs in the cluster's mount namespace.
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
	local forward
	# Its process group: the parent and the children serving connections.
	if forward=$(forwarder); then
		kill -TERM -- "-$forward" 2>/dev/null || true
	fi
	if running; then
		kill -TERM -- "-$(cat "$STATE/supervisor.pid")" 2>/dev/null || true
	fi
	# Whatever still runs in the namespace (container shims, hostNetwork pods), in the cgroup root (the pods'
	# processes, in network namespaces of their own) or with the mark (all the rest, even when the namespace
	# or the pid files went missing).
	local pid i left=()
	for i in $(seq 40); do
		left=()
		if netns_exists; then
			mapfile -t left < <(ip netns pids "$NETNS" 2>/dev/null)
		fi
		mapfile -t -O "${#left[@]}" left < <(cgroup_pids)
		mapfile -t -O "${#left[@]}" left < <(marked_pids)
		[ ${#left[@]} -eq 0 ] && break
		for pid in "${left[@]}"; do
			kill -"$([ "$i" -gt 10 ] && echo KILL || echo TERM)" "$pid" 2>/dev/null || true
		done
		sleep 0.25
	done
	[ ${#left[@]} -eq 0 ] || log "still running after SIGKILL: ${left[*]}"
	# The kubelet's and runc's cgroups: the cgroup root in every hierarchy, deepest first. Nothing else.
	local m
	for m in $(cgroup_mounts); do
		[ -d "$m$CGROUP_ROOT" ] || continue
		if ! ours_cgroup "$m$CGROUP_ROOT"; then
			log "left $m$CGROUP_ROOT alone: not shaped like this script's"
			continue
		fi
		find "$m$CGROUP_ROOT" -depth -type d -exec rmdir {} + 2>/dev/null ||
			log "could not remove every cgroup under $m$CGROUP_ROOT"
	done
	if netns_exists; then
		ip netns del "$NETNS"
	fi
	# /run/netns as `ip netns add` made it, if it was not there before and no one else's namespace is in it now.
	# -n: the mount is in no utab (ip made it with mount(2)), and without it umount would make /run/mount.
	if [ -e "$STATE/netns-run-mount" ] && mountpoint -q /run/netns && [ -z "$(ls -A /run/netns)" ]; then
		umount -n /run/netns
	fi
	if [ -e "$STATE/netns-run-dir" ] && ! mountpoint -q /run/netns; then
		rmdir /run/netns 2>/dev/null || true
	fi
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

# The names come from the environment and decide what stop removes and ends: the namespace's name is also
# the cgroup root's (so not . or .., no slash), and $STATE is removed whole.
case $NETNS in
'' | .* | *[!A-Za-z0-9_.-]*)
	log "EGRESS_K8S_NETNS must be a plain name (letters, digits, _ . -), not '$NETNS'"
	exit 2
	;;
esac
case $STATE in
/?*/?*) ;;
*)
	log "EGRESS_K8S_STATE must be a folder at least two levels below / (it is removed whole), not '$STATE'"
	exit 2
	;;
esac

case "${1:-}" in
packages)
	need_root
	install_packages
	;;
start) start ;;
stop) stop ;;
status) status ;;
_inside) inside ;;
*)
	echo "usage: $0 packages|start|stop|status" >&2
	exit 2
	;;
esac
