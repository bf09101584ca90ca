// Package proxyconftest holds the settings the tests of internal/proxyconf and of every backend's guest package
// render alike, so that each renderer is proved on the same inputs: setting combinations Squid must accept,
// the largest settings validation lets through, and the fuzz target's seeds.
package proxyconftest

import (
	"fmt"
	"strings"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// ParseCases are setting combinations every one of which Squid must accept.
func ParseCases() map[string]proxyconf.Settings {
	auth := []proxyconf.BasicAuth{{Username: "u", Password: "password"}}
	long := strings.Repeat("a", 63)
	many := func(n int, f func(i int) string) []string {
		var out []string
		for i := range n {
			out = append(out, f(i))
		}
		return out
	}
	return map[string]proxyconf.Settings{
		"minimal":                    {Port: 3128},
		"one exact host":             {Port: 3128, AllowedDestinations: []string{"api.example.com"}},
		"one suffix":                 {Port: 3128, AllowedDestinations: []string{".example.com"}},
		"suffix and its apex":        {Port: 3128, AllowedDestinations: []string{"example.com", ".example.com"}},
		"suffix and subdomains":      {Port: 3128, AllowedDestinations: []string{"a.example.com", ".example.com", ".b.example.com", "x.b.example.com"}},
		"nested suffixes":            {Port: 3128, AllowedDestinations: []string{".a.b.c", ".b.c", ".c", "c", "d.c"}},
		"duplicates":                 {Port: 3128, AllowedDestinations: []string{"a.io", "a.io", ".b.io", ".b.io"}, AllowedClientCIDRs: []string{"10.0.0.0/8", "10.0.0.0/8"}, AllowedPorts: []int{443, 443}},
		"top-level domain":           {Port: 3128, AllowedDestinations: []string{".io", "github.io"}},
		"single-label host":          {Port: 3128, AllowedDestinations: []string{"localhost", "metadata"}},
		"longest labels":             {Port: 3128, AllowedDestinations: []string{long + "." + long + "." + long + "." + long[:61]}},
		"digits and hyphens":         {Port: 3128, AllowedDestinations: []string{"1-2.x9", ".0a-b.c0m"}},
		"ipv4 clients":               {Port: 8080, AllowedClientCIDRs: []string{"10.0.0.0/8", "192.168.1.7/32", "0.0.0.0/0"}},
		"ipv6 clients":               {Port: 8080, AllowedClientCIDRs: []string{"::/0", "fd00::/8", "2001:db8::1/128"}},
		"ipv6 over the mapped block": {Port: 8080, AllowedClientCIDRs: []string{"::/80", "::/0", "::/96", "10.0.0.0/8"}},
		"overlapping clients":        {Port: 8080, AllowedClientCIDRs: []string{"10.1.0.0/16", "10.0.0.0/8", "10.1.2.3/32", "2001:db8::/32", "2001:db8::1/128"}},
		"port 1":                     {Port: 1, AllowedPorts: []int{1}},
		"port 65535":                 {Port: 65535, AllowedPorts: []int{65535, 1, 80, 443}},
		"port 80 in allowed ports":   {Port: 3128, AllowedPorts: []int{80, 8443}},
		"auth only":                  {Port: 3128, Users: auth},
		"several users":              {Port: 3128, Users: []proxyconf.BasicAuth{{Username: "u", Password: "password"}, {Username: "v", Password: "another password"}}},
		"auth with everything":       {Port: 3128, Users: []proxyconf.BasicAuth{{Username: "A.b_c-9", Password: strings.Repeat("x", 72)}}, AllowedDestinations: []string{".example.com"}, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedPorts: []int{443, 8443}},
		"private ranges allowed": {
			Port: 3128, AllowedDestinations: []string{".example.com"},
			AllowedPrivateCIDRs: []string{"10.1.0.0/16", "10.0.0.0/8", "192.168.3.0/24", "172.16.0.0/12", "100.64.0.0/10", "fd00::/8", "fc00::/7", "fd12::1/128"},
		},
		"one private address allowed":   {Port: 3128, AllowedDestinations: []string{"a.io"}, AllowedPrivateCIDRs: []string{"10.255.255.255/32"}},
		"one connection per client":     {Port: 3128, AllowedDestinations: []string{"a.io"}, MaxConnectionsPerClient: 1},
		"most connections per client":   {Port: 3128, AllowedDestinations: []string{"a.io"}, MaxConnectionsPerClient: proxyconf.MaxMaxConnectionsPerClient},
		"shortest and longest timeouts": {Port: 3128, AllowedDestinations: []string{"a.io"}, Timeouts: proxyconf.Timeouts{RequestHeaders: time.Second, Connect: 24 * time.Hour, Idle: time.Minute}},
		// Issue 39's policy (client certificates need files squid -k parse reads: the guest tests and
		// proxyconf's decision table run them).
		"rule sets and a deny list": {
			Port: 3128, Users: auth, AllowedClientCIDRs: []string{"10.0.0.0/8", "::/0"}, AllowedDestinations: []string{".example.com"},
			DeniedDestinations: []string{".evil.example", "x.example.com"},
			RuleSets: []proxyconf.RuleSet{
				{Name: "ci", Clients: proxyconf.RuleSetClients{SourceCIDRs: []string{"10.1.0.0/16", "::/80"}}, Destinations: []string{".github.com", "github.com"}, Ports: []int{443, 22}},
				{Name: "u-report", Clients: proxyconf.RuleSetClients{Users: []string{"u"}, SourceCIDRs: []string{"10.2.0.0/16"}}, Mode: proxyconf.RuleSetReport},
				{Name: "u-enforced", Clients: proxyconf.RuleSetClients{Users: []string{"u"}, SourceCIDRs: []string{"10.3.0.0/16"}}, Destinations: []string{"a.io"}, Mode: proxyconf.RuleSetEnforce},
			},
		},
		"a deny list alone": {Port: 3128, AllowedDestinations: []string{"a.io"}, DeniedDestinations: []string{".a.io", "b.io"}},
		"maximum lists": {
			Port: 3128, Users: auth,
			AllowedDestinations: many(proxyconf.MaxAllowedDestinations, func(i int) string { return fmt.Sprintf(".d%d.%s.example", i, long) }),
			AllowedClientCIDRs:  many(proxyconf.MaxAllowedClientCIDRs, func(i int) string { return fmt.Sprintf("10.%d.%d.0/24", i/256, i%256) }),
			AllowedPorts:        ManyPorts(proxyconf.MaxAllowedPorts),
			AllowedPrivateCIDRs: many(proxyconf.MaxAllowedPrivateCIDRs, func(i int) string { return fmt.Sprintf("10.%d.%d.0/24", i, i) }),
		},
	}
}

// ManyPorts are n ports from 10000 up.
func ManyPorts(n int) []int {
	var out []int
	for i := range n {
		out = append(out, 10000+i)
	}
	return out
}
