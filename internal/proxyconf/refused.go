package proxyconf

import "net/netip"

// RefusedRanges are the destinations the proxy must never reach, by address family, for a backstop below Squid
// that cannot read squid.conf (a Kubernetes NetworkPolicy's egress rule): the always-refused ranges and the
// private ranges less allowedPrivate, exactly as squid.conf's refused_destinations ACL holds them less the
// proxy's own addresses, which only the running proxy knows. An always-refused range inside a private one
// stays refused when the user allows that private range. No range lies inside another, so each list can be the
// `except` of one block spanning its family.
func RefusedRanges(allowedPrivate []string) (v4, v6 []string) {
	for _, r := range refusedDestinations(allowedPrivate, nil, false) {
		if netip.MustParsePrefix(r).Addr().Is4() {
			v4 = append(v4, r)
		} else {
			v6 = append(v6, r)
		}
	}
	return v4, v6
}
