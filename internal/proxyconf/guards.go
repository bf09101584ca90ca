package proxyconf

import (
	"net/netip"
	"slices"
)

// The destination address guards. Whatever the allow-list says, Squid refuses a request when the destination
// host is, or resolves to, an address in one of these ranges, so a name under an allowed domain cannot be
// pointed at the proxy's machine, the cloud metadata server or the proxy's private network (SSRF).

// AlwaysRefusedRanges are never reachable through the proxy, whatever the settings: loopback, link-local (the
// cloud metadata servers live at 169.254.169.254), the unspecified addresses, which Linux connects to the
// local machine, the IPv6 addresses of the AWS and GCE metadata servers, which lie inside fc00::/7 and so stay
// refused when a user allows that private range, Alibaba Cloud's and Azure's metadata and host addresses, multicast, the ranges that embed an IPv4 address (NAT64,
// 6to4), and every other range that IANA's special-purpose registries say is not globally reachable.
//
// The source is the IANA IPv4 and IPv6 Special-Purpose Address Registries (iana.org/assignments/
// iana-ipv4-special-registry and iana-ipv6-special-registry): every row whose "Globally Reachable" column is
// False, or N/A, other than the private ranges below, which a user may lift. Each line names the RFC the
// registry cites. Where a refused block holds a few rows marked globally reachable, the whole block is
// refused all the same: those are anycast services and identifiers (PCP and TURN anycast reach the nearest
// such server, usually on the proxy's own network), never a destination a user means. Left out on purpose:
//   - ::ffff:0:0/96 (IPv4-mapped, RFC 4291): Squid holds every IPv4 address in that form, so a dst range
//     over it would refuse every IPv4 destination (see v4Mapped); the IPv4 ranges here cover the mapped forms.
//   - 198.18.0.0/15 (benchmarking, RFC 2544, not globally reachable): the project's own test networks
//     (scripts/libvirt-env.sh, the GCE guest test) stand in for the internet with it, and the end-to-end
//     tests reach their upstreams there through the proxy. Refusing it waits for those to move.
var AlwaysRefusedRanges = []string{
	"0.0.0.0/8",      // "this network", RFC 791 section 3.2; 0.0.0.0 reaches the local machine on Linux
	"127.0.0.0/8",    // loopback, RFC 1122 section 3.2.1.3
	"169.254.0.0/16", // link-local, RFC 3927; holds the cloud metadata servers
	// IETF protocol assignments, RFC 6890 section 2.1: DS-Lite (192.0.0.0/29, RFC 7335), the dummy address
	// (192.0.0.8, RFC 7600), NAT64 discovery (192.0.0.170-171, RFC 7050, RFC 8880); also PCP anycast
	// (192.0.0.9, RFC 7723) and TURN anycast (192.0.0.10, RFC 8155), the two marked globally reachable.
	"192.0.0.0/24",
	"192.0.2.0/24",    // documentation (TEST-NET-1), RFC 5737
	"192.88.99.0/24",  // 6to4 relay anycast, deprecated by RFC 7526; holds the 6a44 relay anycast (RFC 6751)
	"198.51.100.0/24", // documentation (TEST-NET-2), RFC 5737
	"203.0.113.0/24",  // documentation (TEST-NET-3), RFC 5737
	"224.0.0.0/4",     // multicast, RFC 5771 (not a special-purpose registry row: the multicast registry's)
	"240.0.0.0/4",     // reserved, RFC 1112 section 4; holds the limited broadcast 255.255.255.255 (RFC 919, RFC 8190)

	"::/128",  // unspecified, RFC 4291; reaches the local machine on Linux
	"::1/128", // loopback, RFC 4291
	// NAT64's well-known prefix, RFC 6052: the registry marks it globally reachable, but a NAT64 gateway on the
	// proxy's network turns 64:ff9b::7f00:1 into 127.0.0.1, and so on for every IPv4 range refused here. The
	// cost: behind DNS64 on an IPv6-only network, IPv4-only destinations are refused.
	"64:ff9b::/96",
	"64:ff9b:1::/48", // NAT64 local use, RFC 8215
	"100::/64",       // discard only, RFC 6666
	"100:0:0:1::/64", // dummy prefix, RFC 9780
	// IETF protocol assignments, RFC 2928 and RFC 6890: Teredo (2001::/32, RFC 4380; N/A in the registry, and
	// it embeds IPv4 addresses) and benchmarking (2001:2::/48, RFC 5180); also the rows marked globally
	// reachable, PCP, TURN and DNS-SD anycast (2001:1::1-3, RFC 7723, RFC 8155, RFC 9665), AMT (2001:3::/32,
	// RFC 7450), AS112 (2001:4:112::/48, RFC 7535), ORCHIDv2 (2001:20::/28, RFC 7343) and DETs (2001:30::/28,
	// RFC 9374). No address in the block is a web server's.
	"2001::/23",
	"2001:db8::/32", // documentation, RFC 3849
	"2002::/16",     // 6to4, RFC 3056 (N/A in the registry): 2002:7f00:1::/48 is 127.0.0.1's
	"3fff::/20",     // documentation, RFC 9637
	"5f00::/16",     // segment routing (SRv6) SIDs, RFC 9602
	"fe80::/10",     // link-local, RFC 4291
	"ff00::/8",      // multicast, RFC 4291 section 2.7 (the IPv6 address space registry's, not a special-purpose row)
	// The AWS instance services' IPv6 prefix, inside fc00::/7: the metadata server (fd00:ec2::254), the
	// Route 53 Resolver (::253) and the time service (::123) all lie in it, so the whole /64 is refused.
	"fd00:ec2::/64",
	"fd20:ce::254/128", // the GCE metadata server's, likewise inside fc00::/7
	// Other clouds' metadata and host services, for a proxy whose image runs there: Alibaba Cloud's metadata
	// server lies in the shared address space (100.64.0.0/10) a user may allow, and Azure's WireServer (a
	// public address the host answers on every VM) in none of the private ranges.
	"100.100.100.200/32",
	"168.63.129.16/32",
}

