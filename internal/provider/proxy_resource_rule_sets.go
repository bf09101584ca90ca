package provider

import (
	"context"
	"slices"
	"sort"
	"strconv"

	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/setdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// ruleSetModes are the values of a rule set's mode, the default first: listed once, for the validator and the
// description.
var ruleSetModes = []string{string(proxyconf.RuleSetEnforce), string(proxyconf.RuleSetReport)}

// policyAttributes are the egress policy beyond the one allow-list: rule sets per client and the deny list.
// Both are new since the upgrade baseline, so neither has a default: a state written before them holds null,
// and a default would plan a change on every existing proxy.
func policyAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"rule_sets": schema.ListNestedAttribute{
			Optional: true,
			MarkdownDescription: "Egress rules per client, in order. A request is judged by the first rule set whose `clients` it matches: " +
				"its `destinations` and `ports` decide it instead of `allowed_destinations` and `allowed_ports`, which still judge " +
				"every request no rule set matches. Clients outside `allowed_client_cidrs` are refused before any rule set is read. " +
				"In `report` mode a request outside the rule set's destinations or ports is forwarded anyway and logged with " +
				"`decision=would_deny` and the rule set's name, so that an allow-list can be tried on live traffic before it is enforced; " +
				"`denied_destinations`, the private-range guards (see `allowed_private_cidrs`) and `max_connections_per_client` refuse in both modes. " +
				"Unset by default. Adding, changing, reordering or removing rule sets updates the proxy in place where its backend can " +
				"reconfigure it (as it reported when it last read the proxy), and replaces the proxy otherwise.",
			PlanModifiers: []planmodifier.List{listRequiresReplaceUnlessReconfigurable()},
			Validators:    []validator.List{listvalidator.SizeAtMost(proxyconf.MaxRuleSets)},
			NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
				"name": schema.StringAttribute{
					Required:            true,
					MarkdownDescription: "Names the rule set in the access log (`ruleset=<name>`) and in plan errors; unique within the proxy.",
					Validators:          []validator.String{attribute_validator.RuleSetName()},
				},
				"clients": schema.SingleNestedAttribute{
					Required: true,
					MarkdownDescription: "Whose requests the rule set judges. A request matches when it satisfies every attribute set here: " +
						"from one of `source_cidrs`, authenticated as one of `users`, with a client certificate whose subject is one of " +
						"`certificate_subjects`. Set at least one; to match one client or another, write two rule sets.",
					Attributes: map[string]schema.Attribute{
						"source_cidrs": schema.SetAttribute{
							Optional: true, ElementType: types.StringType,
							MarkdownDescription: "Client address ranges, in canonical CIDR form (`10.1.0.0/16`), each within `allowed_client_cidrs`.",
							Validators:          []validator.Set{setvalidator.SizeBetween(1, proxyconf.MaxAllowedClientCIDRs), setvalidator.ValueStringsAre(attribute_validator.ClientCIDR())},
						},
						"users": schema.SetAttribute{
							Optional: true, ElementType: types.StringType,
							MarkdownDescription: "User names, each of a user `auth` declares: a request matches when it authenticated as one of them.",
							Validators:          []validator.Set{setvalidator.SizeAtLeast(1), setvalidator.ValueStringsAre(attribute_validator.Username())},
						},
						"certificate_subjects": schema.SetAttribute{
							Optional: true, ElementType: types.StringType,
							MarkdownDescription: "Subject common names of client certificates, which `tls.client_ca_pem` must be set to verify: " +
								"a request matches when its TLS connection presented a certificate of one of these subjects.",
							Validators: []validator.Set{setvalidator.SizeBetween(1, proxyconf.MaxCertificateSubjects), setvalidator.ValueStringsAre(attribute_validator.CertificateSubject())},
						},
					},
				},
				"destinations": schema.SetAttribute{
					Optional: true, Computed: true, ElementType: types.StringType,
					Default: setdefault.StaticValue(types.SetValueMust(types.StringType, []attr.Value{})),
					MarkdownDescription: "Host names these clients may reach, as in `allowed_destinations`: `api.example.com` for one host, " +
						"`.example.com` for the domain and all its subdomains. Empty (the default) allows none: in `report` mode every request is then logged as a would-be denial.",
					Validators: []validator.Set{setvalidator.SizeAtMost(proxyconf.MaxAllowedDestinations), setvalidator.ValueStringsAre(attribute_validator.Destination())},
				},
				"ports": schema.SetAttribute{
					Optional: true, Computed: true, ElementType: types.Int64Type,
					Default:             setdefault.StaticValue(types.SetValueMust(types.Int64Type, defaultPortValues())),
					MarkdownDescription: "Destination ports `CONNECT` may reach for these clients, as in `allowed_ports`. Defaults to " + portList(proxyconf.DefaultConnectPorts) + ".",
					Validators:          []validator.Set{setvalidator.SizeBetween(1, proxyconf.MaxAllowedPorts), setvalidator.ValueInt64sAre(attribute_validator.Port())},
				},
				"mode": schema.StringAttribute{
					Optional: true, Computed: true, Default: stringdefault.StaticString(ruleSetModes[0]),
					MarkdownDescription: "`enforce` (the default) refuses a request outside `destinations` or `ports` with 403; `report` forwards it " +
						"and logs it with `decision=would_deny`. Either way the access log names the rule set and the decision of every request.",
					Validators: []validator.String{stringvalidator.OneOf(ruleSetModes...)},
				},
			}},
		},
		"denied_destinations": schema.SetAttribute{
			Optional: true, ElementType: types.StringType,
			MarkdownDescription: "Host names refused to every client, whatever `allowed_destinations` or a rule set allows, in `enforce` and " +
				"`report` mode alike: `api.example.com` for one host, `.example.com` for the domain and all its subdomains. Unset by default. " +
				reconfigurableDescription,
			PlanModifiers: []planmodifier.Set{setRequiresReplaceUnlessReconfigurable()},
			Validators:    []validator.Set{setvalidator.SizeAtMost(proxyconf.MaxAllowedDestinations), setvalidator.ValueStringsAre(attribute_validator.Destination())},
		},
	}
}

