#!/usr/bin/env bash
# Boots a throw-away copy of the proxy base image and checks that it comes up as a proxy:
#   scripts/build-image.sh --smoke-test [image]     (or scripts/image/smoke-test.sh [image])
#
# The guest runs under plain QEMU (TCG, like the kvm backend's domain type "qemu"), INSIDE the network namespace
# egress-test (scripts/libvirt-env.sh start makes it), with user-mode networking and restrict=on: the guest gets
# a DHCP lease from QEMU and reaches nothing at all. The disk is a qcow2 overlay of the image, 4 GiB like a
# default proxy's root volume; the seed is a NoCloud ISO labelled cidata, as the backend makes it, whose
# user-data is the real output of the kvm guest's RenderUserData (go run ./scripts/image/render-seed) plus a check
# script that reports on the serial console: squid's state, a refused destination (403), the health port (200),
# and once cloud-init is done, `cloud-init status --long`.
#
# Environment: EGRESS_SMOKE_TIMEOUT (seconds, default 600), EGRESS_SMOKE_SMP (default 1),
# EGRESS_SMOKE_MEMORY (MiB, default 512), EGRESS_NETNS (default egress-test), EGRESS_SMOKE_LOG (where to copy
# the serial log; default beside the image).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
netns=${EGRESS_NETNS:-egress-test}
timeout=${EGRESS_SMOKE_TIMEOUT:-600}

image=${1:-}
if [[ -z $image ]]; then
	image=$("$repo/scripts/build-image.sh")
fi
[[ -f $image ]] || { echo "smoke-test: no image at $image" >&2; exit 1; }
image=$(cd "$(dirname "$image")" && pwd)/$(basename "$image")
serial_copy=${EGRESS_SMOKE_LOG:-${image%.qcow2}.smoke-serial.log}

ip netns list | grep -qw "^$netns" ||
	{ echo "smoke-test: network namespace $netns missing; start it with scripts/libvirt-env.sh start" >&2; exit 1; }
for tool in qemu-system-x86_64 genisoimage qemu-img go; do
	command -v $tool >/dev/null || { echo "smoke-test: $tool missing" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/egress-smoke.XXXXXX")
qemu_pid=
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	if [[ -n $qemu_pid ]] && kill -0 "$qemu_pid" 2>/dev/null; then
		kill "$qemu_pid" 2>/dev/null || true
		wait "$qemu_pid" 2>/dev/null || true
	fi
	[[ -f $work/serial.log ]] && cp "$work/serial.log" "$serial_copy"
	rm -rf "$work"
}
trap cleanup EXIT

qemu-img create -q -f qcow2 -F qcow2 -b "$image" "$work/overlay.qcow2" 4G

mkdir "$work/seed" "$work/iso"
(cd "$repo" && go run ./scripts/image/render-seed -dir "$work/seed")
cp "$work/seed/meta-data" "$work/iso/meta-data"

# The check script runs in cloud-init's final stage, after runcmd (scripts run in name order).
cat >"$work/seed/zz-egress-smoke-check" <<'EOF'
#!/bin/bash
exec >/dev/ttyS0 2>&1
probe() { # port request -> status line
	local line
	exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
	printf '%b' "$2" >&3
	IFS= read -r -t 10 line <&3 || true
	exec 3<&-
	printf '%s' "${line%$'\r'}"
}
for _ in $(seq 30); do
	systemctl is-active --quiet squid && (exec 3<>/dev/tcp/127.0.0.1/3129) 2>/dev/null && break
	sleep 1
done
denied=$(probe 3128 'GET http://denied.example/ HTTP/1.1\r\nHost: denied.example\r\nConnection: close\r\n\r\n')
health=$(probe 3129 'GET http://egress-proxy.invalid/squid-internal-static/icons/SN.png HTTP/1.1\r\nHost: egress-proxy.invalid\r\nConnection: close\r\n\r\n')
echo "EGRESS-SMOKE squid=$(systemctl is-active squid) enabled=$(systemctl is-enabled squid) denied=[$denied] health=[$health] timesyncd=$(systemctl is-enabled systemd-timesyncd 2>&1 | head -n1) apt-daily=$(systemctl is-enabled apt-daily.timer 2>&1 | head -n1) qga=$(systemctl is-active qemu-guest-agent) addr=$(ip -4 -o addr show scope global | awk '{print $2"="$4}' | tr '\n' ' ')"
echo "EGRESS-SMOKE root=$(findmnt -n -o SOURCE,SIZE /) machine-id=$(cat /etc/machine-id)"
# After cloud-init has finished: its own verdict, and any warning it logged.
systemd-run --quiet --unit=egress-smoke-report /bin/bash -c '
	while [ ! -e /var/lib/cloud/instance/boot-finished ]; do sleep 1; done
	sleep 1
	{
		cloud-init status --long | sed "s/^/EGRESS-SMOKE-STATUS /"
		grep -E "WARNING|ERROR|Traceback" /var/log/cloud-init.log | head -n 20 | sed "s/^/EGRESS-SMOKE-LOG /"
		cloud-init schema --system 2>&1 | tail -n 8 | sed "s/^/EGRESS-SMOKE-SCHEMA /"
		echo "EGRESS-SMOKE-END"
	} >/dev/ttyS0 2>&1'
EOF

