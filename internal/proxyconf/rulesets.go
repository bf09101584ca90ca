package proxyconf

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// Rule sets are validated as a whole (Settings.Validate) and field by field by the exported validators below,
// which the provider calls to put a plan-time error on the attribute at fault. Every value ends up in
// squid.conf (an acl value or an annotation) or in the access log, so each must be a token that cannot escape
// its place there.

// Bounds on the policy. The lists of every rule set count against the proxy's list limits together with the
// proxy's own lists (validate.go), so the rendered config stays within what a GCE metadata value carries however
// the entries are spread over rule sets.
const (
	MaxRuleSets = 32
	// MaxCertificateSubjects bounds the subjects of all rule sets together.
	MaxCertificateSubjects = 200
	// MaxRuleSetUsers bounds the user names of all rule sets together: every rule set naming every one of
	// MaxUsers users would take a fifth of the config's room (TestLargestPolicyFits).
	MaxRuleSetUsers = 200
)

// ruleSetNameRE: what an access log field and a JSON value carry without quoting, and what cannot be mistaken
// for the log's "-" (no rule set).
var ruleSetNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// ValidateRuleSetName reports why n cannot name a rule set, or nil.
func ValidateRuleSetName(n string) error {
	if !ruleSetNameRE.MatchString(n) {
		return fmt.Errorf("rule set name %q must be 1 to 63 lowercase letters, digits, '_' or '-', starting with a letter (it is written into the access log as is)", n)
	}
	return nil
}

