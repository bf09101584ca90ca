package guest

import "fmt"

// A reload of Squid (`squid -k reconfigure`, or a restart for a new password) closes its listening ports for a
// moment, and the kernel refuses a client that connects then. While the provider reloads it, the guest holds
// new connections instead:
//
//   - ReloadHold drops the first packet (SYN) of every new TCP connection to the proxy port from outside the
//     VM, so that the client's kernel sends it again (TCP's first retransmission comes a second later) and
//     connects once Squid listens again, where it would have been refused;
//   - and it marks the reload (ReloadMarkerPath), so that the VRRP track script of a proxy of several
//     instances does not give the virtual address away while this VM's Squid reloads: the address stays
//     where the clients' connections are.
//
// Held, a reload can still reset a client: Squid closes its listening socket and reopens it, and the kernel
// resets the connections that completed their handshake before the hold but that Squid had not accepted yet
// (a busy Squid leaves some in the socket's accept queue). ReloadDrain waits until that queue is empty, which
// it soon is, as no new connection joins it while held.
//
// ReloadRelease ends both once Squid reports its ports open. Should it never come (the provider lost on the
// way), both end by themselves after ReloadHoldSeconds: the port's element in the table's set times out, and
// the track script takes an older marker for a reload that never ended.

const (
	// ReloadMarkerPath is there while the provider reloads Squid. /run: a reboot clears it.
	ReloadMarkerPath = "/run/egress-proxy-reloading"
	// ReloadHoldTable is the nftables table of the hold, apart from the backstop's and the VRRP rule's.
	ReloadHoldTable = "egress_reload_hold"
	// ReloadHoldSeconds bounds a hold: more than the provider waits for a reload to end (60 s).
	ReloadHoldSeconds = 90

	nftBin = "/usr/sbin/nft"
)

// ReloadHold is the commands, each a program and its arguments run in the guest, that start a hold of new
// connections to port. Run again, they start it afresh.
func ReloadHold(port int) [][]string {
	return [][]string{{"/usr/bin/touch", ReloadMarkerPath}, {nftBin, holdRules(port)}}
}

// holdRules is the nft script that starts a hold of new connections to port (ReloadHold, Retire).
func holdRules(port int) string {
	// The table is made, emptied (deleted and made again, as Debian 12's nft has no `destroy`) and filled in
	// one nft run, which applies as one transaction. Priority -10 runs before the backstop's filter chain; a
	// drop in any base chain is final.
	return fmt.Sprintf("add table inet %[1]s; delete table inet %[1]s; add table inet %[1]s; "+
		"add set inet %[1]s ports { type inet_service; flags timeout; }; "+
		"add chain inet %[1]s input { type filter hook input priority -10; policy accept; }; "+
		`add rule inet %[1]s input iifname != "lo" tcp dport @ports tcp flags & (syn | ack) == syn drop; `+
		"add element inet %[1]s ports { %[2]d timeout %[3]ds }", ReloadHoldTable, port, ReloadHoldSeconds)
}

// ReloadDrainTries bounds ReloadDrain's wait, in tenths of a second: long enough for a Squid under emulation to
// accept what waits, short against the hold's own bound.
const ReloadDrainTries = 100

// ReloadDrain is the command that waits until nothing waits in the accept queue of the proxy port's listening
// socket (the Recv-Q that ss shows for it), and exits 1 if something still waits after ReloadDrainTries tenths
// of a second.
func ReloadDrain(port int) []string {
	return []string{"/bin/sh", "-c", drainScript(port, ReloadDrainTries)}
}

// drainScript polls ss, the only view of the accept queue, until the queue is empty, at most tries times.
func drainScript(port, tries int) string {
	return fmt.Sprintf(`i=0; while /bin/ss -Hltn "sport = :%d" | /usr/bin/awk '$2 > 0 { waiting = 1 } END { exit !waiting }'; do `+
		`i=$((i + 1)); [ "$i" -ge %d ] && exit 1; sleep 0.1; done`, port, tries)
}

// ReloadRelease is the commands that end a hold, whether one runs or not.
func ReloadRelease() [][]string {
	return [][]string{
		{nftBin, fmt.Sprintf("add table inet %[1]s; delete table inet %[1]s", ReloadHoldTable)},
		{"/bin/rm", "-f", ReloadMarkerPath},
	}
}
