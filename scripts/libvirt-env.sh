#!/usr/bin/env bash
# libvirt-env.sh packages|start|stop|status|restart
#
# A private libvirt + QEMU environment, the only kind this project runs: the kvm backend's integration and
# acceptance tests (instance "test", the default) and the quickstart (instance "quickstart") each get one.
# An instance NAME is a libvirtd and virtlogd of its own, running in network namespace egress-NAME and in a
# mount namespace of its own, where libvirt's run, state, config, log and cache folders (and /run/dbus, so
# libvirt registers nothing with the machine's systemd) are folders under /var/lib/egress-NAME. Its socket is
# /var/lib/egress-NAME/run/libvirt-sock: the provider reaches it as qemu:///system?socket=THAT (status and
# start print the URI). Every bridge, dnsmasq and firewall rule it makes stays in its network namespace.
#
# The machine's own libvirt is never touched: nothing here writes under /etc/libvirt, /run/libvirt or
# /var/lib/libvirt, talks to /var/run/libvirt/libvirt-sock, or stops, signals or reconfigures a daemon it did
# not start. The packages it installs (scripts/install-packages.sh) are the daemons' binaries without Debian's
# libvirt-daemon-system (its units, default network and config), and nothing they bring is started or
# enabled. The users libvirt's Debian build runs QEMU and dnsmasq as exist only in the instance's own copy of
# /etc/passwd and /etc/group. `stop` ends the processes in its network namespace (the namespace is its own)
# and removes the namespace and the state folder, nothing else. Every step is idempotent.
#
# Like systemd's libvirtd.service (Restart=on-failure), a supervisor starts the daemon again when it dies,
# and counts those restarts in /var/lib/egress-NAME/daemon-restarts. It also does the one repair a host's
# administrator must do by hand after libvirtd 9.0 (Debian 12) aborts in the middle of a domain's start,
# before QEMU ran: the domain's status file, saved with pid 0 and the start job, would make the next daemon
# hold that job for ever, the domain paused (starting up), refusing even destroy ("cannot acquire state change
# lock"). The supervisor removes such a status file before the restart, so the domain is merely defined and
# shut off, and logs it in daemon-restarts. The daemon has been seen aborting ("corrupted double-linked
# list") when a connection is cut while domains start.
#
# The supervisor runs under tini as a child subreaper: the QEMU processes libvirtd daemonizes are reaped by it
# the moment they exit. Otherwise they would fall to the machine's PID 1, which in a container may reap only
# every second or two, and libvirt's destroy returns only once the process is gone.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
INSTANCE=${EGRESS_LIBVIRT_INSTANCE:-test}
if [[ ! $INSTANCE =~ ^[a-z0-9][a-z0-9-]{0,20}$ ]]; then
	echo "libvirt-env: EGRESS_LIBVIRT_INSTANCE=$INSTANCE: want lowercase letters, digits and dashes, at most 21" >&2
	exit 2
fi
NETNS=egress-$INSTANCE
STATE_DIR=/var/lib/egress-$INSTANCE
SOCKET=$STATE_DIR/run/libvirt-sock
URI="qemu:///system?socket=$SOCKET"
NETWORK=${EGRESS_LIBVIRT_NETWORK:-egress-test}
BRIDGE=${EGRESS_LIBVIRT_BRIDGE:-virbr-egress}
POOL=${EGRESS_LIBVIRT_POOL:-egress-test}
POOL_DIR="$STATE_DIR/pool"
BASE_VOLUME=${EGRESS_LIBVIRT_BASE_VOLUME:-egress-base.qcow2}
# The folders the daemon gets of its own, as mount point=folder under STATE_DIR.
PRIVATE_DIRS=(/run/libvirt=run /var/lib/libvirt=lib /etc/libvirt=etc /var/log/libvirt=log /var/cache/libvirt=cache /run/dbus=dbus)
# The users Debian's libvirt runs QEMU and dnsmasq as by default (libvirt-daemon-system creates them); the
# instance's qemu.conf runs QEMU as root, but the QEMU driver looks its default user up when it starts.
LIBVIRT_USERS=(libvirt-qemu libvirt-dnsmasq)
# passt: libvirt's backend for user-mode networking with port forwards. Debian 12's libvirt 9.0 is built
# without it (its Disable-passt-support patch), and the kvm backend then forwards with QEMU's own user network;
# a libvirt that has it (newer Debian, backports, other distributions) uses it.
PACKAGES=(libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 qemu-utils dnsmasq-base iptables genisoimage passt tini)

