package proxyconf

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Vocabulary is what the renderer writes, learnt from the renderer itself, so that a check built on it cannot
// drift from it. A guest that is handed its config rather than rendering it checks the config against it, so
// that whoever wrote the config cannot start a program or pull in a file the renderer never would: squid.conf
// may hold only these directives, those whose lines never depend on the settings only as they are pinned, ACL
// types and listening-port options only those the renderer uses, files in quotes only the own-addresses
// file; the backstop must hold the lines that make it refuse.
type Vocabulary struct {
	// Directives are every directive the renderer writes.
	Directives []string
	// Pinned maps a directive whose lines do not depend on the settings to the only lines it may have.
	Pinned map[string][]string
	// ACLTypes are the acl types the renderer uses.
	ACLTypes []string
	// PortOptions are the options http_port and https_port may carry after their address.
	PortOptions []string
	// QuotedFiles are the only values a config may give in double quotes (which Squid reads as a file).
	QuotedFiles []string
	// BackstopTable is the table the backstop replaces; BackstopLines are lines it must hold, each whole.
	BackstopTable string
	BackstopLines []string
}

// VocabularyOf learns the vocabulary of the squid.conf rendered with opts and of the backstop: it renders
// squid.conf for settings that differ in every value, with and without auth and TLS. A directive whose lines
// are the same for two settings that share no value is pinned to them.
func VocabularyOf(opts RenderOptions) Vocabulary {
	opts = opts.WithDefaults()
	a := Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"a.example", ".b.example"},
		AllowedPorts: []int{443}, AllowedPrivateCIDRs: []string{"10.1.0.0/16"}, MaxConnectionsPerClient: 10,
		Users: []BasicAuth{{Username: "a"}}, TLS: &TLSSettings{},
		Timeouts: Timeouts{RequestHeaders: time.Minute, Connect: 10 * time.Second, Idle: 5 * time.Minute}}
	b := Settings{Port: 8443, AllowedClientCIDRs: []string{"192.168.0.0/16", "2001:db8::/32"}, AllowedDestinations: []string{"c.example"},
		AllowedPorts: []int{443, 8443}, MaxConnectionsPerClient: 20, Users: []BasicAuth{{Username: "b"}, {Username: "c"}}, TLS: &TLSSettings{},
		Timeouts: Timeouts{RequestHeaders: 2 * time.Minute, Connect: 20 * time.Second, Idle: 7 * time.Minute}}
	plain := b
	plain.Users, plain.TLS = nil, nil
	// The same with a policy (issue 39), whose layout differs: rule sets of every kind of client and mode, a
	// deny list and a client CA with its CRL.
	withPolicy := func(s Settings, name string) Settings {
		s.TLS = &TLSSettings{ClientCAPEM: "ca", ClientCRLPEM: "crl"}
		s.DeniedDestinations = []string{"denied." + name}
		s.RuleSets = []RuleSet{
			{Name: name + "-range", Clients: RuleSetClients{SourceCIDRs: s.AllowedClientCIDRs[:1]}, Destinations: []string{"r." + name}, Ports: []int{8080}},
			{Name: name + "-user", Clients: RuleSetClients{Users: Usernames(s.Users), CertificateSubjects: []string{name}}, Mode: RuleSetReport},
		}
		return s
	}
	pa, pb := withPolicy(a, "a"), withPolicy(b, "b")
	// And each of those logging JSON, whose logformat is the same line whatever the settings.
	asJSON := func(s Settings) Settings { s.LogFormat = LogFormatJSON; return s }
	linesOf := func(s Settings) map[string][]string {
		m := map[string][]string{}
		for _, l := range squidLines(renderSquidConf(s, opts)) {
			d, _, _ := strings.Cut(l, " ")
			m[d] = append(m[d], l)
		}
		return m
	}
	la, lb, lp, lpa, lpb := linesOf(a), linesOf(b), linesOf(plain), linesOf(pa), linesOf(pb)
	ja, jb, jp, jpa, jpb := linesOf(asJSON(a)), linesOf(asJSON(b)), linesOf(asJSON(plain)), linesOf(asJSON(pa)), linesOf(asJSON(pb))
	v := Vocabulary{Pinned: map[string][]string{}, QuotedFiles: []string{`"` + opts.OwnAddressesFile + `"`}, BackstopTable: NftablesTable}
	for _, m := range []map[string][]string{la, lb, lp, lpa, lpb, ja, jb, jp, jpa, jpb} {
		for d, lines := range m {
			if !slices.Contains(v.Directives, d) {
				v.Directives = append(v.Directives, d)
			}
			for _, l := range lines {
				f := strings.Fields(l)
				switch {
				case d == "acl" && len(f) > 2 && !slices.Contains(v.ACLTypes, f[2]):
					v.ACLTypes = append(v.ACLTypes, f[2])
				case d == "http_port" || d == "https_port":
					for _, o := range f[2:] {
						if !slices.Contains(v.PortOptions, o) {
							v.PortOptions = append(v.PortOptions, o)
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
		// A directive pinned without a policy and with one may have the lines of either (the logformat gains
		// the policy's fields), or those of a JSON log.
		if d != "acl" && d != "http_access" && slices.Equal(lines, lb[d]) && !slices.ContainsFunc(lp[d], func(l string) bool { return !slices.Contains(lines, l) }) &&
			slices.Equal(lpa[d], lpb[d]) {
			v.Pinned[d] = lines
			// The JSON logformat is one line whatever the settings: ja's stand for all of them.
			for _, l := range append(slices.Clone(lpa[d]), ja[d]...) {
				if !slices.Contains(v.Pinned[d], l) {
					v.Pinned[d] = append(v.Pinned[d], l)
				}
			}
		}
	}
	slices.Sort(v.Directives)
	slices.Sort(v.ACLTypes)
	slices.Sort(v.PortOptions)
	v.BackstopLines = []string{
		fmt.Sprintf("table inet %s", NftablesTable), fmt.Sprintf("delete table inet %s", NftablesTable),
		fmt.Sprintf("table inet %s {", NftablesTable), "chain output {", "type filter hook output priority filter; policy accept;",
		fmt.Sprintf("meta skuid %q jump from_proxy", squidUser), "chain from_proxy {",
		fmt.Sprintf("ip daddr @%s %s", nftRefusedV4, nftReject), fmt.Sprintf("ip6 daddr @%s %s", nftRefusedV6, nftReject),
		fmt.Sprintf("ip daddr @%s %s", nftOwnV4, nftReject), fmt.Sprintf("ip6 daddr @%s %s", nftOwnV6, nftReject),
	}
	return v
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
