#!/usr/bin/env bash
# host-safety-test.sh [REPO_DIR]
#
# Proves that the README's flows leave a user's machine as it was. REPO_DIR (default: the repository this
# script is in) is the checkout whose scripts are run, so an older checkout can be shown to fail.
#
# How: the whole test runs in a mount namespace of its own (it re-executes itself under unshare), where
# temporary folders are bound over libvirt's and containerd's folders (/etc/libvirt, /run/libvirt,
# /var/lib/libvirt, /var/log/libvirt, /var/cache/libvirt, /etc/containerd, /run/containerd,
# /var/lib/containerd) and over /etc/passwd and /etc/group (copies with the users Debian's libvirt runs as).
# There it simulates a user's machine at those usual paths: a libvirtd with its virtlogd on the machine's
# socket /run/libvirt/libvirt-sock, a qemu.conf of its own, the `default` NAT network (autostarted), the
# `default` pool and a running domain `precious` on a volume of that pool, and a containerd on
# /run/containerd/containerd.sock with a config of its own. Those daemons run in an unnamed network
# namespace of the test's own, so the `default` network's bridge and rules stay out of the machine's, and
# to the flows (`ip netns identify`) they look like daemons of the root namespace, as a real machine's are.
# Then it records the machine (root network namespace: links, addresses, routes, rules, nftables, iptables;
# the mount table, cgroup folders, sysctls, enablement links, /run/netns, the entries of the system folders,
# /usr/sbin/policy-rc.d; the simulated machine's configuration trees, libvirt objects and network
# namespace), runs the flows from REPO_DIR as the README gives them (scripts/quickstart.sh and `destroy`,
# scripts/libvirt-env.sh start and stop, scripts/k8s-env.sh start and stop), and checks that the simulated
# daemons still run with the same pids and answer, that `precious` still runs on its volume, that qemu.conf
# and the autostart link are byte-identical, that every record is unchanged (a unified diff of what
# changed), that no process of the flows is left running and that their state folders and namespaces are
# gone. Exit status: 0 all checks passed (one PASS line), 1 a flow failed or the machine changed (each
# failed check is named), 2 the test could not run.
#
# Safe on a developer's workstation: nothing is bound or mounted outside the test's mount namespace (the only
# mount it shares is the machine's /run/netns, as a slave: it sees the machine's network namespaces come and
# go, and none of its own reach the machine), the simulated daemons live in folders of the test's own, and
# inside the namespace apt-get and the user tools are refused (a flow that would install a package is
# reported, not run: dpkg would record files written to the simulated folders). The flows get names of the
# test's own wherever the scripts read one (libvirt instance hostsafety-lv, cluster egress-hostsafety-k8s on
# a free port from 16453), so they never meet an environment the test did not start, and the test stops and
# removes only what its flows made. The quickstart's instance has no other name: the test refuses to run
# beside a quickstart. Everything the test makes is removed at the end, also on failure or interrupt.
#
# Needs root and the cached builds of `make prepare` (OpenTofu, the VM image, the cluster's binaries and
# image). It compares the whole machine, so it must run while nothing else starts or stops environments,
# containers or network namespaces: such a change shows as a difference it cannot tell from the flows'.
# Environment: HOSTSAFETY_FLOWS (default "quickstart libvirt-env k8s-env": the flows to run),
# HOSTSAFETY_IGNORE (an extended regular expression: lines of the machine's records to leave out, for a
# shared machine; never the flows' names), HOSTSAFETY_WAIT_LIMIT (seconds, default 900: the longest wait for
# the simulated machine's daemons), HOSTSAFETY_TRACE=1 (set -x). The flows' own variables (EGRESS_CACHE...)
# pass through.
set -euo pipefail
[ -z "${HOSTSAFETY_TRACE:-}" ] || set -x

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SELF=$HERE/$(basename "${BASH_SOURCE[0]}")

# The simulated machine's folders, bound over the machine's paths in the test's mount namespace.
SIM_PATHS=(/etc/libvirt /run/libvirt /var/lib/libvirt /var/log/libvirt /var/cache/libvirt
	/etc/containerd /run/containerd /var/lib/containerd)
# What the simulated machine runs, installed before the test (through scripts/install-packages.sh, which
# starts and enables nothing).
SIM_PACKAGES=(libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 qemu-utils
	dnsmasq-base containerd iptables)
