package proxyconf

import (
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// The backstop below Squid on a proxy VM: an nftables table that rejects the packets the proxy's user starts
// towards the ranges Squid must never reach, so that a Squid bug, a DNS answer that changed between Squid's
// check and its connect, or a guard left out of squid.conf still cannot reach the metadata server, the VM
// itself or a private network. Squid runs as the "proxy" user on Debian and Ubuntu; root's and every other
// user's traffic (the guest agent, the GCE guest environment, package updates) is not touched.
//
// What is refused is exactly what squid.conf's refused_destinations ACL refuses, less the own addresses only
// the guest knows: the always-refused ranges, and the private ranges less allowed_private_cidrs. An always
// refused range inside a private one (the AWS and GCE metadata servers' IPv6 addresses lie in fc00::/7) stays
// refused when the user allows that private range. The guest adds, when it loads the table
// (BackstopLoader), its own addresses (refused) and the resolvers of /etc/resolv.conf (let through to port
// 53 only: on GCE the resolver is the metadata server, and on a libvirt network usually a private address).
//
// Only what the proxy user starts is matched: a TCP segment that opens a connection (SYN without ACK) and
// every datagram. Squid's answers to its clients (SYN-ACK and all that follows) pass, since clients may sit
// in a refused range themselves (a private network, a health check from the VM). No connection tracking is
// needed for that, so the backstop adds no conntrack table a busy proxy could fill. Refused packets are
// rejected with "administratively prohibited" rather than dropped: Squid then answers its client at once
// instead of holding the connection until connect_timeout, and the sender learns why.

// NftablesPath is where a proxy VM keeps its backstop ruleset; BackstopLoader loads it before every start of
// Squid.
const NftablesPath = "/etc/squid/egress-backstop.nft"

// NftablesTable is the backstop's table (family inet), and the sets the guest fills when it loads it.
const (
	NftablesTable  = "egress_proxy"
	nftResolversV4 = "resolvers_v4"
	nftResolversV6 = "resolvers_v6"
	nftOwnV4       = "own_v4"
	nftOwnV6       = "own_v6"
	nftRefusedV4   = "refused_v4"
	nftRefusedV6   = "refused_v6"
	squidUser      = "proxy"
	nftReject      = "counter reject with icmpx admin-prohibited"
	nftMetricsV4   = "metrics_clients_v4"
	nftMetricsV6   = "metrics_clients_v6"
)

// NftablesMetricsChain is the backstop's chain that keeps a proxy's metrics ports (Settings.Metrics) to the
// metrics clients' ranges; a proxy without metrics has none. The guest starts the metrics programs only
// while it is loaded.
const NftablesMetricsChain = "metrics_input"

// RenderNftables renders the backstop ruleset for s. It replaces the table whole in one transaction ("table"
// then "delete table" makes the deletion succeed whether or not the table exists), so loading it again, as
// every Squid start does, never leaves a moment without the rules, nor two copies of them.
func RenderNftables(s Settings) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	v4, v6 := RefusedRanges(s.AllowedPrivateCIDRs)
	var b bytes.Buffer
	b.WriteString("# The egress proxy's backstop below Squid, rendered by terraform-provider-egress. Do not edit: changes\n")
	b.WriteString("# are replaced on the next apply. Packets the proxy user starts towards the always-refused ranges, the\n")
	b.WriteString("# private ranges outside allowed_private_cidrs and the VM's own addresses are rejected, whatever Squid decided.\n")
	fmt.Fprintf(&b, "table inet %s\ndelete table inet %s\n", NftablesTable, NftablesTable)
	fmt.Fprintf(&b, "table inet %s {\n", NftablesTable)
	nftSet(&b, nftRefusedV4, "ipv4_addr", true, v4)
	nftSet(&b, nftRefusedV6, "ipv6_addr", true, v6)
	// Filled by the guest when it loads the table: see BackstopLoader.
	nftSet(&b, nftResolversV4, "ipv4_addr", false, nil)
	nftSet(&b, nftResolversV6, "ipv6_addr", false, nil)
	nftSet(&b, nftOwnV4, "ipv4_addr", false, nil)
	nftSet(&b, nftOwnV6, "ipv6_addr", false, nil)
	b.WriteString("\tchain output {\n")
	b.WriteString("\t\ttype filter hook output priority filter; policy accept;\n")
	fmt.Fprintf(&b, "\t\tmeta skuid %q jump from_proxy\n", squidUser)
	b.WriteString("\t}\n")
	b.WriteString("\tchain from_proxy {\n")
	b.WriteString("\t\t# Squid's answers to its clients, wherever they are; only what it starts is checked.\n")
	b.WriteString("\t\ttcp flags & (syn | ack) != syn accept\n")
	b.WriteString("\t\t# Squid's own DNS queries, to the resolvers the guest uses (port 53 only).\n")
	fmt.Fprintf(&b, "\t\tmeta l4proto { tcp, udp } th dport 53 ip daddr @%s accept\n", nftResolversV4)
	fmt.Fprintf(&b, "\t\tmeta l4proto { tcp, udp } th dport 53 ip6 daddr @%s accept\n", nftResolversV6)
	for _, r := range []struct{ family, set string }{
		{"ip", nftRefusedV4}, {"ip6", nftRefusedV6}, {"ip", nftOwnV4}, {"ip6", nftOwnV6},
	} {
		fmt.Fprintf(&b, "\t\t%s daddr @%s %s\n", r.family, r.set, nftReject)
	}
	b.WriteString("\t}\n")
	if s.Metrics != nil {
		nftMetrics(&b, *s.Metrics)
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

// nftMetrics writes the sets and the input chain that admit the metrics ports only from m's ranges: anyone
// else's connection is reset (the proxy's own clients too, unless listed), so a scrape from elsewhere fails at
// once. Nothing else reaching the VM is touched. The ranges (Validate refused host bits) go into interval sets
// that merge overlapping ones.
func nftMetrics(b *bytes.Buffer, m MetricsSettings) {
	var v4, v6 []string
	for _, c := range m.AllowedClientCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			continue // Validate checked every range; none is skipped
		}
		if p.Addr().Is4() {
			v4 = append(v4, p.String())
		} else {
			v6 = append(v6, p.String())
		}
	}
	nftMergedSet(b, nftMetricsV4, "ipv4_addr", v4)
	nftMergedSet(b, nftMetricsV6, "ipv6_addr", v6)
	metrics, squid := m.Ports()
	ports := "{ " + strconv.Itoa(metrics) + ", " + strconv.Itoa(squid) + " }"
	fmt.Fprintf(b, "\tchain %s {\n", NftablesMetricsChain)
	b.WriteString("\t\ttype filter hook input priority filter; policy accept;\n")
	b.WriteString("\t\t# The metrics ports (mtail's, the Squid exporter's) admit the metrics clients alone.\n")
	fmt.Fprintf(b, "\t\ttcp dport %s ip saddr @%s accept\n", ports, nftMetricsV4)
	fmt.Fprintf(b, "\t\ttcp dport %s ip6 saddr @%s accept\n", ports, nftMetricsV6)
	fmt.Fprintf(b, "\t\ttcp dport %s counter reject with tcp reset\n", ports)
	b.WriteString("\t}\n")
}