// certificateSubjectRE: a common name as Squid's user_cert ACL compares it, and as squid.conf can carry it
// unquoted (a quoted value is a file name to Squid). 64 characters is X.509's upper bound for a common name
// (RFC 5280's ub-common-name). Service identities (payments, build-runner-1, svc@example.com,
// spiffe-like ids without slashes) fit; names with spaces do not.
var certificateSubjectRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@:-]{0,63}$`)

// ValidateCertificateSubject reports why cn cannot be a client certificate subject a rule set matches, or nil.
func ValidateCertificateSubject(cn string) error {
	if !certificateSubjectRE.MatchString(cn) {
		return fmt.Errorf("certificate subject %q must be a common name of 1 to 64 letters, digits, '.', '_', '@', ':' or '-', starting with a letter or digit: issue client certificates with such a CN", cn)
	}
	return nil
}

// ValidateRuleSetMode reports why m cannot be a rule set's mode, or nil; "" means RuleSetEnforce.
func ValidateRuleSetMode(m RuleSetMode) error {
	switch m {
	case "", RuleSetEnforce, RuleSetReport:
		return nil
	}
	return fmt.Errorf("mode %q must be %q or %q", m, RuleSetEnforce, RuleSetReport)
}

// ValidateDeniedDestination reports why d cannot be a denied destination, or nil: the syntax of an allowed one.
func ValidateDeniedDestination(d string) error { return ValidateDestination(d) }

// mode is r's mode with the zero value read as enforce.
func (r RuleSet) mode() RuleSetMode {
	if r.Mode == "" {
		return RuleSetEnforce
	}
	return r.Mode
}

// ValidateRuleSet reports why s.RuleSets[i], on its own, cannot judge requests on a proxy of settings s, or
// nil: its name, mode and lists are valid; its clients name at least one kind; its users are users of the
// proxy (so the proxy must have authentication); its certificate subjects need a client CA; its source
// ranges lie within AllowedClientCIDRs, the only clients the proxy admits. It does not compare rule sets with
// each other (ValidateRuleSets does).
func (s Settings) ValidateRuleSet(i int) error {
	r := s.RuleSets[i]
	if err := ValidateRuleSetName(r.Name); err != nil {
		return err
	}
	if err := ValidateRuleSetMode(r.Mode); err != nil {
		return fmt.Errorf("rule set %q: %w", r.Name, err)
	}
	c := r.Clients
	if len(c.SourceCIDRs) == 0 && len(c.Users) == 0 && len(c.CertificateSubjects) == 0 {
		return fmt.Errorf("rule set %q names no clients: give source ranges, users or certificate subjects (a request matches when it satisfies every one given)", r.Name)
	}
	for _, cidr := range c.SourceCIDRs {
		if err := ValidateClientCIDR(cidr); err != nil {
			return fmt.Errorf("rule set %q: %w", r.Name, err)
		}
		if len(subtractPrefixes(netip.MustParsePrefix(cidr), parseAll(s.AllowedClientCIDRs))) > 0 {
			return fmt.Errorf("rule set %q: source range %s is not within allowed_client_cidrs (%s), whose clients alone the proxy admits: add it there, or narrow the rule set to it", r.Name, cidr, strings.Join(s.AllowedClientCIDRs, ", "))
		}
	}
	users := s.userNames()
	for _, u := range c.Users {
		if err := ValidateUsername(u); err != nil {
			return fmt.Errorf("rule set %q: %w", r.Name, err)
		}
		if len(users) == 0 {
			return fmt.Errorf("rule set %q names user %q, but the proxy has no users: a client proves it is a user by logging in, so configure the proxy's users (auth) or match the clients by source range", r.Name, u)
		}
		if !slices.Contains(users, u) {
			return fmt.Errorf("rule set %q names user %q, who is not one of the proxy's users (%s): add the user or fix the name (names are case-sensitive)", r.Name, u, strings.Join(users, ", "))
		}
	}
	for _, cn := range c.CertificateSubjects {
		if err := ValidateCertificateSubject(cn); err != nil {
			return fmt.Errorf("rule set %q: %w", r.Name, err)
		}
	}
	if len(c.CertificateSubjects) > 0 && (s.TLS == nil || s.TLS.ClientCAPEM == "") {
		// Without a client CA no client presents a certificate, so the rule set could never match. In report
		// mode that silence would mislead most: no would_deny line reads as "the allow-list is complete" while
		// the clients it meant are judged by the fallback all along.
		return fmt.Errorf("rule set %q (mode %s) matches certificate subjects, but the proxy asks for no client certificate, so it could never match: set tls's client CA, or match the clients by source range or user", r.Name, r.mode())
	}
	for _, d := range r.Destinations {
		if err := ValidateDestination(d); err != nil {
			return fmt.Errorf("rule set %q: %w", r.Name, err)
		}
	}
	for _, p := range r.Ports {
		if err := ValidatePort(p); err != nil {
			return fmt.Errorf("rule set %q: %w", r.Name, err)
		}
	}
	return nil
}

// ShadowingRuleSet returns the index of the first rule set before sets[i] whose clients include every client
// sets[i] names, so that sets[i] can never judge a request (the first match decides), and ok; or ok false. It
// reasons on the clients alone: an earlier rule set that sets a kind of client (source, user, subject) covers
// a later one only when the later one sets that kind too and within it, or when it covers every value the
// proxy can see there (every allowed client range; every user of the proxy, which authenticates every client).
func (s Settings) ShadowingRuleSet(i int) (earlier int, ok bool) {
	later := s.RuleSets[i].Clients
	allowed := parseAll(s.AllowedClientCIDRs)
	users := s.userNames()
	for j := range i {
		e := s.RuleSets[j].Clients
		cidrs := len(e.SourceCIDRs) == 0 ||
			(len(later.SourceCIDRs) > 0 && rangesCover(parseAll(e.SourceCIDRs), parseAll(later.SourceCIDRs))) ||
			rangesCover(parseAll(e.SourceCIDRs), allowed)
		names := len(e.Users) == 0 ||
			(len(later.Users) > 0 && subset(later.Users, e.Users)) ||
			(len(users) > 0 && subset(users, e.Users))
		subjects := len(e.CertificateSubjects) == 0 ||
			(len(later.CertificateSubjects) > 0 && subset(later.CertificateSubjects, e.CertificateSubjects))
		if cidrs && names && subjects {
			return j, true
		}
	}
	return 0, false
}

// ValidateRuleSets reports the first problem of s's rule sets, or nil: each on its own (ValidateRuleSet),
// unique names, none shadowed by an earlier one, and the lists of all of them within the proxy's bounds.
func (s Settings) ValidateRuleSets() error {
	if len(s.RuleSets) > MaxRuleSets {
		return fmt.Errorf("at most %d rule sets, got %d", MaxRuleSets, len(s.RuleSets))
	}
	seen := map[string]int{}
	for i, r := range s.RuleSets {
		if err := s.ValidateRuleSet(i); err != nil {
			return err
		}
		if j, dup := seen[r.Name]; dup {
			return fmt.Errorf("rule sets %d and %d are both named %q: each rule set needs a name of its own (the access log tells them apart by it)", j+1, i+1, r.Name)
		}
		seen[r.Name] = i
		if j, shadowed := s.ShadowingRuleSet(i); shadowed {
			return fmt.Errorf("rule set %q can never match: every client it names is matched first by rule set %q, which comes before it: move it before %q, or narrow %q", r.Name, s.RuleSets[j].Name, s.RuleSets[j].Name, s.RuleSets[j].Name)
		}
	}
	return s.ValidatePolicyTotals()
}

// ValidatePolicyTotals reports whether the lists of the proxy and of all its rule sets together exceed the
// proxy's bounds, or nil. It counts entries without judging them, so the provider can ask it at plan time of
// a configuration whose entries are checked one by one elsewhere.
func (s Settings) ValidatePolicyTotals() error {
	dests, cidrs, ports, subjects, users := len(s.AllowedDestinations)+len(s.DeniedDestinations), len(s.AllowedClientCIDRs), len(s.AllowedPorts), 0, 0
	for _, r := range s.RuleSets {
		dests += len(r.Destinations)
		cidrs += len(r.Clients.SourceCIDRs)
		ports += len(r.Ports)
		subjects += len(r.Clients.CertificateSubjects)
		users += len(r.Clients.Users)
	}
	switch {
	case dests > MaxAllowedDestinations:
		return fmt.Errorf("at most %d destinations in allowed and denied destinations and every rule set together, got %d", MaxAllowedDestinations, dests)
	case cidrs > MaxAllowedClientCIDRs:
		return fmt.Errorf("at most %d client ranges in allowed_client_cidrs and every rule set together, got %d", MaxAllowedClientCIDRs, cidrs)
	case ports > MaxAllowedPorts:
		return fmt.Errorf("at most %d ports in allowed_ports and every rule set together, got %d", MaxAllowedPorts, ports)
	case subjects > MaxCertificateSubjects:
		return fmt.Errorf("at most %d certificate subjects in every rule set together, got %d", MaxCertificateSubjects, subjects)
	case users > MaxRuleSetUsers:
		return fmt.Errorf("at most %d user names in every rule set together, got %d: a rule set that names every user can often name none (users are matched only where a rule set names them), or be merged with another", MaxRuleSetUsers, users)
	}
	return nil
}

// validatePolicy checks what issue 39 added: the denied destinations, the client CA and the rule sets.
func (s Settings) validatePolicy() error {
	for _, d := range s.DeniedDestinations {
		if err := ValidateDeniedDestination(d); err != nil {
			return fmt.Errorf("denied destinations: %w", err)
		}
	}
	if s.TLS != nil && (s.TLS.ClientCAPEM != "" || s.TLS.ClientCRLPEM != "") {
		if err := ValidateClientCA(s.TLS.ClientCAPEM, s.TLS.ClientCRLPEM); err != nil {
			return err
		}
	}
	return s.ValidateRuleSets()
}

// userNames are the names of the proxy's users.
func (s Settings) userNames() []string { return Usernames(s.Users) }

// parseAll parses ranges, skipping invalid ones: the exported validators run at plan time on settings whose
// other attributes may still be invalid (each reported on its own attribute).
func parseAll(cidrs []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// rangesCover reports whether the ranges outer hold every address of the ranges inner.
func rangesCover(outer, inner []netip.Prefix) bool {
	for _, p := range inner {
		if len(subtractPrefixes(p, outer)) > 0 {
			return false
		}
	}
	return true
}

func subset(small, big []string) bool {
	for _, v := range small {
		if !slices.Contains(big, v) {
			return false
		}
	}
	return true
}
