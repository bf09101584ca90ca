package provider

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// proxyResourceModel is an egress_proxy: its shared attributes, and the one backend attribute that places it,
// read by that backend's descriptor (read and write below do both).
type proxyResourceModel struct {
	// block is the backend attribute the proxy sets (kubernetes = {...}, ...); nil when none is, which
	// ExactlyOneOf refuses at plan time, and in the empty object an import starts from.
	block placementModel

	Name                types.String `tfsdk:"name"`
	Port                types.Int64  `tfsdk:"port"`
	AllowedClientCIDRs  types.Set    `tfsdk:"allowed_client_cidrs"`
	AllowedDestinations types.Set    `tfsdk:"allowed_destinations"`
	AllowedPorts        types.Set    `tfsdk:"allowed_ports"`
	Auth                *authModel   `tfsdk:"auth"`
	Labels              types.Map    `tfsdk:"labels"`

	AllowedPrivateCIDRs     types.Set   `tfsdk:"allowed_private_cidrs"`
	MaxConnectionsPerClient types.Int64 `tfsdk:"max_connections_per_client"`
	TLS                     *tlsModel   `tfsdk:"tls"`

	RuleSets           types.List `tfsdk:"rule_sets"`
	DeniedDestinations types.Set  `tfsdk:"denied_destinations"`

	LogFormat types.String `tfsdk:"log_format"`

	Metrics         *metricsModel `tfsdk:"metrics"`
	MetricsURL      types.String  `tfsdk:"metrics_url"`
	SquidMetricsURL types.String  `tfsdk:"squid_metrics_url"`

	ID              types.String   `tfsdk:"id"`
	UID             types.String   `tfsdk:"uid"`
	AllLabels       types.Map      `tfsdk:"all_labels"`
	State           types.String   `tfsdk:"state"`
	InternalAddress types.String   `tfsdk:"internal_address"`
	EgressAddress   types.String   `tfsdk:"egress_address"`
	IngressAddress  types.String   `tfsdk:"ingress_address"`
	EgressAddresses types.List     `tfsdk:"egress_addresses"`
	Members         types.List     `tfsdk:"members"`
	ProxyURL        types.String   `tfsdk:"proxy_url"`
	CreatedAt       types.String   `tfsdk:"created_at"`
	Timeouts        timeouts.Value `tfsdk:"timeouts"`
}

type tlsModel struct {
	CertificatePEM         types.String `tfsdk:"certificate_pem"`
	PrivateKeyPEM          types.String `tfsdk:"private_key_pem"`
	PrivateKeyPEMWO        types.String `tfsdk:"private_key_pem_wo"`
	PrivateKeyPEMWOVersion types.Int64  `tfsdk:"private_key_pem_wo_version"`
	ClientCAPEM            types.String `tfsdk:"client_ca_pem"`
	ClientCRLPEM           types.String `tfsdk:"client_crl_pem"`
}

// writeOnlyValues are the write-only attributes. Plans and state never carry them: Create and Update read them
// from the configuration.
type writeOnlyValues struct {
	password, privateKeyPEM types.String
	// userPasswords are auth.users' passwords by user name.
	userPasswords map[string]string
}

func readWriteOnly(ctx context.Context, config tfsdk.Config) (writeOnlyValues, diag.Diagnostics) {
	var w writeOnlyValues
	diags := config.GetAttribute(ctx, path.Root("auth").AtName("password_wo"), &w.password)
	diags.Append(config.GetAttribute(ctx, path.Root("tls").AtName("private_key_pem_wo"), &w.privateKeyPEM)...)
	var d diag.Diagnostics
	w.userPasswords, d = readUserPasswords(ctx, config)
	diags.Append(d...)
	return w, diags
}

type authModel struct {
	Username          types.String `tfsdk:"username"`
	Password          types.String `tfsdk:"password"`
	PasswordWO        types.String `tfsdk:"password_wo"`
	PasswordWOVersion types.Int64  `tfsdk:"password_wo_version"`
	Users             types.List   `tfsdk:"users"`
}

// modelSource is a plan, state or configuration; modelTarget a plan or state.
type (
	modelSource interface {
		Get(ctx context.Context, target any) diag.Diagnostics
	}
	modelTarget interface {
		Set(ctx context.Context, val any) diag.Diagnostics
	}
)

// read fills m from a plan, state or configuration: the shared attributes, then the backend attribute that is
// set, through its descriptor.
func (m *proxyResourceModel) read(ctx context.Context, from modelSource) diag.Diagnostics {
	var obj types.Object
	diags := from.Get(ctx, &obj)
	if diags.HasError() {
		return diags
	}
	blocks, d := splitBackendBlocks(ctx, obj, m)
	diags.Append(d...)
	m.block = nil
	for _, desc := range backendDescriptors {
		if block, set := blocks[desc.kind()]; set {
			pm, d := desc.readPlacement(ctx, block)
			diags.Append(d...)
			m.block = pm
		}
	}
	return diags
}

