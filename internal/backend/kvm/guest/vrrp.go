package guest

import (
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// A proxy of several instances is one VM per instance on one libvirt network, behind a virtual address that
// Debian's keepalived moves between them by VRRP. Each VM runs one VRRP instance:
//
//   - unicast to its peers' fixed addresses (their DHCP reservations), so the network needs no multicast;
//   - every instance starts as BACKUP with the same priority and nopreempt: the address stays where it is
//     when a VM comes back, and moves only when its holder stops advertising (a VM destroyed, its keepalived
//     gone) or gives it up;
//   - a track script asks Squid's health endpoint on the VM itself every VRRPCheckSeconds: a VM whose Squid
//     refuses or fails VRRPCheckFall checks in a row goes to FAULT and gives up the address. A slow answer is
//     not a failure (VRRPCheckTimeoutSeconds): an emulated VM on a loaded host took over 2 s to run the check,
//     and a holder that gives the address away for that resets every connection it holds;
//   - no VRRP authentication (VRRPv2's is a clear-text password, VRRPv3 has none). The configuration comes,
//     like the rest of the guest's, from the seed the provider wrote, and the peers' addresses are fixed: the
//     VRRP firewall table below admits IP protocol 112 from the peers alone and drops every other
//     advertisement, so nothing else on the network can take the address.
//
// Squid listens on every address of the VM (the proxy's squid.conf names none), so the proxy port answers on
// the virtual address wherever it is. Nothing of this is written for a proxy of one.

// Files of a VRRP member.
const (
	// KeepalivedTemplatePath is keepalived.conf with the interface left out: the interface's name is the
	// guest's (enp1s0, eth0), so the prestart script fills it in before every start of keepalived, from the
	// interface that holds the VM's own address.
	KeepalivedTemplatePath = "/etc/keepalived/egress-keepalived.conf.in"
	KeepalivedConfPath     = "/etc/keepalived/keepalived.conf"
	// VRRPCheckPath is the track script: Squid's health endpoint on the VM itself.
	VRRPCheckPath = "/etc/keepalived/egress-squid-health"
	// VRRPPrestartPath writes keepalived.conf and loads the VRRP firewall table before every start.
	VRRPPrestartPath = "/etc/keepalived/egress-prestart"
	// VRRPNftablesPath is the firewall table that admits VRRP from the peers alone.
	VRRPNftablesPath = "/etc/keepalived/egress-vrrp.nft"
	// KeepalivedDropInPath runs the prestart script and restarts keepalived when it fails.
	KeepalivedDropInPath = "/etc/systemd/system/keepalived.service.d/egress.conf"
	// VRRPTable is the nftables table of the VRRP rule, apart from the proxy's backstop.
	VRRPTable = "egress_vrrp"
	// VRRPAdvertSeconds is how often the holder of the address advertises. A backup takes the address once
	// three advertisements are missed (plus a skew under a second): about 3.6 s after its holder went away.
	VRRPAdvertSeconds = 1
	// VRRPCheckSeconds is how often the track script runs, VRRPCheckFall how many failures in a row put the VM
	// in FAULT: a Squid that stopped gives the address up about 6 s later (the advertisements' 3.6 s cover a
	// VM that is gone).
	VRRPCheckSeconds = 2
	VRRPCheckFall    = 3
	// VRRPCheckTimeoutSeconds bounds one run of the track script, and its wait for Squid's answer a little
	// less: keepalived counts a run it kills as a failure. A check of 2 s timed out in a run with the host's
	// CPUs taken by other work (a test with five busy loops beside two emulated VMs): the holder went to FAULT
	// during an in-place change, and the connections it held were reset when the address moved.
	VRRPCheckTimeoutSeconds = 10
)

// VRRP is what one member of a proxy of several instances runs: its own address, its peers' and the virtual
// address clients use.
type VRRP struct {
	// RouterID is the VRRP router id (1 to 255), the same on every member.
	RouterID int
	// Self is this member's own address, Peers the other members'.
	Self  netip.Addr
	Peers []netip.Addr
	// Virtual is the address clients use; PrefixLen the network's prefix length.
	Virtual   netip.Addr
	PrefixLen int
	// HealthPort is Squid's health port on the VM (proxyconf.DefaultHealthPort when 0).
	HealthPort int
}

// Validate checks what the files are rendered from: every address IPv4, none twice, the router id in range.
func (v VRRP) Validate() error {
	if v.RouterID < 1 || v.RouterID > 255 {
		return fmt.Errorf("vrrp router id %d is not between 1 and 255", v.RouterID)
	}
	if v.PrefixLen < 1 || v.PrefixLen > 32 {
		return fmt.Errorf("vrrp prefix length %d is not between 1 and 32", v.PrefixLen)
	}
	if len(v.Peers) == 0 {
		return fmt.Errorf("vrrp needs at least one peer")
	}
	seen := map[netip.Addr]bool{}
	for _, a := range append([]netip.Addr{v.Self, v.Virtual}, v.Peers...) {
		if !a.Is4() {
			return fmt.Errorf("vrrp address %v is not IPv4", a)
		}
		if seen[a] {
			return fmt.Errorf("vrrp address %v is given twice", a)
		}
		seen[a] = true
	}
	return nil
}

func (v VRRP) healthPort() int {
	if v.HealthPort == 0 {
		return proxyconf.DefaultHealthPort
	}
	return v.HealthPort
}

// VRRPFiles are the files of a member, by path.
func VRRPFiles(v VRRP) ([]File, error) {
	if err := v.Validate(); err != nil {
		return nil, err
	}
	return []File{
		{Path: KeepalivedTemplatePath, Content: renderKeepalived(v)},
		{Path: VRRPCheckPath, Content: renderVRRPCheck(v)},
		{Path: VRRPNftablesPath, Content: renderVRRPNftables(v)},
		{Path: VRRPPrestartPath, Content: renderVRRPPrestart(v)},
		{Path: KeepalivedDropInPath, Content: keepalivedDropIn},
	}, nil
}

// File is one file of the guest, by its path there.
type File struct {
	Path    string
	Content []byte
}

func renderKeepalived(v VRRP) []byte {
	var b bytes.Buffer
	b.WriteString("# Written by terraform-provider-egress: this VM's VRRP instance (see " + VRRPPrestartPath + ").\n")
	b.WriteString("global_defs {\n\tenable_script_security\n\tscript_user root\n}\n")
	fmt.Fprintf(&b, "vrrp_script egress_squid {\n\tscript \"/bin/bash %s\"\n\tinterval %d\n\ttimeout %d\n\tfall %d\n\trise 2\n}\n",
		VRRPCheckPath, VRRPCheckSeconds, VRRPCheckTimeoutSeconds, VRRPCheckFall)
	b.WriteString("vrrp_instance egress {\n")
	b.WriteString("\tstate BACKUP\n\tnopreempt\n")
	b.WriteString("\tinterface @INTERFACE@\n")
	fmt.Fprintf(&b, "\tvirtual_router_id %d\n\tpriority 100\n\tadvert_int %d\n", v.RouterID, VRRPAdvertSeconds)
	fmt.Fprintf(&b, "\tunicast_src_ip %s\n\tunicast_peer {\n", v.Self)
	for _, p := range v.Peers {
		fmt.Fprintf(&b, "\t\t%s\n", p)
	}
	b.WriteString("\t}\n")
	fmt.Fprintf(&b, "\tvirtual_ipaddress {\n\t\t%s/%d dev @INTERFACE@\n\t}\n", v.Virtual, v.PrefixLen)
	b.WriteString("\ttrack_script {\n\t\tegress_squid\n\t}\n")
	b.WriteString("}\n")
	return b.Bytes()
}

// renderVRRPCheck is bash: its /dev/tcp is the image's only HTTP client without Python's start-up time,
// which under emulation is seconds. It forks nothing unless a reload is marked.
func renderVRRPCheck(v VRRP) []byte {
	port := strconv.Itoa(v.healthPort())
	return []byte(`#!/bin/bash
# Written by terraform-provider-egress: keepalived's track script. Exits 0 when Squid's health endpoint on this
# VM answers 200, as the provider's readiness check asks it.
#
# While the provider reloads Squid, its ports close for a moment and new connections are held: no reason to
# give the address away. A mark older than the hold is a reload that never ended.
if [[ -e ` + ReloadMarkerPath + ` ]]; then
	printf -v now '%(%s)T' -1
	marked=$(stat -c %Y ` + ReloadMarkerPath + ` 2>/dev/null) && (( now - marked < ` + strconv.Itoa(ReloadHoldSeconds) + ` )) && exit 0
fi
exec 3<>/dev/tcp/127.0.0.1/` + port + ` || exit 1
printf 'GET ` + proxyconf.HealthPath + ` HTTP/1.1\r\nHost: 127.0.0.1:` + port + `\r\nConnection: close\r\n\r\n' >&3 || exit 1
IFS= read -r -t ` + strconv.Itoa(VRRPCheckTimeoutSeconds-2) + ` status <&3 || exit 1
case $status in
"HTTP/1."?" 200"*) exit 0 ;;
esac
exit 1
`)
}

// renderVRRPNftables admits VRRP from the peers alone, in a table of its own: the backstop's table is
// replaced whole on every change of the rules, and this one with it would open a gap.
func renderVRRPNftables(v VRRP) []byte {
	peers := make([]string, len(v.Peers))
	for i, p := range v.Peers {
		peers[i] = p.String()
	}
	return fmt.Appendf(nil, `# Written by terraform-provider-egress: VRRP (IP protocol 112) from this proxy's other instances alone.
table ip %[1]s
delete table ip %[1]s
table ip %[1]s {
	chain input {
		type filter hook input priority filter; policy accept;
		ip protocol 112 ip saddr { %[2]s } accept
		ip protocol 112 counter drop
	}
}
`, VRRPTable, strings.Join(peers, ", "))
}

// renderVRRPPrestart loads the VRRP table and writes keepalived.conf with the interface that holds the VM's
// own address. It fails (and keepalived does not start, systemd tries again) while no interface has it yet.
func renderVRRPPrestart(v VRRP) []byte {
	return fmt.Appendf(nil, `#!/bin/sh
# Written by terraform-provider-egress; run by keepalived.service before every start (%s).
set -eu
/usr/sbin/nft -f '%s'
iface=$(ip -o -4 addr show | awk -v a='%s' '{split($4, p, "/"); if (p[1] == a) {print $2; exit}}')
[ -n "$iface" ] || { echo "no interface holds %s yet" >&2; exit 1; }
sed "s/@INTERFACE@/$iface/g" '%s' >'%s.new'
mv '%s.new' '%s'
`, KeepalivedDropInPath, VRRPNftablesPath, v.Self, v.Self, KeepalivedTemplatePath, KeepalivedConfPath,
		KeepalivedConfPath, KeepalivedConfPath)
}

// keepalivedDropIn resets Debian's ConditionFileNotEmpty on keepalived.conf: systemd checks it before
// ExecStartPre, which writes that file, so without the reset keepalived's first start would be skipped.
var keepalivedDropIn = []byte(`# Written by terraform-provider-egress: before every start of keepalived, load the VRRP firewall table and
# write keepalived.conf for this VM's interface; start again when that fails (the address not there yet).
[Unit]
ConditionFileNotEmpty=
StartLimitIntervalSec=0
[Service]
ExecStartPre=/bin/sh ` + VRRPPrestartPath + `
Restart=on-failure
RestartSec=2
`)

// KeepalivedIfMissing installs keepalived on an image that lacks it (the project's image has it), then
// enables and starts it: a fixed line with no user value and no quote (single-quoted in YAML).
const KeepalivedIfMissing = "command -v keepalived >/dev/null || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y keepalived; }; systemctl enable keepalived && systemctl restart keepalived"

// A member is retired before the provider stops it to give it a new root disk (an image rolled over the proxy,
// one member at a time). Stopped as it is, the member holding the virtual address would reset every connection
// it serves, and its clients' new connections would find no one until a peer missed three advertisements.
// Retire's commands, run in the member in order, hand the address over instead:
//
//   - new connections to the proxy port are held as for a reload (holdRules): their SYNs are dropped, so
//     the clients' kernels send them again a second or more later;
//   - RetireDrainScript waits until no connection to the proxy port is established any more, so requests in
//     progress end where they started (a client that keeps an idle connection open holds it until the bound);
//   - keepalived stops, which makes it send an advertisement of priority 0 and drop the address: a peer takes
//     it at once, and the held clients' SYNs, sent again, reach that peer.
//
// The commands change nothing that outlives the member's root disk, which the provider replaces next.

// RetireDrainTries bounds RetireDrainScript's wait, in tenths of a second: a request of a client on a loaded
// machine through an emulated VM ends well within it, and the held clients' third SYN (about 7 s after the
// first) still comes after it.
const RetireDrainTries = 60

// Retire is the commands that hand the virtual address over before the member is stopped; the second exits 1
// when connections are still established after RetireDrainTries tenths of a second, which the provider notes
// and goes on from.
func Retire(port int) [][]string {
	return [][]string{
		{nftBin, holdRules(port)},
		{"/bin/sh", "-c", retireDrainScript(port, RetireDrainTries)},
		{"/bin/systemctl", "stop", "keepalived.service"},
	}
}

// retireDrainScript polls ss until no TCP connection to port is established, at most tries times.
func retireDrainScript(port, tries int) string {
	return fmt.Sprintf(`i=0; while [ -n "$(/bin/ss -Htn state established "( sport = :%d )")" ]; do `+
		`i=$((i + 1)); [ "$i" -ge %d ] && exit 1; sleep 0.1; done`, port, tries)
}