// PrivateRanges are refused unless an AllowedPrivateCIDRs entry lifts part of them: private use (RFC 1918),
// shared address space (100.64.0.0/10, RFC 6598: carrier-grade NAT and some cloud VPCs) and IPv6 unique local
// addresses (RFC 4193). All four are special-purpose registry rows that are not globally reachable.
var PrivateRanges = []string{
	"10.0.0.0/8",
	"100.64.0.0/10",
	"172.16.0.0/12",
	"192.168.0.0/16",
	"fc00::/7",
}

// refusedDestinations is the value list of the "refused_destinations" dst ACL: the always refused ranges, the
// proxy's own addresses, and the private ranges less the allowed private CIDRs. Subtracting here, rather
// than writing "deny private !allowed_private", keeps the rule exact for a name with several addresses: Squid's
// dst ACL matches when any one address of the name matches, so one allowed address must not excuse another
// that is not.
func refusedDestinations(allowedPrivate []string, own []netip.Addr, allowLoopback bool) []string {
	var refused []netip.Prefix
	for _, r := range AlwaysRefusedRanges {
		p := netip.MustParsePrefix(r)
		if allowLoopback && p.Contains(netip.MustParseAddr("127.0.0.1")) {
			continue
		}
		refused = append(refused, p)
	}
	var allowed []netip.Prefix
	for _, c := range allowedPrivate {
		allowed = append(allowed, netip.MustParsePrefix(c).Masked())
	}
	for _, r := range PrivateRanges {
		refused = append(refused, subtractPrefixes(netip.MustParsePrefix(r), allowed)...)
	}
	for _, a := range own {
		if a.IsValid() && !a.IsUnspecified() && (!allowLoopback || !a.IsLoopback()) {
			a = a.Unmap()
			refused = append(refused, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	var out []string
	for _, p := range refused {
		out = append(out, p.String())
	}
	// Squid ignores a range inside another of the same ACL with a warning; drop them here (an own address
	// inside a refused private range) the same way the client list does.
	return squidClientPrefixes(out)
}

// subtractPrefixes returns the ranges that cover p except the addresses in holes: p itself when no hole
// touches it, nothing when one covers it, otherwise the result for each half of p.
func subtractPrefixes(p netip.Prefix, holes []netip.Prefix) []netip.Prefix {
	overlaps := false
	for _, h := range holes {
		if h.Addr().Is4() != p.Addr().Is4() {
			continue
		}
		if h.Bits() <= p.Bits() && h.Contains(p.Addr()) {
			return nil
		}
		if p.Overlaps(h) {
			overlaps = true
		}
	}
	if !overlaps {
		return []netip.Prefix{p}
	}
	lower := netip.PrefixFrom(p.Addr(), p.Bits()+1)
	b := p.Addr().AsSlice()
	b[p.Bits()/8] |= 0x80 >> (p.Bits() % 8)
	upperAddr, _ := netip.AddrFromSlice(b)
	upper := netip.PrefixFrom(upperAddr, p.Bits()+1)
	return slices.Concat(subtractPrefixes(lower, holes), subtractPrefixes(upper, holes))
}

// inPrivateRanges reports whether p lies wholly inside one of PrivateRanges.
func inPrivateRanges(p netip.Prefix) bool {
	for _, r := range PrivateRanges {
		rp := netip.MustParsePrefix(r)
		if rp.Bits() <= p.Bits() && rp.Contains(p.Addr()) {
			return true
		}
	}
	return false
}
