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
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

type proxyResourceModel struct {
	Kubernetes *kubernetesPlacementModel `tfsdk:"kubernetes"`
	GCP        *gcpPlacementModel        `tfsdk:"gcp"`
	KVM        *kvmPlacementModel        `tfsdk:"kvm"`

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

	ID              types.String   `tfsdk:"id"`
	UID             types.String   `tfsdk:"uid"`
	AllLabels       types.Map      `tfsdk:"all_labels"`
	State           types.String   `tfsdk:"state"`
	InternalAddress types.String   `tfsdk:"internal_address"`
	EgressAddress   types.String   `tfsdk:"egress_address"`
	IngressAddress  types.String   `tfsdk:"ingress_address"`
	ProxyURL        types.String   `tfsdk:"proxy_url"`
	CreatedAt       types.String   `tfsdk:"created_at"`
	Timeouts        timeouts.Value `tfsdk:"timeouts"`
}

type kubernetesPlacementModel struct {
	Cluster   types.String `tfsdk:"cluster"`
	Namespace types.String `tfsdk:"namespace"`
	// The rest is in proxy_resource_kubernetes.go.
	kubernetesPlacementExtra
}

type kvmPlacementModel struct {
	Host           types.String `tfsdk:"host"`
	VCPUs          types.Int64  `tfsdk:"vcpus"`
	MemoryMiB      types.Int64  `tfsdk:"memory_mib"`
	DiskGiB        types.Int64  `tfsdk:"disk_gib"`
	DomainType     types.String `tfsdk:"domain_type"`
	Pool           types.String `tfsdk:"pool"`
	BaseVolume     types.String `tfsdk:"base_volume"`
	Network        types.String `tfsdk:"network"`
	Bridge         types.String `tfsdk:"bridge"`
	MAC            types.String `tfsdk:"mac"`
	IP             types.String `tfsdk:"ip"`
	ImageFile      types.String `tfsdk:"image_file"`
	ImageURL       types.String `tfsdk:"image_url"`
	ImageSHA256    types.String `tfsdk:"image_sha256"`
	UserNet        types.Bool   `tfsdk:"user_net"`
	ForwardAddress types.String `tfsdk:"forward_address"`
	ForwardPort    types.Int64  `tfsdk:"forward_port"`
	WaitForAddress types.Bool   `tfsdk:"wait_for_address"`
	WaitForProxy   types.Bool   `tfsdk:"wait_for_proxy"`
}

type tlsModel struct {
	CertificatePEM         types.String `tfsdk:"certificate_pem"`
	PrivateKeyPEM          types.String `tfsdk:"private_key_pem"`
	PrivateKeyPEMWO        types.String `tfsdk:"private_key_pem_wo"`
	PrivateKeyPEMWOVersion types.Int64  `tfsdk:"private_key_pem_wo_version"`
}

// writeOnlyValues are the write-only attributes. Plans and state never carry them: Create and Update read them
// from the configuration.
type writeOnlyValues struct {
	password, privateKeyPEM types.String
}

func readWriteOnly(ctx context.Context, config tfsdk.Config) (writeOnlyValues, diag.Diagnostics) {
	var w writeOnlyValues
	diags := config.GetAttribute(ctx, path.Root("auth").AtName("password_wo"), &w.password)
	diags.Append(config.GetAttribute(ctx, path.Root("tls").AtName("private_key_pem_wo"), &w.privateKeyPEM)...)
	return w, diags
}

type authModel struct {
	Username          types.String `tfsdk:"username"`
	Password          types.String `tfsdk:"password"`
	PasswordWO        types.String `tfsdk:"password_wo"`
	PasswordWOVersion types.Int64  `tfsdk:"password_wo_version"`
}