// write stores m into a plan or state whose schema has type typ.
func (m *proxyResourceModel) write(ctx context.Context, to modelTarget, typ attr.Type) diag.Diagnostics {
	blocks := map[backend.Kind]any{}
	if m.block != nil {
		blocks[m.block.placement().Backend] = m.block
	}
	obj, diags := joinBackendBlocks(ctx, typ, m, blocks)
	if diags.HasError() {
		return diags
	}
	diags.Append(to.Set(ctx, obj)...)
	return diags
}

// placement maps the backend attribute onto the contract; an empty Placement when none is set.
func (m proxyResourceModel) placement() backend.Placement {
	if m.block == nil {
		return backend.Placement{}
	}
	return m.block.placement()
}

// setPlacement is the inverse of placement, used when an import leaves the placement empty.
func (m *proxyResourceModel) setPlacement(p backend.Placement) {
	if d, ok := descriptorOf(p.Backend); ok {
		m.block = d.importedPlacement(p)
	}
}

// markRulesDrifted records rules the backend no longer enforces as it was given them (backend.Instance.Drift):
// allowed_destinations, which the configuration always sets (its default is the empty set), reads back null,
// so the next plan differs from the state in a rule, and Update reconfigures the proxy in place (rulesDiffer).
func (m *proxyResourceModel) markRulesDrifted() {
	m.AllowedDestinations = types.SetNull(types.StringType)
}

// rulesDiffer tells whether the proxy's rules differ between m and prior: what Reconfigure changes in place.
// A new password_wo_version counts: the write-only password itself is never in a plan or state.
func (m proxyResourceModel) rulesDiffer(prior proxyResourceModel) bool {
	if !m.AllowedClientCIDRs.Equal(prior.AllowedClientCIDRs) || !m.AllowedDestinations.Equal(prior.AllowedDestinations) ||
		!m.AllowedPorts.Equal(prior.AllowedPorts) || !m.AllowedPrivateCIDRs.Equal(prior.AllowedPrivateCIDRs) ||
		!m.MaxConnectionsPerClient.Equal(prior.MaxConnectionsPerClient) || m.policyDiffers(prior) || !m.LogFormat.Equal(prior.LogFormat) ||
		m.metricsDiffer(prior) {
		return true
	}
	if (m.Auth == nil) != (prior.Auth == nil) {
		return true
	}
	return m.Auth != nil && (!m.Auth.Username.Equal(prior.Auth.Username) || !m.Auth.Password.Equal(prior.Auth.Password) ||
		!m.Auth.PasswordWOVersion.Equal(prior.Auth.PasswordWOVersion) || !m.Auth.Users.Equal(prior.Auth.Users))
}

// settings builds the proxy settings, taking the write-only values where the plan has none.
func (m proxyResourceModel) settings(ctx context.Context, writeOnly writeOnlyValues) (proxyconf.Settings, diag.Diagnostics) {
	var diags diag.Diagnostics
	s := proxyconf.Settings{Port: int(m.Port.ValueInt64())}
	diags.Append(m.AllowedClientCIDRs.ElementsAs(ctx, &s.AllowedClientCIDRs, false)...)
	diags.Append(m.AllowedDestinations.ElementsAs(ctx, &s.AllowedDestinations, false)...)
	var ports []int64
	diags.Append(m.AllowedPorts.ElementsAs(ctx, &ports, false)...)
	for _, p := range ports {
		s.AllowedPorts = append(s.AllowedPorts, int(p))
	}
	sort.Strings(s.AllowedClientCIDRs)
	sort.Strings(s.AllowedDestinations)
	sort.Ints(s.AllowedPorts)
	if m.Auth != nil {
		users, d := m.Auth.users(ctx, writeOnly)
		diags.Append(d...)
		s.Users = users
	}
	diags.Append(m.guardSettings(ctx, &s, writeOnly.privateKeyPEM)...)
	diags.Append(m.policySettings(ctx, &s)...)
	m.logSettings(&s)
	diags.Append(m.metricsSettings(ctx, &s)...)
	return s, diags
}

// setSettings records what the backend reports, so that a change made behind Terraform's back shows in the plan.
func (m *proxyResourceModel) setSettings(s proxyconf.Settings) diag.Diagnostics {
	var diags diag.Diagnostics
	m.Port = types.Int64Value(int64(s.Port))
	m.AllowedClientCIDRs = stringSet(s.AllowedClientCIDRs, &diags)
	m.AllowedDestinations = stringSet(s.AllowedDestinations, &diags)
	ports := make([]attr.Value, len(s.AllowedPorts))
	for i, p := range s.AllowedPorts {
		ports[i] = types.Int64Value(int64(p))
	}
	set, d := types.SetValue(types.Int64Type, ports)
	diags.Append(d...)
	m.AllowedPorts = set
	switch {
	case len(s.Users) == 0:
		m.Auth = nil
	case m.Auth == nil:
		// Imported: the backend never gives the password back.
		m.Auth = importedAuth(s.Users)
	default:
		m.Auth.setUsers(s.Users)
	}
	return diags
}

