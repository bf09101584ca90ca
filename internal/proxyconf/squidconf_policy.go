package proxyconf

import (
	"net/netip"
	"strconv"
)

// The policy of issue 39: rule sets, denied destinations and client certificates. A proxy that sets none of
// them renders exactly the squid.conf it did before they existed (TestExistingConfigsRenderAsBefore): the
// backends that keep the rendered file see no change, and the rules read as before. A proxy that sets any of
// them renders the layout below, in which every http_access line names its decision in the access log.

// The reasons the access log gives, beside ReasonDestinationAddress and ReasonClientConnections. A proxy
// without a policy gives only those two (and "-" for every other refusal), as it did before.
const (
	ReasonHealthPortOnly        = "health_port_only"
	ReasonClientNotAllowed      = "client_not_allowed"
	ReasonAuthentication        = "authentication_required"
	ReasonProtocolNotAllowed    = "protocol_not_allowed"
	ReasonDeniedDestination     = "denied_destination"
	ReasonPortNotAllowed        = "port_not_allowed"
	ReasonDestinationNotAllowed = "destination_not_allowed"
)

// The decisions the access log gives a proxy with a policy: its decision= field.
const (
	DecisionAllow     = "allow"
	DecisionDeny      = "deny"
	DecisionWouldDeny = "would_deny"
)

// policyLogFields follow the fields every proxy logs, so a reader of the old line reads the new one too:
// the rule set that judged the request ("-" for none: the fallback, or a check before any rule set) and the
// decision. reason= stays where it was.
const policyLogFields = ` ruleset=%{ruleset}note decision=%{decision}note`

// hasPolicy reports whether s uses anything of issue 39, and so renders the policy layout.
func (s Settings) hasPolicy() bool {
	return len(s.RuleSets) > 0 || len(s.DeniedDestinations) > 0 || s.hasClientCA()
}

func (s Settings) hasClientCA() bool { return s.TLS != nil && s.TLS.ClientCAPEM != "" }

// reasonACLs name the annotate_transaction ACL of each reason; the first two are the names every proxy has
// had, defined where they were (writeClientRules, writeGuardACLs).
var reasonACLs = map[string]string{
	ReasonClientConnections:     "reason_client_connections",
	ReasonDestinationAddress:    "reason_destination_address",
	ReasonHealthPortOnly:        "reason_health_port_only",
	ReasonClientNotAllowed:      "reason_client_not_allowed",
	ReasonAuthentication:        "reason_authentication",
	ReasonProtocolNotAllowed:    "reason_protocol",
	ReasonDeniedDestination:     "reason_denied_destination",
	ReasonPortNotAllowed:        "reason_port",
	ReasonDestinationNotAllowed: "reason_destination_not_allowed",
}

// notes are the annotate_transaction ACLs that end an http_access line. They come last, after every ACL that
// decides whether the line matches: Squid annotates as it evaluates, so a note placed earlier would stick to
// a request the line then does not match. Each note replaces an earlier one of its key (key=value), so the
// line that decides has the last word.
type notes struct{ policy bool }

// of is the notes of a line with decision and reason ("" for none) for rule set ruleSetACL ("" for none). A
// proxy without a policy keeps its old lines: only the two guards' reasons, nothing else.
func (n notes) of(decision, reason, ruleSetACL string) []string {
	if !n.policy {
		if reason == ReasonClientConnections || reason == ReasonDestinationAddress {
			return []string{reasonACLs[reason]}
		}
		return nil
	}
	var out []string
	if ruleSetACL != "" {
		out = append(out, ruleSetACL)
	}
	out = append(out, "decision_"+decision)
	if reason == "" {
		// reason= replaces, and a request may carry the authentication check's early note (writeAuthentication).
		return append(out, "reason_none")
	}
	return append(out, reasonACLs[reason])
}