# shellcheck source=log.sh
. "$(dirname "${BASH_SOURCE[0]}")/log.sh"
virsh_() { virsh -q -c "$URI" "$@"; }

need_root() {
	if [ "$(id -u)" != 0 ]; then
		log "must run as root (it starts libvirtd and creates a network namespace)"
		exit 1
	fi
}

install_packages() {
	"$HERE/install-packages.sh" "${PACKAGES[@]}"
}

# netns_of prints the network namespace name a pid lives in, or nothing for the root namespace.
netns_of() { ip netns identify "$1" 2>/dev/null || true; }

# daemon_pids prints the pids of one of libvirt's daemons.
daemon_pids() { pgrep -x "$1" || true; }

# configure writes the instance's own configuration folder, the one its daemons see as /etc/libvirt, and
# its copies of /etc/passwd and /etc/group. Nothing of the machine's is copied or changed.
configure() {
	mkdir -p "$STATE_DIR/etc/qemu/networks" "$STATE_DIR/etc/storage"
	# Root-owned QEMU without relabelling: the pool lives in a plain folder and no SELinux/AppArmor profile
	# confines the instance's QEMU. No cgroups either: the machine's cgroup tree keeps no folder of ours.
	cat >"$STATE_DIR/etc/qemu.conf" <<-'EOF'
		# Written by scripts/libvirt-env.sh for this private libvirt instance only.
		user = "root"
		group = "root"
		dynamic_ownership = 0
		security_driver = "none"
		cgroup_controllers = [ ]
	EOF
	# A test that takes its daemon down reads this log when it fails: the QEMU driver's and the domain
	# jobs' debug messages log what libvirtd did with a domain between two cuts.
	cat >"$STATE_DIR/etc/libvirtd.conf" <<-'EOF'
		# Written by scripts/libvirt-env.sh for this private libvirt instance only.
		log_filters="1:qemu.qemu_process 1:qemu.qemu_driver 1:qemu.qemu_domain 1:qemu.qemu_domainjob 1:hypervisor.domain_job 3:qemu.qemu_monitor 3:rpc"
		log_outputs="1:file:/var/log/libvirt/libvirtd.log"
	EOF
	local u
	cp /etc/passwd "$STATE_DIR/passwd"
	cp /etc/group "$STATE_DIR/group"
	for u in "${LIBVIRT_USERS[@]}"; do
		grep -q "^$u:" "$STATE_DIR/passwd" || echo "$u:x:64055:64055:$u (egress private libvirt):/nonexistent:/usr/sbin/nologin" >>"$STATE_DIR/passwd"
		grep -q "^$u:" "$STATE_DIR/group" || echo "$u:x:64055:" >>"$STATE_DIR/group"
	done
}

ensure_netns() {
	if ! ip netns list | awk '{print $1}' | grep -qx "$NETNS"; then
		log "creating network namespace $NETNS"
		# The first `ip netns add` of a machine makes /run/netns a mount of itself, which `ip netns delete`
		# leaves: stop undoes it when it was not there before and nothing else uses it by then.
		mkdir -p "$STATE_DIR"
		mountpoint -q /run/netns 2>/dev/null || touch "$STATE_DIR/netns-run-mount"
		[ -d /run/netns ] || touch "$STATE_DIR/netns-run-dir"
		ip netns add "$NETNS"
	fi
	ip netns exec "$NETNS" ip link set lo up
}

running_in_netns() { # $1 = daemon name
	local pid
	for pid in $(daemon_pids "$1"); do
		[ "$(netns_of "$pid")" = "$NETNS" ] && return 0
	done
	return 1
}