func optionalBool(b bool) types.Bool {
	if !b {
		return types.BoolNull()
	}
	return types.BoolValue(true)
}

func optionalInt(i int) types.Int64 {
	if i == 0 {
		return types.Int64Null()
	}
	return types.Int64Value(int64(i))
}

func optionalString(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

func stringSet(values []string, diags *diag.Diagnostics) types.Set {
	set, d := types.SetValue(types.StringType, stringValues(values))
	diags.Append(d...)
	return set
}

// stringSetOf is a set of the strings. Values of one element type always make a set, so there is no error to
// hand on, and no context: the framework's generic conversions want one only for their logging.
func stringSetOf(values []string) types.Set {
	return types.SetValueMust(types.StringType, stringValues(values))
}

func stringValues(values []string) []attr.Value {
	elems := make([]attr.Value, len(values))
	for i, v := range values {
		elems[i] = types.StringValue(v)
	}
	return elems
}

// stringMapOf is a map of the strings; like stringSetOf, it cannot fail.
func stringMapOf(values map[string]string) types.Map {
	elems := make(map[string]attr.Value, len(values))
	for k, v := range values {
		elems[k] = types.StringValue(v)
	}
	return types.MapValueMust(types.StringType, elems)
}

// stringsOf are the known strings of a set of strings (the schema's element type). Unknown and null elements
// are left out: a placement is built from a configuration already validated, where they cannot occur.
func stringsOf(set types.Set) []string {
	if set.IsNull() || set.IsUnknown() {
		return nil
	}
	out := make([]string, 0, len(set.Elements())) // known and empty stays empty, not null, as the framework converts it
	for _, e := range set.Elements() {
		if s, ok := e.(types.String); ok && !s.IsNull() && !s.IsUnknown() {
			out = append(out, s.ValueString())
		}
	}
	return out
}

// setInstance copies what the backend reports into the model.
func (m *proxyResourceModel) setInstance(inst backend.Instance, defaults map[string]string) diag.Diagnostics {
	var diags diag.Diagnostics
	m.ID = types.StringValue(inst.ID.String())
	m.Name = types.StringValue(inst.Name)
	m.UID = types.StringValue(inst.UID)
	m.State = types.StringValue(string(inst.State))
	m.InternalAddress = types.StringValue(inst.InternalAddress)
	// Null, not "", where the backend cannot know them: an unknown egress address is not an empty one.
	m.EgressAddress = optionalString(inst.EgressAddress)
	m.IngressAddress = optionalString(inst.IngressAddress)
	diags.Append(m.setMembers(inst)...)
	m.ProxyURL = types.StringValue(proxyURL(inst, m.TLS != nil || (inst.Proxy != nil && inst.Proxy.TLS != nil)))
	m.CreatedAt = types.StringValue("")
	if !inst.CreatedAt.IsZero() {
		m.CreatedAt = types.StringValue(inst.CreatedAt.UTC().Format(time.RFC3339))
	}
	if m.block == nil {
		placement := inst.Placement
		placement.Backend, placement.Target, placement.Scope = inst.ID.Backend, inst.ID.Target, inst.ID.Scope
		m.setPlacement(placement)
	} else {
		m.block.setResolved(inst)
	}
	if inst.Proxy != nil {
		diags.Append(m.setSettings(*inst.Proxy)...)
		diags.Append(m.setGuardSettings(*inst.Proxy)...)
		diags.Append(m.setPolicySettings(*inst.Proxy)...)
		m.setLogSettings(*inst.Proxy)
		diags.Append(m.setMetricsSettings(*inst.Proxy)...)
	}
	m.setMetricsURLs(inst)
	m.AllLabels = stringMapOf(inst.Labels)
	if m.Labels.IsNull() || m.Labels.IsUnknown() {
		m.Labels = importedLabels(inst.Labels, defaults)
	}
	return diags
}

// importedLabels are the labels a resource must have declared to produce all: those the defaults do not give.
func importedLabels(all, defaults map[string]string) types.Map {
	own := map[string]string{}
	for k, v := range all {
		if dv, ok := defaults[k]; !ok || dv != v {
			own[k] = v
		}
	}
	if len(own) == 0 {
		return types.MapNull(types.StringType)
	}
	return stringMapOf(own)
}

func proxyURL(inst backend.Instance, tls bool) string {
	if inst.InternalAddress == "" || inst.Port == 0 {
		return ""
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	host := inst.InternalAddress
	if inst.InternalName != "" {
		host = inst.InternalName
	}
	return fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(host, strconv.Itoa(inst.Port)))
}

// mergeLabels lays labels over defaults; the resource's own labels win.
func mergeLabels(defaults, labels map[string]string) map[string]string {
	out := make(map[string]string, len(defaults)+len(labels))
	for k, v := range defaults {
		out[k] = v
	}
	for k, v := range labels {
		out[k] = v
	}
	return out
}