// writeDecisionACLs defines the annotations of a proxy with a policy, before the first rule that uses them.
func writeDecisionACLs(w *confWriter) {
	w.comment("Every rule names its decision and reason in the access log.")
	for _, d := range []string{DecisionAllow, DecisionDeny, DecisionWouldDeny} {
		w.line("acl", "decision_"+d, "annotate_transaction", "decision="+d)
	}
	for _, r := range []string{ReasonHealthPortOnly, ReasonClientNotAllowed, ReasonAuthentication, ReasonProtocolNotAllowed,
		ReasonDeniedDestination, ReasonPortNotAllowed, ReasonDestinationNotAllowed} {
		w.line("acl", reasonACLs[r], "annotate_transaction", "reason="+r)
	}
	w.line("acl", "reason_none", "annotate_transaction", "reason=-")
}

// access writes one http_access line: action, the ACLs that decide whether it matches, then its notes.
func (w *confWriter) access(action string, acls []string, notes []string) {
	w.line("http_access", append(append([]string{action}, acls...), notes...)...)
}

// writeProtocolRules refuses, for every client in both modes, what no rule set can allow: schemes other than
// http for plain requests, and Squid's cache manager.
func writeProtocolRules(w *confWriter, n notes) {
	w.comment("Plain requests speak http:// only, and Squid's cache manager answers nobody, whatever a rule set says.")
	w.line("acl", "CONNECT", "method", "CONNECT")
	w.line("acl", "http_scheme", "proto", "HTTP")
	w.access("deny", []string{"!CONNECT", "!http_scheme"}, n.of(DecisionDeny, ReasonProtocolNotAllowed, ""))
	w.access("deny", []string{"manager"}, n.of(DecisionDeny, ReasonProtocolNotAllowed, ""))
}

// writeDeniedDestinations refuses the deny list for every client and rule set, before any rule can allow.
func writeDeniedDestinations(w *confWriter, s Settings, n notes) {
	if len(s.DeniedDestinations) == 0 {
		return
	}
	w.comment("denied_destinations: refused for every client and rule set, in both modes.")
	w.acl("denied_destinations", "dstdomain -n", collapseDestinations(s.DeniedDestinations))
	w.access("deny", []string{"denied_destinations"}, n.of(DecisionDeny, ReasonDeniedDestination, ""))
}

// writeGuardACLs defines the destination address guards (see writeDestinationRules, which uses them too).
func writeGuardACLs(w *confWriter, s Settings, opts RenderOptions) {
	w.comment("Destination address guards: whatever the allow-list says, never loopback, link-local, unspecified, the proxy's own addresses, or private ranges outside allowed_private_cidrs.")
	own := append([]netip.Addr{opts.ListenAddress}, opts.OwnAddresses...)
	w.acl("refused_destinations", "dst", refusedDestinations(s.AllowedPrivateCIDRs, own, opts.allowLoopbackDestinations))
	w.line("acl", reasonACLs[ReasonDestinationAddress], "annotate_transaction", "reason="+ReasonDestinationAddress)
	if opts.OwnAddressesFile != "" {
		w.line("acl", "own_addresses", "dst", `"`+opts.OwnAddressesFile+`"`)
	}
}

// guardACLs are the ACLs each of which, on its own line, refuses a destination address.
func guardACLs(opts RenderOptions) []string {
	if opts.OwnAddressesFile != "" {
		return []string{"refused_destinations", "own_addresses"}
	}
	return []string{"refused_destinations"}
}