// placement maps the one configured backend attribute onto the contract.
func (m proxyResourceModel) placement() backend.Placement {
	switch {
	case m.Kubernetes != nil:
		return backend.Placement{Backend: backend.KindKubernetes, Target: m.Kubernetes.Cluster.ValueString(), Scope: m.Kubernetes.Namespace.ValueString(),
			Kubernetes: m.Kubernetes.backendPlacement()}
	case m.GCP != nil:
		return m.GCP.placement()
	case m.KVM != nil:
		return backend.Placement{
			Backend: backend.KindKVM, Target: m.KVM.Host.ValueString(),
			KVM: &backend.KVMPlacement{
				VCPUs:          int(m.KVM.VCPUs.ValueInt64()),
				MemoryMiB:      int(m.KVM.MemoryMiB.ValueInt64()),
				DiskGiB:        int(m.KVM.DiskGiB.ValueInt64()),
				DomainType:     m.KVM.DomainType.ValueString(),
				Pool:           m.KVM.Pool.ValueString(),
				BaseVolume:     m.KVM.BaseVolume.ValueString(),
				Network:        m.KVM.Network.ValueString(),
				Bridge:         m.KVM.Bridge.ValueString(),
				MAC:            m.KVM.MAC.ValueString(),
				IP:             m.KVM.IP.ValueString(),
				ImageFile:      m.KVM.ImageFile.ValueString(),
				ImageURL:       m.KVM.ImageURL.ValueString(),
				ImageSHA256:    m.KVM.ImageSHA256.ValueString(),
				UserNet:        m.KVM.UserNet.ValueBool(),
				ForwardAddress: m.KVM.ForwardAddress.ValueString(),
				ForwardPort:    int(m.KVM.ForwardPort.ValueInt64()),
				WaitForAddress: m.KVM.WaitForAddress.ValueBool(),
				WaitForProxy:   m.KVM.WaitForProxy.ValueBool(),
			},
		}
	default:
		// ExactlyOneOf rejects such a configuration at plan time; nothing is guessed here.
		return backend.Placement{}
	}
}

// setPlacement is the inverse of placement, used when an import leaves the placement empty.
func (m *proxyResourceModel) setPlacement(p backend.Placement) {
	switch p.Backend {
	case backend.KindKubernetes:
		m.Kubernetes = &kubernetesPlacementModel{Cluster: types.StringValue(p.Target), Namespace: types.StringValue(p.Scope),
			kubernetesPlacementExtra: kubernetesPlacementFrom(p.Kubernetes)}
	case backend.KindGCP:
		m.GCP = gcpPlacementFrom(p)
	case backend.KindKVM:
		k := backend.KVMPlacement{VCPUs: kvm.DefaultVCPUs, MemoryMiB: kvm.DefaultMemoryMiB, DiskGiB: kvm.DefaultDiskGiB}
		if p.KVM != nil {
			k = *p.KVM
		}
		// Optional settings stay null unless the backend reports them, as a configuration that omits them reads.
		m.KVM = &kvmPlacementModel{
			Host: types.StringValue(p.Target), VCPUs: types.Int64Value(int64(k.VCPUs)),
			MemoryMiB: types.Int64Value(int64(k.MemoryMiB)), DiskGiB: types.Int64Value(int64(k.DiskGiB)),
			DomainType: optionalString(k.DomainType), Pool: optionalString(k.Pool), BaseVolume: optionalString(k.BaseVolume),
			Network: optionalString(k.Network), Bridge: optionalString(k.Bridge), MAC: optionalString(k.MAC), IP: optionalString(k.IP),
			// An import cannot know where the image came from: the configuration's image is matched against
			// the base volume when the import is planned (requires_replace_except.go).
			ImageFile: types.StringNull(), ImageURL: types.StringNull(), ImageSHA256: types.StringNull(),
			UserNet: optionalBool(k.UserNet), ForwardAddress: optionalString(k.ForwardAddress),
			ForwardPort:    optionalInt(k.ForwardPort),
			WaitForAddress: types.BoolValue(k.WaitForAddress || p.KVM == nil),
			WaitForProxy:   types.BoolValue(k.WaitForProxy || p.KVM == nil),
		}
	}
}

