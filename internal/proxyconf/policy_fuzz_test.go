package proxyconf_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/proxyconftest"
)

// FuzzPolicyDecisions is the property oracle of the policy (issue 39). For settings of every shape the fuzzer
// makes, whatever validation accepts is rendered, and the rendered http_access rules are run, as Squid runs
// them, by a small interpreter (squidRules) for a grid of requests: clients in and out of rule sets' ranges,
// with and without a user and a certificate, to destinations of a rule set, of the fallback, of nobody, of
// the deny list and IP literals, resolving to public, refused and allowed private addresses, on allowed and
// other ports, as CONNECT and plain GET. Each outcome (allow or deny, and the logged rule set, decision and
// reason) must be what the oracle (wantDecision) says from the settings alone: the first matching rule set
// judges; report mode forwards what lies outside it as would_deny but never a refused address; the deny
// list refuses for everyone in both modes; unnamed clients fall back to the allow-list.
func FuzzPolicyDecisions(f *testing.F) {
	for _, s := range proxyconftest.PolicyFuzzSeeds {
		f.Add(s.Name, s.Dest1, s.Dest2, s.CIDR, s.Subject, s.Shape)
	}
	f.Fuzz(func(t *testing.T, name, dest1, dest2, cidr, subject string, shape []byte) {
		if len(shape) > 6 {
			shape = shape[:6]
		}
		in := proxyconftest.PolicyFuzzInput{Name: name, Dest1: dest1, Dest2: dest2, CIDR: cidr, Subject: subject, Shape: shape}
		// Each settings in both log formats: a JSON log renders the annotated layout even without a policy,
		// and its every decision must be the oracle's too.
		for _, format := range proxyconf.LogFormats {
			s := in.Settings()
			s.LogFormat = format
			checkPolicyDecisions(t, s)
		}
	})
}

// checkPolicyDecisions renders s, when validation accepts it, and holds every request of the grid to the
// oracle.
func checkPolicyDecisions(t *testing.T, s proxyconf.Settings) {
	t.Helper()
	opts := proxyconf.RenderOptions{}
	conf, err := proxyconf.RenderSquidConf(s, opts)
	if s.Validate() != nil {
		if err == nil {
			t.Fatal("rendered settings that fail validation")
		}
		return
	}
	if err != nil {
		t.Fatalf("valid settings did not render: %v", err)
	}
	rules := parseSquidRules(t, conf)
	policy := len(s.RuleSets) > 0 || len(s.DeniedDestinations) > 0 || (s.TLS != nil && s.TLS.ClientCAPEM != "") ||
		s.LogFormat == proxyconf.LogFormatJSON
	for _, req := range requestGrid(s) {
		gotAllow, notes := rules.evaluate(req)
		want := wantDecision(s, req)
		wantAllow := want.decision != proxyconf.DecisionDeny
		if gotAllow != wantAllow {
			t.Fatalf("%s: squid.conf %s, the oracle says %+v\n%s", req, verb(gotAllow), want, conf)
		}
		if !policy {
			continue // a text proxy without a policy logs no decision (TestExistingConfigsRenderAsBefore)
		}
		got := outcome{ruleSet: notes["ruleset"], decision: notes["decision"], reason: notes["reason"]}
		if got.reason == "" {
			got.reason = "-"
		}
		if got.ruleSet == "" {
			got.ruleSet = "-"
		}
		if got != want {
			t.Fatalf("%s: squid.conf logs %+v, the oracle says %+v\n%s", req, got, want, conf)
		}
	}
}

func verb(allow bool) string {
	if allow {
		return "allows"
	}
	return "denies"
}

// probe is one request of the grid.
type probe struct {
	src            netip.Addr
	user, cn       string
	connect        bool
	host           string
	port           int
	resolved       netip.Addr // what host resolves to (itself for an IP literal)
	validUser      bool
	presentedCerts bool
}

func (p probe) String() string {
	m := "GET"
	if p.connect {
		m = "CONNECT"
	}
	return fmt.Sprintf("%s %s:%d (resolving to %s) from %s user=%q cert=%q", m, p.host, p.port, p.resolved, p.src, p.user, p.cn)
}

