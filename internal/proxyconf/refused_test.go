package proxyconf

import (
	"net/netip"
	"testing"
)

func TestRefusedRanges(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		allowedPrivate []string
		refused        []string // addresses one of the ranges must hold
		notRefused     []string // addresses none may hold
	}{
		"nothing allowed": {
			refused:    []string{"169.254.169.254", "127.0.0.1", "10.0.0.1", "172.31.255.1", "fd00:ec2::254", "fd12::1", "::1"},
			notRefused: []string{"93.184.216.34", "198.18.0.1", "2606:4700::1"},
		},
		"a private range lifted, the metadata addresses inside it kept": {
			allowedPrivate: []string{"172.31.255.0/24", "fc00::/7", "100.64.0.0/10"},
			refused: []string{"172.31.254.255", "172.16.0.1", "fd00:ec2::254", "fd00:ec2::253", "fd00:ec2::123", "fd20:ce::254", "169.254.169.254",
				"100.100.100.200", "168.63.129.16"},
			notRefused: []string{"172.31.255.1", "fd12::1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v4, v6 := RefusedRanges(tc.allowedPrivate)
			var all []netip.Prefix
			for family, ranges := range map[bool][]string{true: v4, false: v6} {
				for _, r := range ranges {
					p := netip.MustParsePrefix(r)
					if p.Addr().Is4() != family {
						t.Errorf("%s is listed with the wrong family", r)
					}
					all = append(all, p)
				}
			}
			for i, p := range all {
				for j, q := range all {
					if i != j && q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
						t.Errorf("%s lies inside %s", p, q)
					}
				}
			}
			holds := func(a string) bool {
				for _, p := range all {
					if p.Contains(netip.MustParseAddr(a)) {
						return true
					}
				}
				return false
			}
			for _, a := range tc.refused {
				if !holds(a) {
					t.Errorf("%s is not refused", a)
				}
			}
			for _, a := range tc.notRefused {
				if holds(a) {
					t.Errorf("%s is refused", a)
				}
			}
		})
	}
}
