package proxyconftest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// LargestSettings are the largest settings validation lets through: every list at its limit, each entry at
// its longest and none merged into another, MaxUsers users with the longest names and passwords, and a
// certificate chain and a key of MaxPEMBytes each.
func LargestSettings(t testing.TB) proxyconf.Settings {
	t.Helper()
	label := strings.Repeat("a", 63)
	s := proxyconf.Settings{Port: 3128}
	for i := range proxyconf.MaxUsers {
		s.Users = append(s.Users, proxyconf.BasicAuth{Username: fmt.Sprintf("%03d%s", i, strings.Repeat("u", 61)), Password: strings.Repeat("p", 72)})
	}
	for i := range proxyconf.MaxAllowedDestinations {
		// 253 characters, plus the leading dot.
		s.AllowedDestinations = append(s.AllowedDestinations, fmt.Sprintf(".%05d%s.%s.%s.%s", i, label[5:], label, label, label[:61]))
	}
	for i := range proxyconf.MaxAllowedClientCIDRs {
		s.AllowedClientCIDRs = append(s.AllowedClientCIDRs, fmt.Sprintf("2001:db8:ffff:ffff:ffff:ffff:ffff:%x/128", 0xf000+i))
	}
	s.AllowedPorts = ManyPorts(proxyconf.MaxAllowedPorts)
	for i := range proxyconf.MaxAllowedPrivateCIDRs {
		// Each its own range, so none is merged away: the longest list the renderer can get.
		s.AllowedPrivateCIDRs = append(s.AllowedPrivateCIDRs, fmt.Sprintf("fd00:ffff:ffff:ffff:ffff:ffff:ffff:%x/128", 0xf000+2*i))
	}
	// The largest certificate chain and key validation lets through.
	ca := testutil.NewCA(t)
	chain, key := ca.Leaf(t)
	for len(chain)+len(ca.InterPEM) <= proxyconf.MaxPEMBytes {
		chain += ca.InterPEM
	}
	key = strings.Repeat("#", proxyconf.MaxPEMBytes-len(key)-1) + "\n" + key // text before a PEM block is allowed
	s.TLS = &proxyconf.TLSSettings{CertificatePEM: chain, PrivateKeyPEM: key}
	if err := s.Validate(); err != nil {
		t.Fatalf("test settings must be valid: %v", err)
	}
	if err := proxyconf.ValidateDestination(s.AllowedDestinations[0]); err != nil || len(s.AllowedDestinations[0]) != 254 {
		t.Fatalf("test destination must be the longest valid one: %v (%d)", err, len(s.AllowedDestinations[0]))
	}
	return s
}
