package proxyconf

import (
	"net/netip"
	"slices"
)

// v4Mapped is where Squid keeps IPv4 addresses: it compares every client address as IPv6, so an IPv6 range
// that contains this block admits IPv4 clients too. (Seen with Squid 5.7: "::/1" admits 127.0.0.1, "::/0"
// does not, and 0.0.0.0/0 is an error.)
var v4Mapped = netip.MustParsePrefix("::ffff:0:0/96")

// squidClientPrefixes turns validated client CIDRs into src ACL values that match exactly the clients the
// CIDRs mean in Go's netip terms: IPv4 ranges admit IPv4 clients, IPv6 ranges native IPv6 clients. Squid
// would otherwise mis-read the list: an IPv6 range over the IPv4-mapped block also admits IPv4 clients; and
// when one range contains another Squid drops the larger one ("is ignored to keep splay tree searching
// predictable"), refusing clients the user allowed. So IPv6 ranges are split around the mapped block, ranges
// inside another are dropped, and no value is a /0, which Squid refuses or treats specially.
func squidClientPrefixes(cidrs []string) []string {
	var ps []netip.Prefix
	for _, c := range cidrs {
		p := netip.MustParsePrefix(c).Masked()
		switch {
		case p.Addr().Is4() && p.Bits() == 0:
			ps = append(ps, netip.MustParsePrefix("0.0.0.0/1"), netip.MustParsePrefix("128.0.0.0/1"))
		case p.Addr().Is6() && p.Bits() <= v4Mapped.Bits() && p.Contains(v4Mapped.Addr()):
			ps = append(ps, aroundV4Mapped(p)...)
		default:
			ps = append(ps, p)
		}
	}
	// Compare in Squid's single address space, where an IPv4 range is its IPv4-mapped IPv6 range.
	squidSpace := func(p netip.Prefix) netip.Prefix {
		if p.Addr().Is4() {
			return netip.PrefixFrom(netip.AddrFrom16(p.Addr().As16()), p.Bits()+96)
		}
		return p
	}
	var out []string
	for i, p := range ps {
		sp := squidSpace(p)
		covered := false
		for j, q := range ps {
			sq := squidSpace(q)
			// Of two equal ranges keep the first.
			if i != j && sq.Bits() <= sp.Bits() && sq.Contains(sp.Addr()) && (sq.Bits() < sp.Bits() || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p.String())
		}
	}
	slices.Sort(out)
	return out
}

// aroundV4Mapped splits p, an IPv6 range containing the IPv4-mapped block, into the ranges that cover p except
// that block: at each prefix length from p's down to /96, the sibling of the branch that leads to the block.
func aroundV4Mapped(p netip.Prefix) []netip.Prefix {
	target := v4Mapped.Addr().As16()
	var out []netip.Prefix
	for bits := p.Bits(); bits < v4Mapped.Bits(); bits++ {
		sibling := target
		sibling[bits/8] ^= 0x80 >> (bits % 8)
		out = append(out, netip.PrefixFrom(netip.AddrFrom16(sibling), bits+1).Masked())
	}
	return out
}
