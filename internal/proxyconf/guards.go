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
// local machine, and the IPv6 addresses of the AWS and GCE metadata servers, which lie inside fc00::/7 and so
// stay refused when a user allows that private range.
var AlwaysRefusedRanges = []string{
	"0.0.0.0/8",
	"127.0.0.0/8",
	"169.254.0.0/16",
	"::/128",
	"::1/128",
	"fe80::/10",
	"fd00:ec2::254/128",
	"fd20:ce::254/128",
}

// PrivateRanges are refused unless an AllowedPrivateCIDRs entry lifts part of them: RFC 1918, shared address
// space (100.64.0.0/10, carrier-grade NAT and some cloud VPCs) and IPv6 unique local addresses.
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
