package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// policyChecks refuses, at plan time, rule sets that are valid one attribute at a time but wrong together:
// a name used twice, a source range the proxy does not admit, a user auth does not declare, a certificate
// subject with no client CA to verify it, a rule set that can never match because an earlier one takes all of
// its clients. The rules are proxyconf's (Settings.ValidateRuleSet, Settings.ShadowingRuleSet), which the
// backend applies again before rendering; here each is asked of one attribute at a time, so that the error
// points at that attribute of the rule set at fault. Values not known yet (from another resource) leave their
// check to the apply.
type policyChecks struct{}

var _ resource.ConfigValidator = policyChecks{}

const policyChecksDescription = "rule set names are unique; their source ranges are within allowed_client_cidrs, their users " +
	"declared in auth, their certificate subjects verified by tls.client_ca_pem; no rule set is hidden by an earlier one"

func (policyChecks) Description(context.Context) string         { return policyChecksDescription }
func (policyChecks) MarkdownDescription(context.Context) string { return policyChecksDescription }

// policyConfig is what of the configuration the rule sets are checked against, each part with whether it is
// known yet.
type policyConfig struct {
	ruleSets                 []ruleSetModel
	allowed, users           []string
	allowedKnown, usersKnown bool
	tls                      *proxyconf.TLSSettings
	tlsKnown                 bool
}

func readPolicyConfig(ctx context.Context, config tfsdk.Config) (policyConfig, diag.Diagnostics) {
	var c policyConfig
	var list types.List
	var allowed types.Set
	var clientCA types.String
	diags := config.GetAttribute(ctx, path.Root("rule_sets"), &list)
	diags.Append(config.GetAttribute(ctx, path.Root("allowed_client_cidrs"), &allowed)...)
	diags.Append(config.GetAttribute(ctx, path.Root("tls").AtName("client_ca_pem"), &clientCA)...)
	if diags.HasError() {
		return c, diags
	}
	c.ruleSets, diags = ruleSetsOf(ctx, list)
	c.allowed, c.allowedKnown = stringsOf(allowed), !allowed.IsUnknown() && allSetKnown(allowed)
	c.tlsKnown = !clientCA.IsUnknown()
	if !clientCA.IsNull() && !clientCA.IsUnknown() {
		c.tls = &proxyconf.TLSSettings{ClientCAPEM: clientCA.ValueString()}
	}
	var d diag.Diagnostics
	c.users, c.usersKnown, d = declaredUsers(ctx, config)
	diags.Append(d...)
	return c, diags
}