# start_daemons starts the instance's virtlogd and its supervised libvirtd (see the header), in a new mount
# namespace that lives as long as they do.
start_daemons() {
	if running_in_netns libvirtd; then
		wait_for_daemon
		return
	fi
	local pair mounts=
	for pair in "${PRIVATE_DIRS[@]}"; do
		mkdir -p "$STATE_DIR/${pair#*=}"
		mounts+="mkdir -p ${pair%%=*} && mount --bind $STATE_DIR/${pair#*=} ${pair%%=*}; "
	done
	mounts+="mount --bind $STATE_DIR/passwd /etc/passwd; mount --bind $STATE_DIR/group /etc/group; "
	rm -f "$STATE_DIR/stopping"
	touch "$STATE_DIR/daemon-restarts"
	# setsid: the supervisor outlives this script and the test that called it, until stop. It lives in the
	# network namespace, so stop finds it there with everything it started.
	setsid unshare --mount --propagation private -- nsenter --net="/run/netns/$NETNS" -- tini -s -- bash -c "
		set -u
		$mounts
		echo \$\$ >'$STATE_DIR/supervisor.pid'
		virtlogd -d -p /run/libvirt/virtlogd.pid
		while :; do
			libvirtd -p /run/libvirt/libvirtd.pid
			rc=\$?
			[ -e '$STATE_DIR/stopping' ] && exit 0
			echo \"\$(date -u +%FT%TZ) libvirtd exited with status \$rc, started again\" >>'$STATE_DIR/daemon-restarts'
			for f in /run/libvirt/qemu/*.xml; do
				grep -q \"<domstatus [^>]*pid='0'\" \"\$f\" 2>/dev/null || continue
				rm -f \"\$f\" \"\${f%.xml}.pid\"
				echo \"\$(date -u +%FT%TZ) cleared the status of \$(basename \"\$f\" .xml), whose start libvirtd died in before QEMU ran\" >>'$STATE_DIR/daemon-restarts'
			done
			sleep 1
		done
	" </dev/null >>"$STATE_DIR/supervisor.log" 2>&1 &
	wait_for_daemon
}

wait_for_daemon() {
	for _ in $(seq 1 60); do
		if [ -S "$SOCKET" ] && virsh_ version >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.5
	done
	log "libvirtd did not answer on $SOCKET within 30s"
	exit 1
}

ensure_network() {
	if ! virsh_ net-info "$NETWORK" >/dev/null 2>&1; then
		log "defining network $NETWORK (198.18.0.0/24 on $BRIDGE, inside $NETNS only)"
		local xml
		xml=$(mktemp)
		cat >"$xml" <<-EOF
			<network>
			  <name>$NETWORK</name>
			  <forward mode='nat'/>
			  <bridge name='$BRIDGE' stp='on' delay='0'/>
			  <ip address='198.18.0.1' netmask='255.255.255.0'>
			    <dhcp>
			      <range start='198.18.0.100' end='198.18.0.254'/>
			    </dhcp>
			  </ip>
			</network>
		EOF
		virsh_ net-define "$xml" >/dev/null
		rm -f "$xml"
	fi
	virsh_ net-autostart "$NETWORK" --disable >/dev/null 2>&1 || true
	if [ "$(virsh_ net-info "$NETWORK" | awk '/^Active:/{print $2}')" != yes ]; then
		virsh_ net-start "$NETWORK" >/dev/null
	fi
}

ensure_pool() {
	mkdir -p "$POOL_DIR"
	if ! virsh_ pool-info "$POOL" >/dev/null 2>&1; then
		log "defining dir pool $POOL at $POOL_DIR"
		virsh_ pool-define-as "$POOL" dir --target "$POOL_DIR" >/dev/null
	fi
	if [ "$(virsh_ pool-info "$POOL" | awk '/^State:/{print $2}')" != running ]; then
		virsh_ pool-start "$POOL" >/dev/null
	fi
	if [ ! -e "$POOL_DIR/$BASE_VOLUME" ]; then
		log "creating blank base volume $BASE_VOLUME (1 GiB virtual)"
		qemu-img create -q -f qcow2 "$POOL_DIR/$BASE_VOLUME" 1G
	fi
	virsh_ pool-refresh "$POOL" >/dev/null
}

print_env() {
	cat <<-EOF
		EGRESS_LIBVIRT_URI=$URI
		EGRESS_LIBVIRT_NETNS=$NETNS
		EGRESS_LIBVIRT_NETWORK=$NETWORK
		EGRESS_LIBVIRT_BRIDGE=$BRIDGE
		EGRESS_LIBVIRT_POOL=$POOL
		EGRESS_LIBVIRT_POOL_DIR=$POOL_DIR
		EGRESS_LIBVIRT_BASE_VOLUME=$BASE_VOLUME
	EOF
}

start() {
	need_root
	install_packages
	ensure_netns
	mkdir -p "$STATE_DIR"
	running_in_netns libvirtd || configure
	start_daemons
	ensure_network
	ensure_pool
	print_env
}

# stop ends everything in the instance's network namespace (libvirtd, virtlogd, the supervisor, dnsmasq and
# every QEMU: the namespace is the instance's own, so all of it is), then removes the namespace and the state
# folder with the domains' definitions and volumes. It never talks to a libvirt daemon.
stop() {
	need_root
	# The supervisor must not start the daemon again while it is being stopped.
	[ -d "$STATE_DIR" ] && touch "$STATE_DIR/stopping"
	if ip netns list | awk '{print $1}' | grep -qx "$NETNS"; then
		local pid pids alive
		# The pids are taken once: an exiting process already drops out of `ip netns pids` while it still
		# runs, and a following start must not find it.
		pids=$(ip netns pids "$NETNS")
		for pid in $pids; do kill "$pid" 2>/dev/null || true; done
		for _ in $(seq 1 40); do
			alive=
			for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=1; done
			[ -z "$alive" ] && break
			sleep 0.25
		done
		for pid in $pids; do kill -9 "$pid" 2>/dev/null || true; done
		ip netns delete "$NETNS"
	fi
	if [ -e "$STATE_DIR/netns-run-mount" ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
		umount /run/netns 2>/dev/null || true
		[ -e "$STATE_DIR/netns-run-dir" ] && rmdir /run/netns 2>/dev/null
	fi
	rm -rf "$STATE_DIR"
	log "stopped"
}

status() {
	local ok=0
	if ip netns list | awk '{print $1}' | grep -qx "$NETNS"; then
		echo "netns $NETNS: present"
	else
		echo "netns $NETNS: absent"
		ok=1
	fi
	local d
	for d in libvirtd virtlogd; do
		if running_in_netns "$d"; then echo "$d: running in $NETNS"; else
			echo "$d: not running in $NETNS"
			ok=1
		fi
	done
	if [ -S "$SOCKET" ] && virsh_ version >/dev/null 2>&1; then
		virsh_ net-info "$NETWORK" 2>/dev/null | sed "s/^/network: /" || ok=1
		virsh_ pool-info "$POOL" 2>/dev/null | sed "s/^/pool: /" || ok=1
		virsh_ vol-info "$BASE_VOLUME" --pool "$POOL" 2>/dev/null | sed "s/^/base: /" || ok=1
		print_env
	else
		echo "libvirtd: no answer on $SOCKET"
		ok=1
	fi
	return $ok
}

# restart stops libvirtd alone, as a package upgrade does, and lets the supervisor start it again: QEMU,
# dnsmasq and virtlogd keep running and the new daemon takes its domains and networks back, while every
# client connection breaks. It holds the lock that VM-booting tests hold (EGRESS_RESTART_LOCK,
# /tmp/egress-vmboot.lock; EGRESS_RESTART_LOCK_HELD=1 when the caller holds it) and is quick: SIGTERM, wait
# for the exit, wait for an answer.
restart() {
	need_root
	local lock=${EGRESS_RESTART_LOCK:-/tmp/egress-vmboot.lock}
	# A caller that already holds the lock (a test that must restart at a moment of its own choosing) says so.
	if [ -z "${EGRESS_RESTART_LOCK_HELD:-}" ]; then
		exec 9>>"$lock"
		flock -w "${EGRESS_RESTART_LOCK_WAIT:-900}" 9 || {
			log "could not take $lock to restart libvirtd"
			exit 1
		}
	fi
	local pid pids=()
	for pid in $(daemon_pids libvirtd); do
		[ "$(netns_of "$pid")" = "$NETNS" ] && pids+=("$pid")
	done
	if [ ${#pids[@]} -eq 0 ]; then
		log "libvirtd is not running in $NETNS: run $0 start"
		exit 1
	fi
	kill "${pids[@]}"
	local alive
	for _ in $(seq 1 120); do
		alive=
		for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
		[ -z "$alive" ] && break
		sleep 0.25
	done
	[ -n "$alive" ] && kill -9 "${pids[@]}" 2>/dev/null
	# A test that restarts the daemon under an apply reads this line to know the moment it was down.
	log "libvirtd is down"
	wait_for_daemon
	log "libvirtd restarted"
}

case "${1:-}" in
packages)
	need_root
	install_packages
	;;
start) start ;;
stop) stop ;;
status) status ;;
restart) restart ;;
*)
	echo "usage: $0 packages|start|stop|status|restart" >&2
	exit 2
	;;
esac