// nftMergedSet is an interval set whose overlapping elements nft merges (two metrics ranges may overlap).
func nftMergedSet(b *bytes.Buffer, name, typ string, elements []string) {
	fmt.Fprintf(b, "\tset %s {\n\t\ttype %s\n\t\tflags interval\n\t\tauto-merge\n", name, typ)
	if len(elements) > 0 {
		fmt.Fprintf(b, "\t\telements = {\n\t\t\t%s,\n\t\t}\n", strings.Join(elements, ",\n\t\t\t"))
	}
	b.WriteString("\t}\n")
}

func nftSet(b *bytes.Buffer, name, typ string, interval bool, elements []string) {
	fmt.Fprintf(b, "\tset %s {\n\t\ttype %s\n", name, typ)
	if interval {
		b.WriteString("\t\tflags interval\n")
	}
	if len(elements) > 0 {
		fmt.Fprintf(b, "\t\telements = {\n\t\t\t%s,\n\t\t}\n", strings.Join(elements, ",\n\t\t\t"))
	}
	b.WriteString("\t}\n")
}

// ResolvConfPath is where a VM's resolvers are listed.
const ResolvConfPath = "/etc/resolv.conf"

// BackstopLoader is a POSIX sh function, load_backstop, that loads the ruleset at nftPath together with the
// guest's resolvers (the nameserver lines of resolvConf) and its own addresses (ownFile, one a line), in one
// nft transaction. An address nft cannot read (a malformed resolv.conf line) must not keep the backstop out: then
// the ruleset is loaded alone and each address added on its own, skipping the ones refused. Its status is
// nft's for the ruleset: the caller decides whether Squid may start without it. Both paths are constants of
// this package or checked options (no quote, no space).
func BackstopLoader(nftPath, ownFile, resolvConf string) string {
	return fmt.Sprintf(`load_backstop() {
	bs_dir=$(mktemp -d) || return 1
	{
		awk '$1 == "nameserver" { sub(/%%.*/, "", $2); print $2 }' '%[8]s' 2>/dev/null |
			grep -E '^[0-9A-Fa-f.:]+$' | while read -r a; do
			case $a in
			*:*) echo "add element inet %[3]s %[4]s { $a }" ;;
			*) echo "add element inet %[3]s %[5]s { $a }" ;;
			esac
		done
		grep -E '^[0-9A-Fa-f.:]+$' '%[2]s' 2>/dev/null | while read -r a; do
			case $a in
			*:*) echo "add element inet %[3]s %[6]s { $a }" ;;
			*) echo "add element inet %[3]s %[7]s { $a }" ;;
			esac
		done
	} >"$bs_dir/adds"
	cat '%[1]s' "$bs_dir/adds" >"$bs_dir/all" || { rm -rf "$bs_dir"; return 1; }
	if nft -f "$bs_dir/all" 2>/dev/null; then
		rm -rf "$bs_dir"
		return 0
	fi
	nft -f '%[1]s' || { rm -rf "$bs_dir"; return 1; }
	while read -r line; do
		nft "$line" 2>/dev/null || :
	done <"$bs_dir/adds"
	rm -rf "$bs_dir"
}`, nftPath, ownFile, NftablesTable, nftResolversV6, nftResolversV4, nftOwnV6, nftOwnV4, resolvConf)
}