# Refused inside the namespace: they would write the machine's package database or /etc/shadow while
# /etc/libvirt, /etc/containerd and /etc/passwd are the simulated machine's.
GUARDED=(apt-get apt aptitude useradd groupadd usermod adduser addgroup)
# sysctls that change on an idle machine (two snapshots a minute apart differ in these, or they count events).
VOLATILE_SYSCTLS='^(fs\.(dentry-state|dentry-negative|file-nr|inode-nr|inode-state|aio-nr|quota\.[a-z_]+)|kernel\.(ns_last_pid|pty\.nr|random\.(uuid|entropy_avail)|perf_event_max_sample_rate)|net\.netfilter\.nf_conntrack_count) = '
# The flows to run (all by default; fewer for a quicker look while working on one).
FLOWS=${HOSTSAFETY_FLOWS:-quickstart libvirt-env k8s-env}
wants() { [[ " $FLOWS " == *" $1 "* ]]; }
# Lines of the machine's records to leave out (an extended regular expression), for a machine where others
# start and stop environments meanwhile: their names, never the flows'. Always left out: the cgroups the
# sandbox runner of this project's machines makes for each command it runs (/process_api/ID), which come and
# go whatever the flows do.
RUNNER_CGROUPS='/process_api/[^/]+$'
IGNORE=${HOSTSAFETY_IGNORE:+$HOSTSAFETY_IGNORE|}$RUNNER_CGROUPS
# The longest wait for any one condition; generous, for a loaded machine. Not a timing budget.
WAIT_LIMIT=${HOSTSAFETY_WAIT_LIMIT:-900}

LOG_NAME=host-safety # read by log.sh
# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"
cannot() {
	log "cannot run: $*"
	exit 2
}
duration() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# wait_for DESCRIPTION CMD...: polls CMD until it succeeds, at most WAIT_LIMIT seconds.
wait_for() {
	local what=$1 deadline=$((SECONDS + WAIT_LIMIT))
	shift
	until "$@" >/dev/null 2>&1; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			log "gave up after ${WAIT_LIMIT}s waiting for $what"
			return 1
		fi
		sleep 0.5
	done
}

# ---------------------------------------------------------------------------------------------------------
# Outside the namespace: packages, mount points, the namespace itself.

outer() {
	[ "$(id -u)" = 0 ] || cannot "must run as root (it simulates a machine's libvirtd and containerd)"
	local f t
	for f in quickstart.sh libvirt-env.sh k8s-env.sh; do
		[ -x "$REPO/scripts/$f" ] || cannot "$REPO/scripts/$f is missing"
	done
	for t in unshare nsenter setsid ip sysctl findmnt ss; do
		command -v "$t" >/dev/null || cannot "$t is missing"
	done
	local t0=$SECONDS
	log "repository under test: $REPO"
	# The packages the simulated machine runs, and those the flows of this repository install: inside the
	# namespace no package may be installed.
	if ! "$HERE/install-packages.sh" "${SIM_PACKAGES[@]}" || ! "$HERE/install-deps.sh" quickstart ||
		! "$HERE/libvirt-env.sh" packages || ! "$HERE/k8s-env.sh" packages; then
		cannot "the packages of the simulated machine and of the flows could not be installed"
	fi

	T=$(mktemp -d /tmp/egress-hostsafety.XXXXXX)
	chmod 755 "$T"
	trap outer_cleanup EXIT
	# An interrupt reaches the test inside the namespace too: wait for its cleanup, then clean up here.
	trap 'log "interrupted"' INT TERM HUP
	# Mount points the machine lacks are made for the test's binds and removed at the end.
	: >"$T/made-dirs"
	local p
	for p in "${SIM_PATHS[@]}"; do
		if [ ! -e "$p" ]; then
			mkdir "$p"
			echo "$p" >>"$T/made-dirs"
		fi
	done
	echo "$((SECONDS - t0))" >"$T/outer-setup-seconds"
	local rc=0
	HOSTSAFETY_T=$T unshare --mount --propagation slave -- bash "$SELF" --inside "$REPO" || rc=$?
	return "$rc"
}

outer_cleanup() {
	local rc=$?
	set +e
	local d
	if [ -n "${T:-}" ] && [ -d "$T" ]; then
		# Only empty: the test's binds went with its namespace.
		while read -r d; do rmdir "$d" 2>/dev/null || log "left $d: not empty"; done < <(tac "$T/made-dirs" 2>/dev/null)
		rm -rf "$T"
	fi
	exit "$rc"
}

# ---------------------------------------------------------------------------------------------------------
# Inside the namespace.