boundary=EGRESS-SMOKE-BOUNDARY
{
	printf 'Content-Type: multipart/mixed; boundary="%s"\nMIME-Version: 1.0\n\n' "$boundary"
	printf -- '--%s\nContent-Type: text/cloud-config; charset="us-ascii"\nMIME-Version: 1.0\nContent-Disposition: attachment; filename="proxy.cfg"\n\n' "$boundary"
	cat "$work/seed/user-data"
	printf -- '\n--%s\nContent-Type: text/x-shellscript; charset="us-ascii"\nMIME-Version: 1.0\nContent-Disposition: attachment; filename="zz-egress-smoke-check"\n\n' "$boundary"
	cat "$work/seed/zz-egress-smoke-check"
	printf -- '\n--%s--\n' "$boundary"
} >"$work/iso/user-data"
genisoimage -quiet -output "$work/seed.iso" -V cidata -J -r "$work/iso/user-data" "$work/iso/meta-data"

# q35 like the kvm backend's domains (virtio disk, SATA cdrom); BIOS firmware (SeaBIOS) is QEMU's default.
: >"$work/serial.log"
start=$(date +%s)
ip netns exec "$netns" qemu-system-x86_64 -machine q35,accel=tcg -m "${EGRESS_SMOKE_MEMORY:-512}" \
	-smp "${EGRESS_SMOKE_SMP:-1}" -display none -monitor none -serial "file:$work/serial.log" -no-reboot \
	-drive "if=virtio,file=$work/overlay.qcow2,format=qcow2" -cdrom "$work/seed.iso" \
	-netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0 \
	-chardev "socket,id=qga0,path=$work/qga.sock,server=on,wait=off" -device virtio-serial-pci \
	-device virtserialport,chardev=qga0,name=org.qemu.guest_agent.0 \
	</dev/null >"$work/qemu.log" 2>&1 &
qemu_pid=$!
echo "smoke-test: booting $image in netns $netns (qemu pid $qemu_pid, TCG), up to ${timeout}s" >&2

finished=
while :; do
	now=$(($(date +%s) - start))
	if [[ -z $finished ]] && grep -aq 'Cloud-init v\. .* finished at' "$work/serial.log"; then
		finished=$now
		echo "smoke-test: cloud-init finished after ${finished}s" >&2
	fi
	if grep -aq '^EGRESS-SMOKE-END' "$work/serial.log"; then
		break
	fi
	if ! kill -0 "$qemu_pid" 2>/dev/null; then
		echo "smoke-test: qemu exited" >&2
		cat "$work/qemu.log" >&2
		break
	fi
	if ((now > timeout)); then
		echo "smoke-test: timed out after ${timeout}s" >&2
		break
	fi
	sleep 2
done
total=$(($(date +%s) - start))
# The guest agent, as the kvm backend's address discovery asks it (the backend's domains have this channel).
qga_addrs=
if kill -0 "$qemu_pid" 2>/dev/null && [[ -S $work/qga.sock ]]; then
	qga_addrs=$(timeout 30 "$(command -v /usr/bin/python3 || command -v python3)" - "$work/qga.sock" <<'PY' 2>&1 || true
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(20)
s.connect(sys.argv[1])
f = s.makefile("rwb")
def call(cmd, args=None):
    msg = {"execute": cmd}
    if args:
        msg["arguments"] = args
    f.write(json.dumps(msg).encode() + b"\n")
    f.flush()
    while True:
        r = json.loads(f.readline())
        if "return" in r or "error" in r:
            return r
call("guest-sync", {"id": 4242})
r = call("guest-network-get-interfaces")
print(" ".join(i["name"] + "=" + a["ip-address"] for i in r.get("return", [])
               for a in i.get("ip-addresses", []) if a["ip-address-type"] == "ipv4"))
PY
)
fi
echo "smoke-test: guest agent reports: ${qga_addrs:-nothing}" >&2
kill "$qemu_pid" 2>/dev/null || true
wait "$qemu_pid" 2>/dev/null || true
qemu_pid=

grep -a -E '^EGRESS-SMOKE|Cloud-init v\. .* finished' "$work/serial.log" | tr -d '\r' >&2 || true
fail=0
check() { # description regexp
	if grep -aEq "$2" "$work/serial.log"; then
		echo "smoke-test: ok   $1" >&2
	else
		echo "smoke-test: FAIL $1" >&2
		fail=1
	fi
}
check "cloud-init finished" 'Cloud-init v\. .* finished at'
check "cloud-init status done" '^EGRESS-SMOKE-STATUS status: done'
check "squid active and enabled" '^EGRESS-SMOKE squid=active enabled=enabled'
check "denied destination refused (403)" 'denied=\[HTTP/1\.1 403 '
check "health port answers (200)" 'health=\[HTTP/1\.1 200 '
check "guest has a DHCP address" 'addr=[^ ]+=10\.0\.2\.'
check "guest agent running" ' qga=active '
if [[ $qga_addrs == *=10.0.2.* ]]; then
	echo "smoke-test: ok   guest agent reports the address" >&2
else
	echo "smoke-test: FAIL guest agent reports the address" >&2
	fail=1
fi
check "time sync and apt timers off" 'timesyncd=masked apt-daily=masked'
echo "smoke-test: serial log: $serial_copy" >&2
echo "smoke-test: boot to cloud-init finished: ${finished:-never}s; total ${total}s" >&2
exit $fail