func (policyChecks) ValidateResource(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	c, diags := readPolicyConfig(ctx, req.Config)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() || len(c.ruleSets) == 0 {
		return
	}
	// known[i]: every client attribute of rule set i is known, as are the attributes it is checked against.
	all := withUsers(proxyconf.Settings{AllowedClientCIDRs: c.allowed, TLS: c.tls}, c.users)
	known := make([]bool, len(c.ruleSets))
	names := map[string]int{}
	for i, r := range c.ruleSets {
		at := path.Root("rule_sets").AtListIndex(i)
		name := r.Name.ValueString()
		if !r.Name.IsNull() && !r.Name.IsUnknown() {
			if first, twice := names[name]; twice {
				resp.Diagnostics.AddAttributeError(at.AtName("name"), "Duplicate rule set name", fmt.Sprintf(
					"Attribute %s: %q already names rule_sets[%d]; the access log and plan errors tell rule sets apart by name, so each needs its own.",
					at.AtName("name"), name, first))
			} else {
				names[name] = i
			}
		}
		clients, ok, d := r.clientsOf(ctx)
		resp.Diagnostics.Append(d...)
		if !ok || r.Name.IsUnknown() || proxyconf.ValidateRuleSetName(name) != nil {
			all.RuleSets = append(all.RuleSets, proxyconf.RuleSet{Name: name})
			continue
		}
		rs := proxyconf.RuleSet{Name: name, Mode: proxyconf.RuleSetMode(r.Mode.ValueString()), Clients: proxyconf.RuleSetClients{
			SourceCIDRs:         validOnly(clients.SourceCIDRs, proxyconf.ValidateClientCIDR),
			Users:               validOnly(clients.Users, proxyconf.ValidateUsername),
			CertificateSubjects: validOnly(clients.CertificateSubjects, proxyconf.ValidateCertificateSubject),
		}}
		all.RuleSets = append(all.RuleSets, rs)
		// A rule set with no clients is refused on its own attribute; compared, it would seem to cover all.
		known[i] = !clients.SourceCIDRs.IsUnknown() && !clients.Users.IsUnknown() && !clients.CertificateSubjects.IsUnknown() &&
			len(rs.Clients.SourceCIDRs)+len(rs.Clients.Users)+len(rs.Clients.CertificateSubjects) > 0
		// One client attribute at a time, against what it depends on, so the error names that attribute.
		aspects := []clientAspect{
			{"source_cidrs", c.allowedKnown, proxyconf.RuleSetClients{SourceCIDRs: rs.Clients.SourceCIDRs}},
			{"users", c.usersKnown, proxyconf.RuleSetClients{Users: rs.Clients.Users}},
			{"certificate_subjects", c.tlsKnown, proxyconf.RuleSetClients{CertificateSubjects: rs.Clients.CertificateSubjects}},
		}
		if clients.SourceCIDRs.IsNull() && clients.Users.IsNull() && clients.CertificateSubjects.IsNull() {
			// Checked here rather than by an object validator, which would count clients itself as set.
			aspects = []clientAspect{{"", true, proxyconf.RuleSetClients{}}}
		}
		for _, a := range aspects {
			if !a.known || (a.attribute != "" && len(a.clients.SourceCIDRs)+len(a.clients.Users)+len(a.clients.CertificateSubjects) == 0) {
				continue
			}
			one := all
			one.RuleSets = []proxyconf.RuleSet{{Name: name, Mode: rs.Mode, Clients: a.clients}}
			if err := one.ValidateRuleSet(0); err != nil {
				p := at.AtName("clients")
				if a.attribute != "" {
					p = p.AtName(a.attribute)
				}
				resp.Diagnostics.AddAttributeError(p, "Invalid rule set clients", fmt.Sprintf("Attribute %s: %v.", p, err))
			}
		}
	}
	if !c.allowedKnown || !c.usersKnown {
		return // an earlier rule set may cover every allowed client or every user: not to be judged on a guess
	}
	for i := range all.RuleSets {
		if !known[i] {
			break // a rule set after an unknown one may or may not be hidden by it
		}
		if j, hidden := all.ShadowingRuleSet(i); hidden {
			p := path.Root("rule_sets").AtListIndex(i).AtName("clients")
			resp.Diagnostics.AddAttributeError(p, "Rule set can never match", fmt.Sprintf(
				"Attribute %s: every client it names is matched first by rule_sets[%d] (%q), which decides their requests: "+
					"this rule set would never be used. Move it before rule_sets[%d], or narrow rule_sets[%d]'s clients.",
				p, j, all.RuleSets[j].Name, j, j))
		}
	}
}

// clientAspect is one attribute of a rule set's clients ("" for none: the clients as a whole), whether what it
// is checked against is known, and the clients with that attribute alone.
type clientAspect struct {
	attribute string
	known     bool
	clients   proxyconf.RuleSetClients
}

// declaredUsers are the user names auth declares. known is false while any of them is not known yet.
func declaredUsers(ctx context.Context, config tfsdk.Config) (names []string, known bool, diags diag.Diagnostics) {
	var auth types.Object
	diags.Append(config.GetAttribute(ctx, path.Root("auth"), &auth)...)
	if diags.HasError() || auth.IsUnknown() {
		return nil, false, diags
	}
	if auth.IsNull() {
		return nil, true, diags
	}
	var username types.String
	diags.Append(config.GetAttribute(ctx, path.Root("auth").AtName("username"), &username)...)
	if username.IsUnknown() {
		return nil, false, diags
	}
	if !username.IsNull() {
		names = append(names, username.ValueString())
	}
	var list types.List
	diags.Append(config.GetAttribute(ctx, path.Root("auth").AtName("users"), &list)...)
	if list.IsUnknown() {
		return nil, false, diags
	}
	for _, e := range list.Elements() {
		u, ok := e.(types.Object)
		if !ok || u.IsUnknown() {
			return nil, false, diags
		}
		name, ok := u.Attributes()["username"].(types.String)
		if !ok || name.IsUnknown() {
			return nil, false, diags
		}
		names = append(names, name.ValueString())
	}
	return names, true, diags
}

// withUsers gives s the named users, without passwords: the checks need only their names.
func withUsers(s proxyconf.Settings, names []string) proxyconf.Settings {
	for _, n := range names {
		s.Users = append(s.Users, proxyconf.BasicAuth{Username: n})
	}
	return s
}

// validOnly are the known values of set that check accepts: the others are reported on their own attribute,
// and must not be reported again here.
func validOnly(set types.Set, check func(string) error) []string {
	var out []string
	for _, v := range stringsOf(set) {
		if check(v) == nil {
			out = append(out, v)
		}
	}
	return out
}

// allSetKnown tells whether every element of a known set is known.
func allSetKnown(set types.Set) bool {
	for _, e := range set.Elements() {
		if e.IsUnknown() {
			return false
		}
	}
	return true
}
