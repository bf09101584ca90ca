package proxyconf

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// The EC2 guest's second check of a config, after its MAC (AWSConfigMAC): whatever wrote it, the agent
// installs only what the renderer could have written. squid.conf may hold only the directives
// RenderSquidConf writes; those whose lines never depend on the settings (the helper program and the
// password file of auth_param, the log and pid files, the user) only as it writes them; files named in
// quotes only the own-addresses file; ACL types and listening-port options only those it uses. A leaked
// config key, or a bug in the MAC, still cannot start a program (every *_program, external_acl_type,
// a logfile daemon) nor pull in another file (include). The backstop must replace the one table it owns
// and hold its chains, so an empty or foreign ruleset cannot open the way to the metadata server.

// awsGuard is the check, as agent.json carries it (key "guard"); the agent applies it in guard_squid_conf
// and guard_backstop.
type awsGuard struct {
	// Directives are every directive the renderer writes.
	Directives []string `json:"directives"`
	// Pinned maps a directive whose lines do not depend on the settings to the only lines it may have.
	Pinned map[string][]string `json:"pinned"`
	// ACLTypes are the acl types the renderer uses.
	ACLTypes []string `json:"acl_types"`
	// PortOptions are the options http_port and https_port may carry after their address.
	PortOptions []string `json:"port_options"`
	// QuotedFiles are the only values a config may give in double quotes (which Squid reads as a file).
	QuotedFiles []string `json:"quoted_files"`
	// BackstopTable is the table the backstop replaces; BackstopLines are lines it must hold, each whole.
	BackstopTable string   `json:"backstop_table"`
	BackstopLines []string `json:"backstop_lines"`
}

var awsGuardOnce = sync.OnceValue(newAWSGuard)

// newAWSGuard learns the guard from the renderer itself, so the two cannot drift apart: it renders squid.conf
// with the guest's options for settings that differ in every value, with and without auth and TLS. A
// directive whose lines are the same for two settings that share no value is pinned to them.
func newAWSGuard() awsGuard {
	opts := VMRenderOptions().WithDefaults()
	a := Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"a.example", ".b.example"},
		AllowedPorts: []int{443}, AllowedPrivateCIDRs: []string{"10.1.0.0/16"}, MaxConnectionsPerClient: 10,
		Auth: &BasicAuth{Username: "a"}, TLS: &TLSSettings{},
		Timeouts: Timeouts{RequestHeaders: time.Minute, Connect: 10 * time.Second, Idle: 5 * time.Minute}}
	b := Settings{Port: 8443, AllowedClientCIDRs: []string{"192.168.0.0/16", "2001:db8::/32"}, AllowedDestinations: []string{"c.example"},
		AllowedPorts: []int{443, 8443}, MaxConnectionsPerClient: 20, Auth: &BasicAuth{Username: "b"}, TLS: &TLSSettings{},
		Timeouts: Timeouts{RequestHeaders: 2 * time.Minute, Connect: 20 * time.Second, Idle: 7 * time.Minute}}
	plain := b
	plain.Auth, plain.TLS = nil, nil
	linesOf := func(s Settings) map[string][]string {
		m := map[string][]string{}
		for _, l := range squidLines(renderSquidConf(s, opts)) {
			d, _, _ := strings.Cut(l, " ")
			m[d] = append(m[d], l)
		}
		return m
	}
	la, lb, lp := linesOf(a), linesOf(b), linesOf(plain)
	g := awsGuard{Pinned: map[string][]string{}, QuotedFiles: []string{`"` + opts.OwnAddressesFile + `"`}, BackstopTable: NftablesTable}
	for _, m := range []map[string][]string{la, lb, lp} {
		for d, lines := range m {
			if !slices.Contains(g.Directives, d) {
				g.Directives = append(g.Directives, d)
			}
			for _, l := range lines {
				f := strings.Fields(l)
				switch {
				case d == "acl" && len(f) > 2 && !slices.Contains(g.ACLTypes, f[2]):
					g.ACLTypes = append(g.ACLTypes, f[2])
				case d == "http_port" || d == "https_port":
					for _, o := range f[2:] {
						if !slices.Contains(g.PortOptions, o) {
							g.PortOptions = append(g.PortOptions, o)
						}
					}
				}
			}
		}
	}
	for d, lines := range la {
		// The rules themselves (acl, http_access) are the settings': they stay free, their ACL types checked.
		// A plain proxy's lines (no auth, no TLS) must be among them too: http_port is the health port's alone
		// with TLS, the proxy port's as well without.
		if d != "acl" && d != "http_access" && slices.Equal(lines, lb[d]) && !slices.ContainsFunc(lp[d], func(l string) bool { return !slices.Contains(lines, l) }) {
			g.Pinned[d] = lines
		}
	}
	slices.Sort(g.Directives)
	slices.Sort(g.ACLTypes)
	slices.Sort(g.PortOptions)
	g.BackstopLines = []string{
		fmt.Sprintf("table inet %s", NftablesTable), fmt.Sprintf("delete table inet %s", NftablesTable),
		fmt.Sprintf("table inet %s {", NftablesTable), "chain output {", "type filter hook output priority filter; policy accept;",
		fmt.Sprintf("meta skuid %q jump from_proxy", squidUser), "chain from_proxy {",
		fmt.Sprintf("ip daddr @%s %s", nftRefusedV4, nftReject), fmt.Sprintf("ip6 daddr @%s %s", nftRefusedV6, nftReject),
		fmt.Sprintf("ip daddr @%s %s", nftOwnV4, nftReject), fmt.Sprintf("ip6 daddr @%s %s", nftOwnV6, nftReject),
	}
	return g
}

// squidLines are a squid.conf's directive lines, without comments and blank lines.
func squidLines(conf []byte) []string {
	var out []string
	for _, l := range strings.Split(string(conf), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}