// requestGrid is every combination of the clients, users, certificates, destinations and ports that tell the
// settings' parts apart.
func requestGrid(s proxyconf.Settings) []probe {
	srcs := []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("10.9.9.9"), netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8:1::1")}
	for _, r := range s.RuleSets {
		for _, c := range r.Clients.SourceCIDRs {
			p := netip.MustParsePrefix(c)
			srcs = append(srcs, p.Addr(), lastAddr(p))
		}
	}
	users := []string{""}
	if len(s.Users) > 0 {
		users = append(proxyconf.Usernames(s.Users), "", "stranger")
	}
	cns := []string{""}
	if s.TLS != nil && s.TLS.ClientCAPEM != "" {
		cns = []string{"other-cn"}
		for _, r := range s.RuleSets {
			cns = append(cns, r.Clients.CertificateSubjects...)
		}
	}
	hosts := []string{"fallback.example", "nobody.example", "127.0.0.1", "10.0.0.1", "8.8.8.8"}
	for _, d := range slices.Concat(s.DeniedDestinations, allRuleSetDestinations(s)) {
		base := strings.TrimPrefix(d, ".")
		hosts = append(hosts, base, "x."+base)
	}
	var out []probe
	for _, src := range srcs {
		for _, u := range users {
			for _, cn := range cns {
				for _, h := range hosts {
					resolved := []netip.Addr{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.20.0.1")}
					if a, err := netip.ParseAddr(h); err == nil {
						resolved = []netip.Addr{a}
					}
					for _, a := range resolved {
						for _, port := range []int{443, 8443, 80, 22} {
							for _, connect := range []bool{true, false} {
								out = append(out, probe{src: src, user: u, cn: cn, connect: connect, host: h, port: port, resolved: a,
									validUser: slices.Contains(proxyconf.Usernames(s.Users), u), presentedCerts: cn != ""})
							}
						}
					}
				}
			}
		}
	}
	return out
}

func allRuleSetDestinations(s proxyconf.Settings) []string {
	var out []string
	for _, r := range s.RuleSets {
		out = append(out, r.Destinations...)
	}
	return out
}

func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As16()
	off := 0
	if p.Addr().Is4() {
		off = 96
	}
	for bit := p.Bits() + off; bit < 128; bit++ {
		a[bit/8] |= 1 << (7 - bit%8)
	}
	r := netip.AddrFrom16(a)
	if p.Addr().Is4() {
		r = r.Unmap()
	}
	return r
}

// outcome is what the access log says of a request.
type outcome struct{ ruleSet, decision, reason string }

// wantDecision is the policy as the issue states it, from the settings alone, in the order its checks apply.
func wantDecision(s proxyconf.Settings, r probe) outcome {
	deny := func(reason, rs string) outcome { return outcome{rs, proxyconf.DecisionDeny, reason} }
	inRanges := func(cidrs []string, a netip.Addr) bool {
		return slices.ContainsFunc(cidrs, func(c string) bool { return netip.MustParsePrefix(c).Contains(a) })
	}
	if !inRanges(s.AllowedClientCIDRs, r.src) {
		return deny(proxyconf.ReasonClientNotAllowed, "-")
	}
	if len(s.Users) > 0 && !r.validUser {
		return deny(proxyconf.ReasonAuthentication, "-")
	}
	matches := func(list []string) bool {
		_, err := netip.ParseAddr(r.host)
		return err != nil && slices.ContainsFunc(list, func(e string) bool { return squidMatchesName(e, r.host) })
	}
	if matches(s.DeniedDestinations) {
		return deny(proxyconf.ReasonDeniedDestination, "-")
	}
	refused := inRanges(proxyconf.AlwaysRefusedRanges, r.resolved) || (inRanges(proxyconf.PrivateRanges, r.resolved) && !inRanges(s.AllowedPrivateCIDRs, r.resolved))
	portOK := func(ports []int) bool {
		if len(ports) == 0 {
			ports = proxyconf.DefaultConnectPorts
		}
		return slices.Contains(ports, r.port) || (!r.connect && r.port == 80)
	}
	for _, rs := range s.RuleSets {
		c := rs.Clients
		if (len(c.SourceCIDRs) > 0 && !inRanges(c.SourceCIDRs, r.src)) ||
			(len(c.Users) > 0 && !slices.Contains(c.Users, r.user)) ||
			(len(c.CertificateSubjects) > 0 && !slices.Contains(c.CertificateSubjects, r.cn)) {
			continue
		}
		if rs.Mode == proxyconf.RuleSetReport {
			switch {
			case refused:
				return deny(proxyconf.ReasonDestinationAddress, rs.Name)
			case !portOK(rs.Ports):
				return outcome{rs.Name, proxyconf.DecisionWouldDeny, proxyconf.ReasonPortNotAllowed}
			case !matches(rs.Destinations):
				return outcome{rs.Name, proxyconf.DecisionWouldDeny, proxyconf.ReasonDestinationNotAllowed}
			}
			return outcome{rs.Name, proxyconf.DecisionAllow, "-"}
		}
		switch {
		case !portOK(rs.Ports):
			return deny(proxyconf.ReasonPortNotAllowed, rs.Name)
		case !matches(rs.Destinations):
			return deny(proxyconf.ReasonDestinationNotAllowed, rs.Name)
		case refused:
			return deny(proxyconf.ReasonDestinationAddress, rs.Name)
		}
		return outcome{rs.Name, proxyconf.DecisionAllow, "-"}
	}
	switch {
	case !portOK(s.AllowedPorts):
		return deny(proxyconf.ReasonPortNotAllowed, "-")
	case !matches(s.AllowedDestinations):
		return deny(proxyconf.ReasonDestinationNotAllowed, "-")
	case refused:
		return deny(proxyconf.ReasonDestinationAddress, "-")
	}
	return outcome{"-", proxyconf.DecisionAllow, "-"}
}