// defaultPortValues are proxyconf.DefaultConnectPorts as the schema's values.
func defaultPortValues() []attr.Value {
	out := make([]attr.Value, len(proxyconf.DefaultConnectPorts))
	for i, p := range proxyconf.DefaultConnectPorts {
		out[i] = types.Int64Value(int64(p))
	}
	return out
}

// ruleSetModel is one element of rule_sets. clients stays an object value, not a struct, so that a
// configuration with it unknown (from another resource) can still be read by the plan-time checks.
type ruleSetModel struct {
	Name         types.String `tfsdk:"name"`
	Clients      types.Object `tfsdk:"clients"`
	Destinations types.Set    `tfsdk:"destinations"`
	Ports        types.Set    `tfsdk:"ports"`
	Mode         types.String `tfsdk:"mode"`
}

type ruleSetClientsModel struct {
	SourceCIDRs         types.Set `tfsdk:"source_cidrs"`
	Users               types.Set `tfsdk:"users"`
	CertificateSubjects types.Set `tfsdk:"certificate_subjects"`
}

var (
	ruleSetClientsType = types.ObjectType{AttrTypes: map[string]attr.Type{
		"source_cidrs":         types.SetType{ElemType: types.StringType},
		"users":                types.SetType{ElemType: types.StringType},
		"certificate_subjects": types.SetType{ElemType: types.StringType},
	}}
	ruleSetType = types.ObjectType{AttrTypes: map[string]attr.Type{
		"name":         types.StringType,
		"clients":      ruleSetClientsType,
		"destinations": types.SetType{ElemType: types.StringType},
		"ports":        types.SetType{ElemType: types.Int64Type},
		"mode":         types.StringType,
	}}
)

// ruleSetsOf are the elements of a rule_sets value; none when it is null or unknown.
func ruleSetsOf(ctx context.Context, list types.List) ([]ruleSetModel, diag.Diagnostics) {
	if list.IsNull() || list.IsUnknown() {
		return nil, nil
	}
	var out []ruleSetModel
	diags := list.ElementsAs(ctx, &out, false)
	return out, diags
}

// clientsOf is a rule set's clients; ok is false while the object is unknown or null.
func (r ruleSetModel) clientsOf(ctx context.Context) (ruleSetClientsModel, bool, diag.Diagnostics) {
	var c ruleSetClientsModel
	if r.Clients.IsNull() || r.Clients.IsUnknown() {
		return c, false, nil
	}
	diags := r.Clients.As(ctx, &c, basetypes.ObjectAsOptions{})
	return c, !diags.HasError(), diags
}

// policySettings adds the rule sets, the deny list and the client CA to s, in the order the contract wants:
// rule sets as written (their order decides), every set within them sorted, so that the same configuration
// always renders the same squid.conf.
func (m proxyResourceModel) policySettings(ctx context.Context, s *proxyconf.Settings) diag.Diagnostics {
	s.DeniedDestinations = sortedStrings(m.DeniedDestinations)
	ruleSets, diags := ruleSetsOf(ctx, m.RuleSets)
	for _, r := range ruleSets {
		clients, _, d := r.clientsOf(ctx)
		diags.Append(d...)
		rs := proxyconf.RuleSet{
			Name: r.Name.ValueString(),
			Clients: proxyconf.RuleSetClients{
				SourceCIDRs:         sortedStrings(clients.SourceCIDRs),
				Users:               sortedStrings(clients.Users),
				CertificateSubjects: sortedStrings(clients.CertificateSubjects),
			},
			Destinations: sortedStrings(r.Destinations),
			Ports:        sortedPorts(r.Ports),
			Mode:         proxyconf.RuleSetMode(r.Mode.ValueString()),
		}
		s.RuleSets = append(s.RuleSets, rs)
	}
	if m.TLS != nil && s.TLS != nil {
		s.TLS.ClientCAPEM = m.TLS.ClientCAPEM.ValueString()
		s.TLS.ClientCRLPEM = m.TLS.ClientCRLPEM.ValueString()
	}
	return diags
}