// writeRuleSets writes each rule set's rules in order. A request whose client matches a rule set's clients
// ends at that rule set's last line whatever happens, so the first rule set that matches judges it; a request
// no rule set matches goes on to the fallback (writeFallback).
//
// enforce: ports outside the rule set's are refused, then the guards refuse the rule set's destinations that
// resolve to a refused address (only allowed names are looked up, as in the fallback), the rule set's
// destinations are allowed and everything else refused.
//
// report: the guards come first and apply to every destination, since every destination is forwarded; then a
// port or destination outside the rule set's is forwarded as would_deny, and its own destinations allowed.
func writeRuleSets(w *confWriter, s Settings, opts RenderOptions, n notes) {
	for i, r := range s.RuleSets {
		id := "rs" + strconv.Itoa(i+1)
		w.comment("Rule set " + r.Name + " (" + string(r.mode()) + ").")
		name := id + "_name"
		w.line("acl", name, "annotate_transaction", "ruleset="+r.Name)
		var clients []string
		if len(r.Clients.SourceCIDRs) > 0 {
			w.acl(id+"_src", "src", squidClientPrefixes(r.Clients.SourceCIDRs))
			clients = append(clients, id+"_src")
		}
		if len(r.Clients.Users) > 0 {
			w.acl(id+"_users", "proxy_auth", uniqueStrings(r.Clients.Users))
			clients = append(clients, id+"_users")
		}
		if len(r.Clients.CertificateSubjects) > 0 {
			w.acl(id+"_certs", "user_cert CN", uniqueStrings(r.Clients.CertificateSubjects))
			clients = append(clients, id+"_certs")
		}
		ports := r.Ports
		if len(ports) == 0 {
			ports = DefaultConnectPorts
		}
		w.acl(id+"_connect_ports", "port", portList(ports))
		w.acl(id+"_http_ports", "port", portList(append([]int{80}, ports...)))
		dests := collapseDestinations(r.Destinations)
		if len(dests) > 0 {
			w.acl(id+"_destinations", "dstdomain -n", dests)
		}
		with := func(acls ...string) []string { return append(append([]string{}, clients...), acls...) }
		outside := DecisionDeny
		action := "deny"
		if r.mode() == RuleSetReport {
			outside, action = DecisionWouldDeny, "allow"
			for _, g := range guardACLs(opts) {
				w.access("deny", with(g), n.of(DecisionDeny, ReasonDestinationAddress, name))
			}
		}
		w.access(action, with("CONNECT", "!"+id+"_connect_ports"), n.of(outside, ReasonPortNotAllowed, name))
		w.access(action, with("!CONNECT", "!"+id+"_http_ports"), n.of(outside, ReasonPortNotAllowed, name))
		if len(dests) > 0 {
			if r.mode() == RuleSetEnforce {
				for _, g := range guardACLs(opts) {
					w.access("deny", with(id+"_destinations", g), n.of(DecisionDeny, ReasonDestinationAddress, name))
				}
			}
			w.access("allow", with(id+"_destinations"), n.of(DecisionAllow, "", name))
		}
		w.access(action, with(), n.of(outside, ReasonDestinationNotAllowed, name))
	}
}

// writeFallback judges the clients no rule set names by allowed_ports and allowed_destinations, as every
// client was judged before rule sets existed.
func writeFallback(w *confWriter, s Settings, opts RenderOptions, n notes) {
	connectPorts := s.AllowedPorts
	if len(connectPorts) == 0 {
		connectPorts = DefaultConnectPorts
	}
	w.comment("Clients no rule set names: CONNECT only to allowed_ports, plain http:// only to port 80 and allowed_ports, and allowed_destinations.")
	w.acl("connect_ports", "port", portList(connectPorts))
	w.acl("http_ports", "port", portList(append([]int{80}, connectPorts...)))
	w.access("deny", []string{"CONNECT", "!connect_ports"}, n.of(DecisionDeny, ReasonPortNotAllowed, ""))
	w.access("deny", []string{"!CONNECT", "!http_ports"}, n.of(DecisionDeny, ReasonPortNotAllowed, ""))
	dests := collapseDestinations(s.AllowedDestinations)
	if len(dests) == 0 {
		return
	}
	w.acl("destinations", "dstdomain -n", dests)
	for _, g := range guardACLs(opts) {
		w.access("deny", []string{"destinations", g}, n.of(DecisionDeny, ReasonDestinationAddress, ""))
	}
	w.access("allow", []string{"destinations"}, n.of(DecisionAllow, "", ""))
}

func uniqueStrings(vs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range vs {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
