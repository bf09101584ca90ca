package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	providerschema "github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
)

// kvmDescriptor is the kvm backend in the Terraform layer: its provider block is in provider_kvm.go, its
// egress_proxy attribute in proxy_resource_kvm.go.
type kvmDescriptor struct{}

func (kvmDescriptor) kind() backend.Kind     { return kvm.Kind }
func (kvmDescriptor) idForm() backend.IDForm { return kvm.IDForm }
func (kvmDescriptor) title() string          { return "KVM/libvirt" }

// servesMetrics: the proxy VM runs mtail and the Squid exporter beside Squid, their ports behind its backstop
// (metricsServer; internal/proxyconf/vmguest/metrics.go).
func (kvmDescriptor) servesMetrics() {}

// refusesMetrics: QEMU's user-mode networking forwards the proxy port alone, so nothing could scrape the
// metrics ports (the backend refuses it too: internal/backend/kvm/placement.go).
func (kvmDescriptor) refusesMetrics(ctx context.Context, placement types.Object) string {
	k, diags := readObject[kvmPlacementModel](ctx, placement)
	if !diags.HasError() && k.UserNet.ValueBool() {
		return "a proxy on kvm.user_net cannot serve metrics: QEMU forwards the proxy port alone. Use a network or a bridge, or remove metrics."
	}
	return ""
}

func (kvmDescriptor) providerSchema() providerschema.SingleNestedAttribute {
	return kvmProviderSchema()
}

func (kvmDescriptor) readProviderBlock(ctx context.Context, block types.Object, _ string) (providerBlock, diag.Diagnostics) {
	return readObject[kvmProviderModel](ctx, block)
}

func (kvmDescriptor) placementSchema() schema.SingleNestedAttribute { return kvmPlacementSchema() }
func (kvmDescriptor) targetAttribute() string                       { return "host" }

func (kvmDescriptor) readPlacement(ctx context.Context, block types.Object) (placementModel, diag.Diagnostics) {
	return readObject[kvmPlacementModel](ctx, block)
}

// importedPlacement keeps optional settings null unless the backend reports them, as a configuration that
// omits them reads.
func (kvmDescriptor) importedPlacement(p backend.Placement) placementModel {
	read, _ := p.Options.(*kvm.Options)
	k := kvm.Options{VCPUs: kvm.DefaultVCPUs, MemoryMiB: kvm.DefaultMemoryMiB, DiskGiB: kvm.DefaultDiskGiB}
	if read != nil {
		k = *read
	}
	return &kvmPlacementModel{
		Host: types.StringValue(p.Target), Instances: types.Int64Value(int64(max(k.Instances, kvm.DefaultInstances))),
		VCPUs:     types.Int64Value(int64(k.VCPUs)),
		MemoryMiB: types.Int64Value(int64(k.MemoryMiB)), DiskGiB: types.Int64Value(int64(k.DiskGiB)),
		DomainType: optionalString(k.DomainType), Pool: optionalString(k.Pool), BaseVolume: optionalString(k.BaseVolume),
		Network: optionalString(k.Network), Bridge: optionalString(k.Bridge), MAC: optionalString(k.MAC), IP: optionalString(k.IP),
		// An import cannot know where the image came from: the configuration's image is matched against
		// the base volume when the import is planned (requires_replace_except.go).
		ImageFile: types.StringNull(), ImageURL: types.StringNull(), ImageSHA256: types.StringNull(),
		UserNet: optionalBool(k.UserNet), ForwardAddress: optionalString(k.ForwardAddress),
		ForwardPort:    optionalInt(k.ForwardPort),
		WaitForAddress: types.BoolValue(k.WaitForAddress || read == nil),
		WaitForProxy:   types.BoolValue(k.WaitForProxy || read == nil),
		SyslogTarget:   optionalString(k.SyslogTarget),
	}
}

func (kvmDescriptor) egressAddressNote() string {
	return "`kvm`: the guest's own address (the same as `internal_address`) on a host `bridge` and on a libvirt network whose " +
		"`<forward>` mode is `route`, `open`, `bridge`, `passthrough`, `private`, `vepa` or `hostdev`. Null on a `nat` network " +
		"such as libvirt's `default` (destinations see one of the host's addresses, chosen by its routes), unless the network " +
		"pins its NAT to one address (`<nat><address start='X' end='X'/>`), which is then reported; null with `user_net` (the " +
		"host's address too), on an isolated network (no `<forward>`: the guest reaches nothing outside) and until the guest " +
		"has an address. The network's forward mode is read once per provider run: a change to it shows from the next plan."
}

func (kvmDescriptor) ingressAddressNote() string {
	return "`kvm`: the guest's address, the same as `internal_address`; with `user_net`, the host's forwarded address."
}

func (m *kvmProviderModel) factory() backend.Factory {
	cfg := kvmBackendConfig(m)
	return func(context.Context) (backend.Backend, error) { return kvm.New(cfg) }
}

func (m *kvmProviderModel) targets() ([]string, bool) { return kvmBackendConfig(m).HostNames(), true }

type kvmPlacementModel struct {
	Host           types.String `tfsdk:"host"`
	Instances      types.Int64  `tfsdk:"instances"`
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
	SyslogTarget   types.String `tfsdk:"syslog_target"`
}

// placement maps the attribute onto the contract; empty values take the host's defaults.
func (k *kvmPlacementModel) placement() backend.Placement {
	return backend.Placement{
		Backend: kvm.Kind, Target: k.Host.ValueString(),
		Options: &kvm.Options{
			Instances:      int(k.Instances.ValueInt64()),
			VCPUs:          int(k.VCPUs.ValueInt64()),
			MemoryMiB:      int(k.MemoryMiB.ValueInt64()),
			DiskGiB:        int(k.DiskGiB.ValueInt64()),
			DomainType:     k.DomainType.ValueString(),
			Pool:           k.Pool.ValueString(),
			BaseVolume:     k.BaseVolume.ValueString(),
			Network:        k.Network.ValueString(),
			Bridge:         k.Bridge.ValueString(),
			MAC:            k.MAC.ValueString(),
			IP:             k.IP.ValueString(),
			ImageFile:      k.ImageFile.ValueString(),
			ImageURL:       k.ImageURL.ValueString(),
			ImageSHA256:    k.ImageSHA256.ValueString(),
			UserNet:        k.UserNet.ValueBool(),
			ForwardAddress: k.ForwardAddress.ValueString(),
			ForwardPort:    int(k.ForwardPort.ValueInt64()),
			WaitForAddress: k.WaitForAddress.ValueBool(),
			WaitForProxy:   k.WaitForProxy.ValueBool(),
			SyslogTarget:   k.SyslogTarget.ValueString(),
		},
	}
}

// setResolved records the settings the host filled in where the configuration left them to it; values the
// configuration set are kept as written.
func (k *kvmPlacementModel) setResolved(inst backend.Instance) {
	p, ok := inst.Placement.Options.(*kvm.Options)
	if !ok || p == nil {
		return
	}
	if k.Instances.IsNull() || k.Instances.IsUnknown() {
		k.Instances = types.Int64Value(int64(max(p.Instances, kvm.DefaultInstances)))
	}
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