// setPolicySettings records the rule sets and the deny list the backend reports, so that a change made
// behind Terraform's back shows in the plan. What the configuration cannot tell apart from the backend's
// report stays as the model has it: none reported where the model holds an empty list or set (written
// "[]"), and a rule set's defaults (ports, mode) filled in where the backend leaves them out.
func (m *proxyResourceModel) setPolicySettings(s proxyconf.Settings) diag.Diagnostics {
	var diags diag.Diagnostics
	switch {
	case len(s.DeniedDestinations) > 0:
		m.DeniedDestinations = stringSetOf(s.DeniedDestinations)
	case m.DeniedDestinations.IsUnknown() || len(m.DeniedDestinations.Elements()) > 0:
		m.DeniedDestinations = types.SetNull(types.StringType)
	}
	if len(s.RuleSets) == 0 {
		if m.RuleSets.IsUnknown() || len(m.RuleSets.Elements()) > 0 {
			m.RuleSets = types.ListNull(ruleSetType)
		}
		return diags
	}
	elems := make([]attr.Value, len(s.RuleSets))
	for i, rs := range s.RuleSets {
		mode := rs.Mode
		if mode == "" {
			mode = proxyconf.RuleSetEnforce
		}
		ports := rs.Ports
		if len(ports) == 0 {
			ports = proxyconf.DefaultConnectPorts
		}
		destinations := rs.Destinations
		if destinations == nil {
			destinations = []string{}
		}
		clients := types.ObjectValueMust(ruleSetClientsType.AttrTypes, map[string]attr.Value{
			"source_cidrs":         optionalStringSet(rs.Clients.SourceCIDRs),
			"users":                optionalStringSet(rs.Clients.Users),
			"certificate_subjects": optionalStringSet(rs.Clients.CertificateSubjects),
		})
		elems[i] = types.ObjectValueMust(ruleSetType.AttrTypes, map[string]attr.Value{
			"name":         types.StringValue(rs.Name),
			"clients":      clients,
			"destinations": stringSetOf(destinations),
			"ports":        int64SetOf(ports),
			"mode":         types.StringValue(string(mode)),
		})
	}
	list, d := types.ListValue(ruleSetType, elems)
	diags.Append(d...)
	m.RuleSets = list
	return diags
}

// policyDiffers tells whether the policy attributes differ between m and prior: a change Reconfigure applies.
func (m proxyResourceModel) policyDiffers(prior proxyResourceModel) bool {
	if !m.RuleSets.Equal(prior.RuleSets) || !m.DeniedDestinations.Equal(prior.DeniedDestinations) {
		return true
	}
	if m.TLS == nil || prior.TLS == nil {
		return false // adding or removing tls replaces the proxy
	}
	return !m.TLS.ClientCAPEM.Equal(prior.TLS.ClientCAPEM) || !m.TLS.ClientCRLPEM.Equal(prior.TLS.ClientCRLPEM)
}

// sortedStrings are the known strings of a set, sorted; nil for a null, unknown or empty set.
func sortedStrings(set types.Set) []string {
	out := stringsOf(set)
	if len(out) == 0 {
		return nil
	}
	sort.Strings(out)
	return out
}

// sortedPorts are the known ports of a set of numbers, sorted.
func sortedPorts(set types.Set) []int {
	var out []int
	if set.IsNull() || set.IsUnknown() {
		return nil
	}
	for _, e := range set.Elements() {
		if p, ok := e.(types.Int64); ok && !p.IsNull() && !p.IsUnknown() {
			out = append(out, int(p.ValueInt64()))
		}
	}
	slices.Sort(out)
	return out
}

// optionalStringSet is null for no strings: a rule set's client attributes are unset rather than empty.
func optionalStringSet(values []string) types.Set {
	if len(values) == 0 {
		return types.SetNull(types.StringType)
	}
	return stringSetOf(values)
}

func int64SetOf(values []int) types.Set {
	elems := make([]attr.Value, len(values))
	for i, v := range values {
		elems[i] = types.Int64Value(int64(v))
	}
	return types.SetValueMust(types.Int64Type, elems)
}

// portList formats ports for a description: "`443`", or "`80`, `443`".
func portList(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return codeList(s)
}