inside() {
	T=$HOSTSAFETY_T
	unset HOSTSAFETY_T
	MARK=$(basename "$T")
	mkdir -p "$T/logs" "$T/before" "$T/after"
	: >"$T/refused"
	: >"$T/flows"
	: >"$T/flow-results"
	STARTED=()
	trap inside_cleanup EXIT
	trap 'log "interrupted"; exit 130' INT TERM HUP
	local t0=$SECONDS
	choose_names
	private_mounts
	simulated_folders
	guard_tools
	start_simulated_machine || { log "the simulated machine did not start"; exit 2; }
	local setup=$((SECONDS - t0 + $(cat "$T/outer-setup-seconds")))
	log "setup (packages, simulated machine): $(duration "$setup")"

	[ -z "$IGNORE" ] || log "leaving out of the machine's records the lines matching: $IGNORE"
	t0=$SECONDS
	snapshot "$T/before"
	log "snapshot before: $(duration $((SECONDS - t0)))"

	local flows_t0=$SECONDS
	if wants quickstart; then
		run_flow quickstart "${QS_ENV[@]}" -- scripts/quickstart.sh
		run_flow quickstart-destroy "${QS_ENV[@]}" -- scripts/quickstart.sh destroy
	fi
	if wants libvirt-env; then
		run_flow libvirt-env-start "${LV_ENV[@]}" -- scripts/libvirt-env.sh start
		run_flow libvirt-env-stop "${LV_ENV[@]}" -- scripts/libvirt-env.sh stop
	fi
	if wants k8s-env; then
		run_flow k8s-env-start "${K8S_ENV[@]}" -- scripts/k8s-env.sh start
		run_flow k8s-env-stop "${K8S_ENV[@]}" -- scripts/k8s-env.sh stop
	fi
	local flows_time=$((SECONDS - flows_t0))

	t0=$SECONDS
	FAILED=()
	CHECKS=0
	check_flows
	check_simulated_machine
	check_leftovers
	snapshot "$T/after"
	compare_snapshots
	log "snapshot after and checks: $(duration $((SECONDS - t0)))"
	log "durations: setup $(duration "$setup"), flows $(duration "$flows_time") ($(tr '\n' ' ' <"$T/flows" | sed 's/ $//'))"
	# The verdict is printed last, after the cleanup.
	if [ ${#FAILED[@]} -gt 0 ]; then
		{
			echo "host-safety: FAIL: ${#FAILED[@]} of $CHECKS checks failed (repository $REPO):"
			local c
			for c in "${FAILED[@]}"; do echo "  - $c"; done
		} >"$T/verdict"
		exit 1
	fi
	echo "host-safety: PASS: $CHECKS checks: the flows ($(cut -d' ' -f1 "$T/flows" | paste -sd' ')) left the simulated machine's libvirtd, containerd, domain and configuration and the root namespace as they were ($REPO)" >"$T/verdict"
}

# The namespace was made with every mount a slave of the machine's; all but /run/netns become private, so
# that /run/netns alone keeps following the machine's network namespaces (a daemon of a namespace made
# meanwhile must not look like one of the root namespace to a flow). Nothing propagates to the machine.
private_mounts() {
	local mp
	while read -r mp; do
		mp=$(printf '%b' "$mp")
		case $mp in /run/netns | /run/netns/*) continue ;; esac
		mount --make-private "$mp" 2>/dev/null || true
	done < <(awk '{print $5}' /proc/self/mountinfo | sort -u)
	if [ "$(findmnt -n -o PROPAGATION /)" != private ]; then
		log "the namespace's mounts could not be made private"
		exit 2
	fi
}

# free_id prints the first uid and gid from 64055 that neither the passwd nor the group copy uses.
free_id() {
	local id=64055
	while grep -qx "$id" < <(cut -d: -f3 "$T/passwd" "$T/group"); do id=$((id + 1)); done
	echo "$id"
}

simulated_folders() {
	local p
	for p in "${SIM_PATHS[@]}"; do mkdir -p "$T/sim$p"; done
	# A copy of the machine's users with those Debian's libvirt-daemon-system adds (the QEMU driver looks its
	# default user up; dnsmasq runs as libvirt-dnsmasq).
	cp /etc/passwd "$T/passwd"
	cp /etc/group "$T/group"
	local g u id
	for g in kvm libvirt; do
		grep -q "^$g:" "$T/group" || echo "$g:x:$(free_id):" >>"$T/group"
	done
	for u in libvirt-qemu libvirt-dnsmasq; do
		if ! grep -q "^$u:" "$T/passwd"; then
			id=$(free_id)
			echo "$u:x:$id:$id:$u (host-safety-test):/nonexistent:/usr/sbin/nologin" >>"$T/passwd"
			grep -q "^$u:" "$T/group" || echo "$u:x:$id:" >>"$T/group"
		fi
	done
	for p in "${SIM_PATHS[@]}"; do mount --bind "$T/sim$p" "$p"; done
	mount --bind "$T/passwd" /etc/passwd
	mount --bind "$T/group" /etc/group
	# The simulated daemons get an empty /run/dbus: they register nothing with the machine's systemd.
	mkdir -p "$T/sim-dbus"
}

guard_tools() {
	cat >"$T/guard" <<-EOF
		#!/bin/sh
		# host-safety-test: refuses package installs and user changes inside the simulated machine.
		name=\$(basename "\$0")
		case "\$name \$*" in
		"apt-get update"* | "apt-get -q update"* | "apt update"*) exit 0 ;;
		esac
		echo "\$name \$*" >>'$T/refused'
		echo "host-safety-test: refused inside the simulated machine: \$name \$*" >&2
		case "\$name" in apt-get | apt | aptitude) exit 0 ;; esac
		exit 1
	EOF
	chmod 755 "$T/guard"
	local b p
	for b in "${GUARDED[@]}"; do
		p=$(command -v "$b" 2>/dev/null) || continue
		mount --bind "$T/guard" "$p"
	done
}

# ---------------------------------------------------------------------------------------------------------
# The simulated machine.

SIM_NET=
virsh_() { virsh -q -c qemu:///system "$@"; }

# sim_launch CMD...: starts CMD as one of the simulated machine's daemons: in its network namespace, in a
# session of its own, with an empty /run/dbus.
sim_launch() {
	# shellcheck disable=SC2016 # expanded by that sh
	setsid nsenter --net="$SIM_NET" -- unshare --mount --propagation private -- \
		sh -c 'if [ -d /run/dbus ]; then mount --bind "$0" /run/dbus || exit 1; fi; exec "$@"' "$T/sim-dbus" "$@" \
		</dev/null >>"$T/logs/simulated-machine.log" 2>&1
}

# sim_pids NAME: the pids of the program NAME running in the simulated machine's network namespace.
sim_pids() {
	local pid
	for pid in $(pgrep -x "$1"); do
		[ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" = "$SIM_NET_ID" ] && echo "$pid"
	done
	return 0
}

domain_running() { [ "$(virsh_ domstate precious 2>/dev/null)" = running ]; }

# The bridge has its carrier, its STP port forwards and no address is still tentative (duplicate address
# detection): the steady state of the simulated machine's network.
sim_network_settled() {
	local links addrs
	links=$(nsenter --net="$SIM_NET" ip -d link show) && addrs=$(nsenter --net="$SIM_NET" ip addr show) || return 1
	grep -q 'virbr0: <[^>]*LOWER_UP' <<<"$links" &&
		! grep -qE 'bridge_slave state (listening|learning|blocking|disabled)' <<<"$links" &&
		! grep -q tentative <<<"$addrs"
}

start_simulated_machine() {
	SIM_NET=$T/sim.net
	touch "$SIM_NET"
	unshare --net="$SIM_NET" true
	SIM_NET_ID=$(nsenter --net="$SIM_NET" readlink /proc/self/ns/net)
	nsenter --net="$SIM_NET" ip link set lo up

	cat >/etc/libvirt/qemu.conf <<-'EOF'
		# The simulated user's own QEMU driver settings (scripts/host-safety-test.sh): any flow must leave them be.
		user = "root"
		group = "root"
		security_driver = "none"
		dynamic_ownership = 0
		# No cgroups: the machine's cgroup tree keeps no folder of the simulated domain.
		cgroup_controllers = [ ]
	EOF
	cp /etc/libvirt/qemu.conf "$T/qemu.conf.orig"
	sim_launch virtlogd -d -p /run/libvirt/virtlogd.pid
	wait_for "the simulated virtlogd" test -S /run/libvirt/virtlogd-sock || return 1
	sim_launch libvirtd -d -p /run/libvirt/libvirtd.pid
	wait_for "the simulated libvirtd to answer" virsh_ version || return 1

	cat >"$T/default-net.xml" <<-'EOF'
		<network>
		  <name>default</name>
		  <forward mode='nat'/>
		  <bridge name='virbr0' stp='on' delay='0'/>
		  <ip address='192.168.122.1' netmask='255.255.255.0'>
		    <dhcp>
		      <range start='192.168.122.2' end='192.168.122.254'/>
		    </dhcp>
		  </ip>
		</network>
	EOF
	virsh_ net-define "$T/default-net.xml" >/dev/null
	virsh_ net-autostart default >/dev/null
	virsh_ net-start default >/dev/null
	virsh_ pool-define-as default dir --target /var/lib/libvirt/images >/dev/null
	virsh_ pool-build default >/dev/null
	virsh_ pool-autostart default >/dev/null
	virsh_ pool-start default >/dev/null
	virsh_ vol-create-as default precious.qcow2 64M --format qcow2 >/dev/null
	cat >"$T/precious.xml" <<-'EOF'
		<domain type='qemu'>
		  <name>precious</name>
		  <memory unit='MiB'>64</memory>
		  <vcpu>1</vcpu>
		  <os>
		    <type arch='x86_64' machine='pc'>hvm</type>
		    <boot dev='hd'/>
		  </os>
		  <devices>
		    <disk type='volume' device='disk'>
		      <driver name='qemu' type='qcow2'/>
		      <source pool='default' volume='precious.qcow2'/>
		      <target dev='vda' bus='virtio'/>
		    </disk>
		    <interface type='network'>
		      <source network='default'/>
		      <model type='virtio'/>
		    </interface>
		    <serial type='pty'/>
		    <memballoon model='none'/>
		  </devices>
		</domain>
	EOF
	virsh_ define "$T/precious.xml" >/dev/null
	virsh_ start precious >/dev/null
	wait_for "precious to run" domain_running || return 1
	wait_for "the default network's bridge to settle" sim_network_settled || return 1

	cat >/etc/containerd/config.toml <<-'EOF'
		# The simulated user's own containerd (scripts/host-safety-test.sh): any flow must leave it be.
		version = 2
		root = "/var/lib/containerd"
		state = "/run/containerd"
		# No CRI: it would load an AppArmor profile and look for CNI on the machine.
		disabled_plugins = ["io.containerd.grpc.v1.cri"]
		[grpc]
		  address = "/run/containerd/containerd.sock"
		[plugins."io.containerd.internal.v1.opt"]
		  path = "/var/lib/containerd/opt"
	EOF
	sim_launch containerd --config /etc/containerd/config.toml &
	wait_for "the simulated containerd to answer" ctr --address /run/containerd/containerd.sock version || return 1

	local name pid
	: >"$T/sim-pids"
	for name in libvirtd virtlogd containerd; do
		pid=$(sim_pids "$name")
		[ "$(wc -w <<<"$pid")" = 1 ] || {
			log "expected one simulated $name, found: ${pid:-none}"
			return 1
		}
		echo "$name $pid" >>"$T/sim-pids"
	done
	echo "qemu(precious) $(cat /run/libvirt/qemu/precious.pid)" >>"$T/sim-pids"
	stat -c '%n %i' /run/libvirt/libvirt-sock /run/containerd/containerd.sock >"$T/sim-sockets"
	log "simulated machine: $(tr '\n' ' ' <"$T/sim-pids")(default network active, autostarted; precious running)"
}

stop_simulated_machine() {
	[ -n "$SIM_NET" ] && [ -n "${SIM_NET_ID:-}" ] || return 0
	local pids=() pid i
	for i in $(seq 1 120); do
		pids=()
		for pid in /proc/[0-9]*; do
			[ "$(readlink "$pid/ns/net" 2>/dev/null)" = "$SIM_NET_ID" ] && pids+=("${pid#/proc/}")
		done
		[ ${#pids[@]} -eq 0 ] && return 0
		kill -"$([ "$i" -gt 40 ] && echo KILL || echo TERM)" "${pids[@]}" 2>/dev/null
		sleep 0.25
	done
	log "simulated machine's processes still running: ${pids[*]}"
}

# ---------------------------------------------------------------------------------------------------------
# Names of the flows' environments.

netns_exists() { [ -e "/run/netns/$1" ]; }
port_busy() { [ -n "$(ss -Htln "sport = :$1")" ]; }

# choose_names sets the environment each flow runs with: names of the test's own wherever the scripts read
# one, so that a flow never meets an environment it did not start (make test's, another user's), and the
# test never stops or removes one. Only the quickstart's private libvirtd ("quickstart") has no other name:
# the test refuses to run beside a quickstart. QS_LEFT, LV_LEFT and K8S_LEFT list what each flow makes and
# must remove (netns:NAME or a folder).
choose_names() {
	# Older scripts ran the quickstart's libvirtd in the tests' namespace, egress-test, named by EGRESS_NETNS,
	# EGRESS_LIBVIRT_NETNS and EGRESS_LIBVIRT_STATE (today's ignore them).
	QS_ENV=(EGRESS_NETNS=egress-hostsafety-qs EGRESS_LIBVIRT_NETNS=egress-hostsafety-qs EGRESS_LIBVIRT_STATE=/var/lib/egress-hostsafety-qs)
	QS_LEFT=(netns:egress-quickstart /var/lib/egress-quickstart netns:egress-hostsafety-qs /var/lib/egress-hostsafety-qs)
	# An instance of libvirt-env.sh is named by EGRESS_LIBVIRT_INSTANCE (netns egress-NAME, folder
	# /var/lib/egress-NAME). Older scripts had a shared default mode, named by EGRESS_NETNS and
	# EGRESS_LIBVIRT_STATE, which is what `make libvirt-env` ran: those get the same names that way.
	if grep -q EGRESS_NETNS "$REPO/scripts/libvirt-env.sh"; then
		LV_ENV=(EGRESS_NETNS=egress-hostsafety-lv EGRESS_LIBVIRT_STATE=/var/lib/egress-hostsafety-lv)
	else
		LV_ENV=(EGRESS_LIBVIRT_INSTANCE=hostsafety-lv)
	fi
	LV_LEFT=(netns:egress-hostsafety-lv /var/lib/egress-hostsafety-lv)
	local port=16453
	while port_busy "$port"; do port=$((port + 1)); done
	K8S_ENV=(EGRESS_K8S_NETNS=egress-hostsafety-k8s EGRESS_K8S_STATE=/var/tmp/egress-hostsafety-k8s "EGRESS_K8S_API_PORT=$port")
	K8S_LEFT=(netns:egress-hostsafety-k8s /var/tmp/egress-hostsafety-k8s)
	local x
	for x in "${QS_LEFT[@]}" "${LV_LEFT[@]}" "${K8S_LEFT[@]}"; do
		exists "$x" || continue
		case $x in
		*quickstart*) cannot "a quickstart runs on this machine ($x), and the quickstart has no other name: remove it first (make quickstart-destroy)" ;;
		*) cannot "$x exists: another host-safety test runs, or one was killed (then remove it)" ;;
		esac
	done
}

exists() { # exists netns:NAME | PATH
	case $1 in netns:*) netns_exists "${1#netns:}" ;; *) [ -e "$1" ] ;; esac
}

# ---------------------------------------------------------------------------------------------------------
# Snapshots.

# in_root_netns CMD...: runs CMD in the machine's root network namespace (the test's own, unless it was started
# in another one; where pid 1's namespace cannot be read, the test's).
in_root_netns() {
	local root
	root=$(readlink /proc/1/ns/net 2>/dev/null) || root=
	if [ -z "$root" ] || [ "$(readlink /proc/self/ns/net)" = "$root" ]; then "$@"; else nsenter --net=/proc/1/ns/net -- "$@"; fi
}

# Volatile numbers out of `ip` output: address lifetimes, route expiry, bridge timers and STP's topology
# change (its flags, and the short ageing time a bridge uses while one lasts).
strip_ip() {
	sed -E 's/(valid|preferred)_lft [0-9]+sec/\1_lft N/g; s/expires [0-9]+sec/expires N/g;
		s/([a-z_]+_timer) +[0-9.]+/\1 N/g; s/(topology_change[a-z_]*|ageing_time) [0-9]+/\1 N/g'
}

# Firewall state without counters, dates or set timeouts.
firewall() {
	local t
	if command -v nft >/dev/null; then
		echo "## nft list ruleset"
		"$@" nft list ruleset 2>&1 | sed -E 's/counter packets [0-9]+ bytes [0-9]+/counter/g; s/ expires [0-9hms.]+//g'
	fi
	for t in iptables-legacy-save iptables-nft-save ip6tables-legacy-save ip6tables-nft-save; do
		command -v "$t" >/dev/null || continue
		echo "## $t"
		"$@" "$t" 2>/dev/null | sed -E '/^#/d; s/ \[[0-9]+:[0-9]+\]$//'
	done
}

# tree DIR: every entry's type, mode, owner and link target, and every file's sha256.
tree() {
	(
		cd "$1" || exit 0
		find . -mindepth 1 -printf '%y %m %u:%g %p -> %l\n' | sort
		find . -type f -print0 | sort -z | xargs -0 -r sha256sum
	)
}

# snapshot DIR: records the machine in DIR, a file per record. What cannot be read is recorded as such.
snapshot() (
	set +e +o pipefail
	local d=$1 x
	# The machine: its root network namespace.
	in_root_netns ip -d link show | strip_ip >"$d/root-netns-links"
	in_root_netns ip -d addr show | strip_ip >"$d/root-netns-addresses"
	{
		in_root_netns ip -4 route show table all
		in_root_netns ip -6 route show table all
		in_root_netns ip -4 rule show
		in_root_netns ip -6 rule show
	} 2>&1 | strip_ip >"$d/root-netns-routes"
	firewall in_root_netns >"$d/root-netns-firewall"
	# The machine at large.
	awk '{print $5}' /proc/self/mountinfo | sort >"$d/mounts"
	# Pods of a cluster come and go below its kubepods folder: only the folder itself counts.
	find /sys/fs/cgroup -maxdepth 4 -type d 2>/dev/null | sed -E 's#(/kubepods[^/]*)/.*#\1#' | sort -u >"$d/cgroups"
	sysctl -a 2>/dev/null | grep -Ev "$VOLATILE_SYSCTLS" | sort >"$d/sysctls"
	find /etc/systemd/system /etc/rc?.d -type l -printf '%p -> %l\n' 2>/dev/null | sort >"$d/enablement-links"
	{ [ -d /run/netns ] && ls -1A /run/netns || echo "(no /run/netns)"; } >"$d/netns"
	for x in / /etc /opt /run /var /var/lib /var/cache /var/log /usr/local /srv; do
		[ -d "$x" ] && find "$x" -mindepth 1 -maxdepth 1 2>/dev/null
	done | sort >"$d/system-folders"
	if [ -e /usr/sbin/policy-rc.d ]; then sha256sum /usr/sbin/policy-rc.d; else echo "/usr/sbin/policy-rc.d absent"; fi >"$d/policy-rc.d"
	[ -r /proc/modules ] && awk '{print $1}' /proc/modules | sort >"$d/kernel-modules"
	# The simulated machine.
	tree /etc/libvirt >"$d/simulated-etc-libvirt"
	tree /etc/containerd >"$d/simulated-etc-containerd"
	sha256sum /etc/passwd /etc/group >"$d/simulated-users"
	{
		for x in "list --all" "net-list --all" "pool-list --all" "vol-list default" \
			"dumpxml --inactive precious" "net-dumpxml --inactive default" "pool-dumpxml --inactive default"; do
			echo "## virsh $x"
			# shellcheck disable=SC2086 # the words of x are virsh's arguments
			virsh_ $x 2>&1 | sed '/<allocation\|<available/d'
		done
	} >"$d/simulated-libvirt-objects"
	{
		nsenter --net="$SIM_NET" ip -d link show | strip_ip
		nsenter --net="$SIM_NET" ip -d addr show | strip_ip
		nsenter --net="$SIM_NET" ip route show table all
		firewall nsenter --net="$SIM_NET"
	} >"$d/simulated-netns" 2>&1
	if [ -n "$IGNORE" ]; then
		for x in "$d"/*; do
			case $x in */simulated-*) continue ;; esac
			grep -Ev -- "$IGNORE" "$x" >"$x.kept"
			mv "$x.kept" "$x"
		done
	fi
	true
)

# ---------------------------------------------------------------------------------------------------------
# The flows.

# run_flow NAME [VAR=VALUE...] -- CMD...: runs CMD in REPO_DIR, its output shown indented, and records its
# exit status and duration. Its processes carry HOSTSAFETY_FLOW=MARK, which finds any it leaves running.
run_flow() {
	local name=$1 envs=()
	shift
	while [ "$1" != -- ]; do
		envs+=("$1")
		shift
	done
	shift
	local log=$T/logs/$name.log t0=$SECONDS rc=0
	log "flow $name: ${envs[*]}${envs[*]:+ }$*"
	STARTED+=("$name")
	: >"$log"
	# A session of its own: an interrupt reaches the test, which ends the flow's processes itself.
	(cd "$REPO" && exec setsid env HOSTSAFETY_FLOW="$MARK" "${envs[@]}" "$@") </dev/null >"$log" 2>&1 &
	local pid=$!
	FLOW_PID=$pid
	tail -n +1 -f --pid="$pid" "$log" | sed -u 's/^/    | /' &
	local shown=$!
	wait "$pid" || rc=$?
	wait "$shown" || true
	# A last line without its newline.
	[ -z "$(tail -c1 "$log")" ] || echo
	FLOW_PID=
	local took=$((SECONDS - t0))
	echo "$name $rc $took" >>"$T/flow-results"
	echo "$name $(duration "$took")" >>"$T/flows"
	log "flow $name: exit status $rc after $(duration "$took")"
}

# ---------------------------------------------------------------------------------------------------------
# Checks.

pass() { CHECKS=$((CHECKS + 1)); }
fail() {
	local what
	what=$(tr '\n' ' ' <<<"$*" | sed 's/ *$//')
	CHECKS=$((CHECKS + 1))
	FAILED+=("$what")
	log "check failed: $what"
}

check_flows() {
	local name rc took
	while read -r name rc took; do
		if [ "$rc" = 0 ]; then pass; else fail "flow $name exited with status $rc (after $(duration "$took"))"; fi
	done <"$T/flow-results"
	if [ -s "$T/refused" ]; then
		fail "the flows tried to install packages or change users inside the simulated machine (refused, not run): $(sort -u "$T/refused" | paste -sd';' | sed 's/;/; /g')"
	else
		pass
	fi
}

check_simulated_machine() {
	local name pid now
	while read -r name pid; do
		if [ "$name" = "qemu(precious)" ]; then
			now=$(cat /run/libvirt/qemu/precious.pid 2>/dev/null || true)
			if [ "$now" = "$pid" ] && kill -0 "$pid" 2>/dev/null; then pass; else
				fail "the simulated machine's domain precious no longer runs in its QEMU (pid $pid; pid file now: ${now:-none})"
			fi
			continue
		fi
		now=$(sim_pids "$name" | paste -sd' ')
		if [ "$now" = "$pid" ]; then pass; else
			fail "the simulated machine's $name (pid $pid) is gone: in its place ${now:-nothing}"
		fi
	done <"$T/sim-pids"
	# A socket made again at the same path is another daemon's (or the same daemon's, started again).
	local path inode
	while read -r path inode; do
		now=$(stat -c %i "$path" 2>/dev/null) || now=
		if [ "$now" = "$inode" ]; then pass
		elif [ -z "$now" ]; then fail "the simulated machine's socket $path is gone"
		else fail "the simulated machine's socket $path was replaced: another daemon serves that path now (inode $inode, now $now)"
		fi
	done <"$T/sim-sockets"
	local out
	if out=$(virsh_ list --all 2>&1); then pass; else fail "the simulated libvirtd does not answer on /run/libvirt/libvirt-sock (virsh -c qemu:///system list --all: $out)"; fi
	if out=$(ctr --address /run/containerd/containerd.sock version 2>&1); then pass; else
		fail "the simulated containerd does not answer (ctr version: $(tail -1 <<<"$out"))"
	fi
	if domain_running; then pass; else fail "domain precious is not running (state: $(virsh_ domstate precious 2>&1 | head -1))"; fi
	local vol=/var/lib/libvirt/images/precious.qcow2
	if virsh_ vol-info --pool default precious.qcow2 >/dev/null 2>&1 && [ -f "$vol" ]; then pass; else
		fail "volume precious.qcow2 of pool default is not listed by libvirt; its file $vol is $([ -f "$vol" ] && echo there || echo gone)"
	fi
	if cmp -s /etc/libvirt/qemu.conf "$T/qemu.conf.orig"; then pass; else
		fail "/etc/libvirt/qemu.conf changed: $(diff -u "$T/qemu.conf.orig" /etc/libvirt/qemu.conf 2>&1 | tail -n +3 | grep '^[-+]' | paste -sd'|')"
	fi
	local link=/etc/libvirt/qemu/networks/autostart/default.xml
	if [ -L "$link" ] && [ "$(readlink "$link")" = /etc/libvirt/qemu/networks/default.xml ] &&
		cmp -s "$link" /etc/libvirt/qemu/networks/default.xml; then pass; else
		fail "the default network's autostart link $link is gone or changed"
	fi
}

# leftover_processes prints the processes the flows left running: those carrying the flows' mark, and those
# in the test's own mount namespace that are not the test's.
leftover_processes() {
	local me p pid ppid up
	me=$(readlink /proc/self/ns/mnt)
	for p in /proc/[0-9]*; do
		pid=${p#/proc/}
		if grep -qzx "HOSTSAFETY_FLOW=$MARK" "$p/environ" 2>/dev/null ||
			[ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$me" ]; then
			# The test's own processes descend from it.
			up=$pid
			while [ -n "$up" ] && [ "$up" -gt 1 ] && [ "$up" != $$ ]; do
				ppid=$(awk '/^PPid:/{print $2}' "/proc/$up/status" 2>/dev/null)
				up=$ppid
			done
			[ "$up" = $$ ] && continue
			[ -e "$p" ] && echo "$pid $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-150)"
		fi
	done
	return 0
}

check_leftovers() {
	local left
	left=$(leftover_processes)
	if [ -z "$left" ]; then pass; else fail "processes the flows left running: $(paste -sd';' <<<"$left" | sed 's/;/; /g')"; fi
	local x found=()
	for x in $(flows_left); do exists "$x" && found+=("${x/netns:/network namespace }"); done
	if [ ${#found[@]} -eq 0 ]; then pass; else fail "the flows left their environments behind: ${found[*]}"; fi
}

# flows_left prints what the flows that ran make and must remove.
flows_left() {
	started quickstart && printf '%s\n' "${QS_LEFT[@]}"
	started libvirt-env-start && printf '%s\n' "${LV_LEFT[@]}"
	started k8s-env-start && printf '%s\n' "${K8S_LEFT[@]}"
	return 0
}
started() { [[ " ${STARTED[*]} " == *" $1 "* ]]; }

compare_snapshots() {
	local f name
	for f in "$T/before"/*; do
		name=$(basename "$f")
		if cmp -s "$f" "$T/after/$name"; then pass; else
			fail "$name changed (diff above)"
			echo "--- $name before"
			echo "+++ $name after"
			diff -u "$f" "$T/after/$name" | tail -n +3 || true
		fi
	done
}

# ---------------------------------------------------------------------------------------------------------
# Cleanup inside the namespace: what the flows left (their stop again where it did not run or failed, their
# marked processes, their namespaces and state folders), then the simulated machine.

inside_cleanup() {
	local rc=$? t0=$SECONDS
	set +e
	trap '' INT TERM HUP
	local i
	# A flow cut short by an interrupt: its process group first.
	if [ -n "${FLOW_PID:-}" ] && kill -0 "$FLOW_PID" 2>/dev/null; then
		log "cleanup: ending the running flow"
		for i in $(seq 1 40); do
			kill -"$([ "$i" -gt 20 ] && echo KILL || echo TERM)" -- "-$FLOW_PID" 2>/dev/null || break
			sleep 0.25
		done
	fi
	local pair
	for pair in quickstart:quickstart-destroy libvirt-env-start:libvirt-env-stop k8s-env-start:k8s-env-stop; do
		if started "${pair%%:*}" && ! grep -q "^${pair#*:} 0 " "$T/flow-results" 2>/dev/null; then
			log "cleanup: ${pair#*:} again"
			case ${pair#*:} in
			quickstart-destroy) (cd "$REPO" && env HOSTSAFETY_FLOW="$MARK" "${QS_ENV[@]}" scripts/quickstart.sh destroy) ;;
			libvirt-env-stop) (cd "$REPO" && env HOSTSAFETY_FLOW="$MARK" "${LV_ENV[@]}" scripts/libvirt-env.sh stop) ;;
			k8s-env-stop) (cd "$REPO" && env HOSTSAFETY_FLOW="$MARK" "${K8S_ENV[@]}" scripts/k8s-env.sh stop) ;;
			esac </dev/null >>"$T/logs/cleanup.log" 2>&1
		fi
	done
	local left
	for i in $(seq 1 40); do
		left=$(leftover_processes | awk '{print $1}')
		[ -z "$left" ] && break
		[ "$i" = 1 ] && log "cleanup: ending what the flows left running: $(paste -sd' ' <<<"$left")"
		# shellcheck disable=SC2086 # one pid a word
		kill -"$([ "$i" -gt 20 ] && echo KILL || echo TERM)" $left 2>/dev/null
		sleep 0.25
	done
	# What the flows left of their own (none existed before the test: choose_names).
	local x
	for x in $(flows_left); do
		exists "$x" || continue
		log "cleanup: removing ${x/netns:/network namespace }"
		case $x in netns:*) ip netns delete "${x#netns:}" ;; *) rm -rf "$x" ;; esac
	done
	stop_simulated_machine
	log "cleanup: $(duration $((SECONDS - t0)))"
	[ -s "$T/verdict" ] && cat "$T/verdict"
	exit "$rc"
}

if [ "${1:-}" = --inside ]; then
	REPO=$2
	# Set by choose_names; empty until then (the cleanup may run before).
	QS_ENV=() LV_ENV=() K8S_ENV=() QS_LEFT=() LV_LEFT=() K8S_LEFT=() STARTED=() FLOW_PID=''
	inside
else
	REPO=$(cd "${1:-$HERE/..}" && pwd)
	outer
fi