// rulesDiffer tells whether the proxy's rules differ between m and prior: what Reconfigure changes in place.
// A new password_wo_version counts: the write-only password itself is never in a plan or state.
func (m proxyResourceModel) rulesDiffer(prior proxyResourceModel) bool {
	if !m.AllowedClientCIDRs.Equal(prior.AllowedClientCIDRs) || !m.AllowedDestinations.Equal(prior.AllowedDestinations) ||
		!m.AllowedPorts.Equal(prior.AllowedPorts) || !m.AllowedPrivateCIDRs.Equal(prior.AllowedPrivateCIDRs) ||
		!m.MaxConnectionsPerClient.Equal(prior.MaxConnectionsPerClient) {
		return true
	}
	if (m.Auth == nil) != (prior.Auth == nil) {
		return true
	}
	return m.Auth != nil && (!m.Auth.Username.Equal(prior.Auth.Username) || !m.Auth.Password.Equal(prior.Auth.Password) ||
		!m.Auth.PasswordWOVersion.Equal(prior.Auth.PasswordWOVersion))
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
		password := m.Auth.Password.ValueString()
		if m.Auth.Password.IsNull() {
			password = writeOnly.password.ValueString()
		}
		s.Auth = &proxyconf.BasicAuth{Username: m.Auth.Username.ValueString(), Password: password}
	}
	diags.Append(m.guardSettings(ctx, &s, writeOnly.privateKeyPEM)...)
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
	case s.Auth == nil:
		m.Auth = nil
	case m.Auth == nil:
		// Imported: the backend never gives the password back.
		m.Auth = &authModel{Username: types.StringValue(s.Auth.Username), Password: types.StringNull(),
			PasswordWO: types.StringNull(), PasswordWOVersion: types.Int64Null()}
	default:
		m.Auth.Username = types.StringValue(s.Auth.Username)
	}
	return diags
}

// setResolved records the settings the host filled in where the configuration left them to it; values the
// configuration set are kept as written.
func (k *kvmPlacementModel) setResolved(p backend.KVMPlacement) {
	for _, f := range []struct {
		attr     *types.String
		resolved string
	}{
		{&k.DomainType, p.DomainType}, {&k.Pool, p.Pool}, {&k.BaseVolume, p.BaseVolume}, {&k.Network, p.Network}, {&k.MAC, p.MAC},
	} {
		if f.attr.IsNull() || f.attr.IsUnknown() {
			*f.attr = optionalString(f.resolved)
		}
	}
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
	elems := make([]attr.Value, len(values))
	for i, v := range values {
		elems[i] = types.StringValue(v)
	}
	set, d := types.SetValue(types.StringType, elems)
	diags.Append(d...)
	return set
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
	m.ProxyURL = types.StringValue(proxyURL(inst, m.TLS != nil || (inst.Proxy != nil && inst.Proxy.TLS != nil)))
	m.CreatedAt = types.StringValue("")
	if !inst.CreatedAt.IsZero() {
		m.CreatedAt = types.StringValue(inst.CreatedAt.UTC().Format(time.RFC3339))
	}
	if m.Kubernetes == nil && m.GCP == nil && m.KVM == nil {
		placement := inst.Placement
		placement.Backend, placement.Target, placement.Scope = inst.ID.Backend, inst.ID.Target, inst.ID.Scope
		m.setPlacement(placement)
	} else if m.KVM != nil && inst.Placement.KVM != nil {
		m.KVM.setResolved(*inst.Placement.KVM)
	} else if m.GCP != nil {
		m.GCP.setResolved(inst)
	}
	if inst.Proxy != nil {
		diags.Append(m.setSettings(*inst.Proxy)...)
		diags.Append(m.setGuardSettings(*inst.Proxy)...)
	}
	all, d := types.MapValueFrom(context.Background(), types.StringType, inst.Labels)
	diags.Append(d...)
	m.AllLabels = all
	if m.Labels.IsNull() || m.Labels.IsUnknown() {
		m.Labels = importedLabels(inst.Labels, defaults, &diags)
	}
	return diags
}

// importedLabels are the labels a resource must have declared to produce all: those the defaults do not give.
func importedLabels(all, defaults map[string]string, diags *diag.Diagnostics) types.Map {
	own := map[string]string{}
	for k, v := range all {
		if dv, ok := defaults[k]; !ok || dv != v {
			own[k] = v
		}
	}
	if len(own) == 0 {
		return types.MapNull(types.StringType)
	}
	m, d := types.MapValueFrom(context.Background(), types.StringType, own)
	diags.Append(d...)
	return m
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
