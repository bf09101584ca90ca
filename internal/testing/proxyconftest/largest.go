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

// LargestPolicySettings are LargestSettings with the largest policy validation lets through spread over the
// most rule sets: the destination, client range and port budgets, which the rule sets share with the proxy's
// own lists, moved into them (every rule set's acl lines then carry their own heads); the user names and
// certificate subjects of the rule sets at their limits; a deny list; and a client CA and CRL of MaxPEMBytes.
func LargestPolicySettings(t testing.TB) proxyconf.Settings {
	t.Helper()
	s := LargestSettings(t)
	s.Users = nil
	for i := range proxyconf.MaxUsers {
		s.Users = append(s.Users, proxyconf.BasicAuth{Username: fmt.Sprintf("%02d%s", i, strings.Repeat("u", 62)), Password: strings.Repeat("p", 72)})
	}
	dests, cidrs, ports := s.AllowedDestinations, s.AllowedClientCIDRs, s.AllowedPorts
	s.AllowedDestinations, s.AllowedPorts = dests[:1], nil
	// One range admits every rule set's clients (which must lie within it), so they may have the rest.
	s.AllowedClientCIDRs, cidrs = []string{"2001:db8:ffff:ffff:ffff:ffff:ffff:f000/116"}, cidrs[:len(cidrs)-1]
	s.DeniedDestinations = dests[1:2]
	dests = dests[2:]
	n := proxyconf.MaxRuleSets
	share := func(i, total int) (lo, hi int) { return i * total / n, (i + 1) * total / n }
	for i := range n {
		r := proxyconf.RuleSet{Name: fmt.Sprintf("r%02d%s", i, strings.Repeat("n", 60)), Mode: proxyconf.RuleSetReport}
		lo, hi := share(i, len(dests))
		r.Destinations = dests[lo:hi]
		lo, hi = share(i, len(cidrs))
		r.Clients.SourceCIDRs = cidrs[lo:hi]
		lo, hi = share(i, len(ports))
		r.Ports = ports[lo:hi]
		lo, hi = share(i, proxyconf.MaxRuleSetUsers)
		for j := lo; j < hi; j++ {
			r.Clients.Users = append(r.Clients.Users, s.Users[j%len(s.Users)].Username)
		}
		lo, hi = share(i, proxyconf.MaxCertificateSubjects)
		for j := lo; j < hi; j++ {
			r.Clients.CertificateSubjects = append(r.Clients.CertificateSubjects, fmt.Sprintf("%03d%s", j, strings.Repeat("s", 61)))
		}
		s.RuleSets = append(s.RuleSets, r)
	}
	ca := testutil.NewCA(t)
	caPEM := ca.RootPEM
	for len(caPEM)+len(ca.RootPEM) <= proxyconf.MaxPEMBytes {
		caPEM += ca.RootPEM
	}
	s.TLS.ClientCAPEM = caPEM
	if err := s.Validate(); err != nil {
		t.Fatalf("test settings must be valid: %v", err)
	}
	return s
}