// squidRules are a squid.conf's acls and http_access lines, run as Squid runs them: lines in order, the first
// whose ACLs all match decides; within a line ACLs are evaluated left to right and evaluation stops at the
// first that fails, so an annotation takes effect exactly when every ACL before it matched, whether or not the
// line then matches.
type squidRules struct {
	acls  map[string]squidACL
	lines []squidAccess
}

type squidACL struct {
	typ    string   // acl type, with its attribute ("user_cert CN") or flag ("dstdomain -n")
	values []string // accumulated over repeated lines
}

type squidAccess struct {
	allow bool
	acls  []string // "!name" negates
}

func parseSquidRules(t *testing.T, conf []byte) squidRules {
	t.Helper()
	r := squidRules{acls: map[string]squidACL{}}
	for _, l := range strings.Split(string(conf), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[0] == "acl":
			typ, vals := f[2], f[3:]
			if (typ == "dstdomain" || typ == "user_cert") && len(vals) > 0 {
				typ, vals = typ+" "+vals[0], vals[1:]
			}
			a := r.acls[f[1]]
			if a.typ != "" && a.typ != typ {
				t.Fatalf("acl %s is both %q and %q", f[1], a.typ, typ)
			}
			a.typ, a.values = typ, append(a.values, vals...)
			r.acls[f[1]] = a
		case len(f) >= 3 && f[0] == "http_access":
			r.lines = append(r.lines, squidAccess{allow: f[1] == "allow", acls: f[2:]})
		}
	}
	return r
}

// evaluate runs the http_access lines for req, on the proxy port (never the health port), and returns
// whether the request is allowed and the annotations it carries.
func (r squidRules) evaluate(req probe) (allow bool, notes map[string]string) {
	notes = map[string]string{}
	for _, l := range r.lines {
		matched := true
		for _, name := range l.acls {
			neg := strings.HasPrefix(name, "!")
			if r.match(strings.TrimPrefix(name, "!"), req, notes) == neg {
				matched = false
				break
			}
		}
		if matched {
			return l.allow, notes
		}
	}
	return false, notes // Squid's implicit answer is the opposite of the last line's; every config ends in deny all
}

func (r squidRules) match(name string, req probe, notes map[string]string) bool {
	switch name {
	case "all":
		return true
	case "manager":
		return false // the probes never ask for the cache manager
	}
	a, ok := r.acls[name]
	if !ok {
		panic("http_access names an undefined acl " + name)
	}
	_, literalErr := netip.ParseAddr(req.host)
	switch a.typ {
	case "annotate_transaction":
		for _, v := range a.values {
			k, val, _ := strings.Cut(v, "=")
			notes[k] = val
		}
		return true
	case "src":
		return slices.ContainsFunc(a.values, func(v string) bool { return inSquidSpace(netip.MustParsePrefix(v), req.src) })
	case "dst":
		return slices.ContainsFunc(a.values, func(v string) bool {
			if strings.HasPrefix(v, `"`) {
				return false // the own-addresses file: the probes resolve to none of the machine's addresses
			}
			return inSquidSpace(netip.MustParsePrefix(v), req.resolved)
		})
	case "dstdomain -n":
		return literalErr != nil && slices.ContainsFunc(a.values, func(v string) bool { return squidMatchesName(v, req.host) })
	case "port":
		return slices.Contains(a.values, strconv.Itoa(req.port))
	case "method":
		return (a.values[0] == "CONNECT") == req.connect // the ACLs are CONNECT and GET
	case "proto":
		return !req.connect // the probes' plain requests are http://
	case "localport", "urlpath_regex", "maxconn":
		return false // the proxy port; no health path; within the connection limit
	case "proxy_auth":
		if a.values[0] == "REQUIRED" {
			return req.validUser
		}
		return req.validUser && slices.Contains(a.values, req.user)
	case "user_cert CN":
		return req.presentedCerts && slices.Contains(a.values, req.cn)
	}
	panic("acl type " + a.typ + " has no meaning in the interpreter")
}
