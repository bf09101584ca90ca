package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/boolvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// gcpPlacementModel is the resource's gcp = { ... } attribute.
type gcpPlacementModel struct {
	Project           types.String `tfsdk:"project"`
	Zone              types.String `tfsdk:"zone"`
	MachineType       types.String `tfsdk:"machine_type"`
	Image             types.String `tfsdk:"image"`
	Network           types.String `tfsdk:"network"`
	Subnetwork        types.String `tfsdk:"subnetwork"`
	NetworkTags       types.Set    `tfsdk:"network_tags"`
	ServiceAccount    types.String `tfsdk:"service_account"`
	Scopes            types.Set    `tfsdk:"scopes"`
	Preemptible       types.Bool   `tfsdk:"preemptible"`
	Spot              types.Bool   `tfsdk:"spot"`
	StaticEgressIP    types.Bool   `tfsdk:"static_egress_ip"`
	EgressAddressName types.String `tfsdk:"egress_address_name"`
	WaitForProxy      types.Bool   `tfsdk:"wait_for_proxy"`
	CloudLogging      types.Bool   `tfsdk:"cloud_logging"`
	// The VM hardening, on unless opted out (gcp.DefaultShieldedVM and friends).
	ShieldedVM          types.Bool `tfsdk:"shielded_vm"`
	OSLogin             types.Bool `tfsdk:"os_login"`
	AllowProjectSSHKeys types.Bool `tfsdk:"allow_project_ssh_keys"`
	// Instances is how many VMs serve the proxy behind one address (gcp.Options.Instances).
	Instances types.Int64 `tfsdk:"instances"`
}

func gcpPlacementSchema() schema.SingleNestedAttribute {
	keep, gcpPath := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}, path.MatchRoot("gcp")
	return schema.SingleNestedAttribute{
		Optional: true,
		MarkdownDescription: "Run the proxy as a Compute Engine VM, configured by a startup script from its metadata. " +
			"Changing anything here but `wait_for_proxy` and `cloud_logging` replaces the proxy, but for `instances` and `image` of a proxy of several VMs, which change in place. The proxy's rules and TLS certificate chain go into the " +
			"VM's metadata, which Compute Engine limits (each value 256 KiB, all of it less than 512 KB): a configuration that would not fit " +
			"fails at plan time.",
		PlanModifiers: []planmodifier.Object{requiresReplaceExcept("wait_for_proxy", "cloud_logging").unlessSame("instances", severalInPlace(gcp.DefaultInstances)).
			unlessSame("image", rolledWhenSeveral)},
		Validators: []validator.Object{gcpMetadataFits{}},
		Attributes: map[string]schema.Attribute{
			"project": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keep,
				MarkdownDescription: "Project ID; the provider's `gcp.project` when unset.", Validators: []validator.String{attribute_validator.Name()}},
			"zone": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keep,
				MarkdownDescription: "Zone, such as `europe-west1-b`; the project's `default_zone` when unset.", Validators: []validator.String{gcpZone()}},
			"machine_type": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(gcp.DefaultMachineType),
				MarkdownDescription: "Machine type. Defaults to `" + gcp.DefaultMachineType + "`.", Validators: []validator.String{attribute_validator.Name()}},
			"image": gcpImageSchema(),
			"network": schema.StringAttribute{Optional: true,
				MarkdownDescription: "VPC network, as `global/networks/NAME` or a full URL; `" + gcp.DefaultNetwork + "` when neither this nor `subnetwork` is set.",
				Validators:          []validator.String{attribute_validator.NotEmpty()}},
			"subnetwork": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Subnetwork, as `regions/REGION/subnetworks/NAME` or a full URL.", Validators: []validator.String{attribute_validator.NotEmpty()}},
			"network_tags": schema.SetAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Network tags on the VM, for your firewall rules (allow `allowed_client_cidrs` to the proxy port).",
				Validators:          []validator.Set{setvalidator.ValueStringsAre(attribute_validator.Name())}},
			"service_account": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Service account email of the VM, or `" + gcp.DefaultServiceAccount + "` for the project's default compute service account. " +
					"None when unset: the proxy needs no Google API.",
				Validators: []validator.String{gcpServiceAccount()}},
			"scopes": schema.SetAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "OAuth scopes of the service account; `cloud-platform` when unset, the one scope with which the VM reads its secrets from Secret Manager (what the account may do is then its IAM roles'). Scopes without `cloud-platform` keep the secrets in instance metadata.",
				Validators:          []validator.Set{setvalidator.AlsoRequires(gcpPath.AtName("service_account"))}},
			"preemptible": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				MarkdownDescription: "Preemptible VM. Defaults to `false`."},
			"spot": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				MarkdownDescription: "Spot VM (stopped when reclaimed). Defaults to `false`.",
				Validators:          []validator.Bool{boolvalidator.ConflictsWith(gcpPath.AtName("preemptible"))}},
			"static_egress_ip": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				MarkdownDescription: "Reserve a regional static external address `<name>-ip` for the proxy's egress. Defaults to `false`. It is named after `name`, " +
					"which must be set: when the proxy is replaced, the address is kept and the new VM of the same name takes it, so the egress " +
					"address does not change; it is released when the proxy is destroyed. An address left by a replacement that never finished is " +
					"listed by `egress_proxy_orphans`. To keep an address beyond the proxy's life, reserve it yourself and set `egress_address_name`.",
				Validators: []validator.Bool{attribute_validator.TrueRequiresValid(path.MatchRoot("name"),
					"the reserved address is named after the proxy so that a replacement of the proxy keeps it, and a name derived from `uid` changes with every replacement", gcp.ValidateStaticAddressOwner)}},
			"egress_address_name": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Name of a regional static external address you reserved, to use as the egress address. The provider never releases it.",
				Validators:          []validator.String{attribute_validator.Name(), stringvalidator.ConflictsWith(gcpPath.AtName("static_egress_ip"))}},
			"wait_for_proxy": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				MarkdownDescription: "Wait, within the create timeout, until the VM reports (guest attribute `egress/applied`) that Squid runs its config. " +
					"Defaults to `false`: the apply returns once the VM runs, while Squid may still be installing."},
			"cloud_logging": schema.BoolAttribute{Optional: true,
				MarkdownDescription: "Send the access log to Cloud Logging, one entry per request in the log `" + gcp.CloudLogID("NAME") + "` (`NAME` the proxy's `name`), " +
					"written as the VM's `service_account`, which must hold `" + gcp.LogWriterRole + "` on the project. Off when unset (or `false`): Cloud Logging " +
					"charges for what a project ingests beyond its free allotment, and a busy proxy logs a line per request. Changes in place: the VM starts " +
					"or stops shipping within seconds. See the access log guide for how to read it.",
				Validators: []validator.Bool{
					attribute_validator.TrueRequiresValid(gcpPath.AtName("service_account"),
						"the access log is written to Cloud Logging as the VM's service account, and a VM without one has no identity to write with", gcp.ValidateServiceAccount),
					gcpCloudLoggingScopes{},
				}},
			"instances": gcpInstancesSchema(),
			"shielded_vm": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(gcp.DefaultShieldedVM),
				MarkdownDescription: fmt.Sprintf("Shielded VM: secure boot, virtual TPM and integrity monitoring. Defaults to `%t`. "+
					"Set `false` for an image that does not support it (one without UEFI); the project's defaults then apply.", gcp.DefaultShieldedVM)},
			"os_login": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(gcp.DefaultOSLogin),
				MarkdownDescription: fmt.Sprintf("Set the metadata `%s=TRUE`: SSH access to the VM is granted through IAM (OS Login), "+
					"never by keys in metadata. Defaults to `%t`. With `false` the provider sets nothing and the project's metadata decides.",
					gcp.MetadataEnableOSLogin, gcp.DefaultOSLogin)},
			"allow_project_ssh_keys": schema.BoolAttribute{Optional: true, Computed: true, Default: booldefault.StaticBool(gcp.DefaultAllowProjectSSHKeys),
				MarkdownDescription: fmt.Sprintf("Let SSH keys in the project's metadata reach the VM. Defaults to `%t`, which sets the metadata "+
					"`%s=TRUE`; with `true` the provider sets nothing and the project's metadata decides. Needs `os_login = false`: "+
					"with OS Login, keys in metadata are ignored.", gcp.DefaultAllowProjectSSHKeys, gcp.MetadataBlockProjectSSHKeys),
				Validators: []validator.Bool{attribute_validator.TrueRequiresFalse(gcpPath.AtName("os_login"), gcp.DefaultOSLogin,
					"with OS Login, Compute Engine ignores SSH keys in metadata, so project keys would still not reach the VM")}},
		},
	}
}

// gcpImageSchema is gcp.image: the boot image, rolled in place over a proxy of several VMs (rolledWhenSeveral).
func gcpImageSchema() schema.StringAttribute {
	return schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(gcp.DefaultImage),
		MarkdownDescription: "Boot image or image family; defaults to `" + gcp.DefaultImage + "`. " +
			"Stock Debian and Ubuntu images run the startup script; an image with cloud-init but not the guest environment " +
			"runs it from `user-data`. An image without UEFI support needs `shielded_vm = false`. Changing it replaces a proxy of one VM; " +
			"a proxy of several keeps its address and gets the new image one VM at a time, a VM of the new image serving before an old one goes " +
			"(the high availability guide).",
		Validators: []validator.String{attribute_validator.NotEmpty()}}
}

// gcpInstancesSchema is gcp.instances: how many VMs serve the proxy (gcp.Options.Instances).
func gcpInstancesSchema() schema.Int64Attribute {
	return schema.Int64Attribute{Optional: true, Computed: true, PlanModifiers: []planmodifier.Int64{instancesDefault{def: gcp.DefaultInstances}},
		MarkdownDescription: fmt.Sprintf("How many VMs serve the proxy, from 1 to %d. Defaults to `%d`: one VM, whose addresses are the proxy's. "+
			"With more, the VMs are named `NAME-1`, `NAME-2`, ... and spread over the zones of `zone`'s region (round-robin in the order "+
			"Compute Engine lists them, from `zone`), each with its own egress address (`egress_addresses`), behind an internal passthrough "+
			"Network Load Balancer whose address is `internal_address`: a regional health check on the health port (%d), an unmanaged "+
			"instance group per zone, a regional backend service and a forwarding rule on the proxy's port, all named `NAME`. "+
			"`static_egress_ip` and `egress_address_name` are for one VM. A change between two counts above one is made in place: new VMs join "+
			"behind the same address (the backend service gains the groups of zones it did not use), and the highest-numbered ones leave their "+
			"group before they are deleted; a change to or from one VM replaces the proxy. See the high availability guide for the "+
			"firewall rules the health checks need and what the load balancer costs.", gcp.MaxInstances, gcp.DefaultInstances, proxyconf.DefaultHealthPort),
		Validators: []validator.Int64{int64validator.Between(1, gcp.MaxInstances), gcpInstancesFit{}}}
}

// gcpMetadataFits refuses at plan time a proxy whose settings would not fit in a VM's metadata: it renders
// what Create would write (gcp.CheckMetadata) from the configuration's rules and TLS settings, and names the
// attribute that weighs most. Values not known yet are checked at the plan that knows them.
type gcpMetadataFits struct {
	// check is gcp.CheckMetadata unless a test stands in for it.
	check func(proxyconf.Settings, gcp.Options) error
}

var _ validator.Object = gcpMetadataFits{}

const gcpMetadataFitsDescription = "the proxy's rules and TLS certificate chain fit Compute Engine's metadata limits"

func (gcpMetadataFits) Description(context.Context) string { return gcpMetadataFitsDescription }

func (gcpMetadataFits) MarkdownDescription(context.Context) string { return gcpMetadataFitsDescription }

// gcpMetadataInputs are the attributes the metadata's size depends on.
var gcpMetadataInputs = []string{"port", "allowed_client_cidrs", "allowed_destinations", "allowed_ports", "allowed_private_cidrs",
	"max_connections_per_client", "auth", "tls"}

func (v gcpMetadataFits) ValidateObject(ctx context.Context, req validator.ObjectRequest, resp *validator.ObjectResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	for _, name := range gcpMetadataInputs {
		v, _, err := tftypes.WalkAttributePath(req.Config.Raw, tftypes.NewAttributePath().WithAttributeName(name))
		if tv, ok := v.(tftypes.Value); err != nil || !ok || !tv.IsFullyKnown() {
			return
		}
	}
	var m proxyResourceModel
	if diags := m.read(ctx, req.Config); diags.HasError() {
		return
	}
	g, ok := m.block.(*gcpPlacementModel)
	if !ok {
		return
	}
	writeOnly, diags := readWriteOnly(ctx, req.Config)
	settings, more := m.settings(ctx, writeOnly)
	if diags.HasError() || more.HasError() {
		return // what is wrong with the settings themselves, their own validators report
	}
	// Validation sees the configuration before the schema's defaults: the port's and the image's apply here too
	// (an empty list of ports already renders as the default's 443).
	if m.Port.IsNull() {
		settings.Port = proxyconf.DefaultPort
	}
	pl := g.options()
	if pl.Image == "" {
		pl.Image = gcp.DefaultImage
	}
	check := v.check
	if check == nil {
		check = gcp.CheckMetadata
	}
	if at, detail, ok := gcpMetadataLimitDiagnostic(check(settings, *pl)); ok {
		resp.Diagnostics.AddAttributeError(at, "Proxy settings too large for Compute Engine metadata", detail)
	}
}

// gcpMetadataLimitDiagnostic names the attribute a metadata limit error is about, and says what to do. ok is
// false for any other error (settings that do not render are reported by their own validators).
func gcpMetadataLimitDiagnostic(err error) (at path.Path, detail string, ok bool) {
	var limit *gcp.MetadataLimitError
	if !errors.As(err, &limit) {
		return path.Empty(), "", false
	}
	at = path.Root("allowed_destinations")
	if limit.TLS {
		at = path.Root("tls").AtName("certificate_pem")
	}
	return at, fmt.Sprintf("Attribute %s: %s. Compute Engine limits each metadata value to %d bytes and all of a VM's metadata "+
		"to less than %d bytes; the rules are written twice (squid.conf and the stored settings), the certificate chain once.",
		at, limit, gcp.MaxMetadataValueBytes, gcp.MaxMetadataTotalBytes), true
}

// placement maps the attribute onto the contract; empty values take the backend's defaults.
func (g *gcpPlacementModel) placement() backend.Placement {
	return backend.Placement{Backend: gcp.Kind, Target: g.Project.ValueString(), Scope: g.Zone.ValueString(), Options: g.options()}
}

// options are the attribute's settings as the backend takes them.
func (g *gcpPlacementModel) options() *gcp.Options {
	p := &gcp.Options{
		MachineType: g.MachineType.ValueString(), Image: g.Image.ValueString(), Network: g.Network.ValueString(),
		Subnetwork: g.Subnetwork.ValueString(), ServiceAccount: g.ServiceAccount.ValueString(),
		Preemptible: g.Preemptible.ValueBool(), Spot: g.Spot.ValueBool(), StaticEgressIP: g.StaticEgressIP.ValueBool(),
		EgressAddressName: g.EgressAddressName.ValueString(), WaitForProxy: g.WaitForProxy.ValueBool(),
		CloudLogging:        g.CloudLogging.ValueBool(),
		DisableShieldedVM:   !boolOr(g.ShieldedVM, gcp.DefaultShieldedVM),
		DisableOSLogin:      !boolOr(g.OSLogin, gcp.DefaultOSLogin),
		AllowProjectSSHKeys: boolOr(g.AllowProjectSSHKeys, gcp.DefaultAllowProjectSSHKeys),
		Instances:           int(int64Or(g.Instances, gcp.DefaultInstances)),
	}
	p.NetworkTags, p.Scopes = stringsOf(g.NetworkTags), stringsOf(g.Scopes)
	return p
}

// gcpPlacementFrom builds the attribute of an imported proxy from what the backend read back. Settings that
// equal the defaults stay null, as a configuration that omits them reads.
func gcpPlacementFrom(p backend.Placement) *gcpPlacementModel {
	g := gcp.Options{}
	if read, ok := p.Options.(*gcp.Options); ok && read != nil {
		g = *read
	}
	def := func(v, d string) types.String {
		if v == "" {
			return types.StringValue(d)
		}
		return types.StringValue(v)
	}
	network := types.StringNull()
	if g.Network != "" && g.Network != gcp.DefaultNetwork {
		network = types.StringValue(g.Network)
	}
	set := func(v []string) types.Set {
		if len(v) == 0 {
			return types.SetNull(types.StringType)
		}
		return stringSetOf(v)
	}
	scopes := set(g.Scopes)
	// A VM made with the earlier default reads back as having the default, so that no plan replaces it for
	// a default that changed under it.
	if g.ServiceAccount == "" || sameStrings(g.Scopes, gcp.DefaultScopes) || sameStrings(g.Scopes, gcp.LegacyDefaultScopes) {
		scopes = types.SetNull(types.StringType)
	}
	return &gcpPlacementModel{
		Project: types.StringValue(p.Target), Zone: types.StringValue(p.Scope),
		MachineType: def(g.MachineType, gcp.DefaultMachineType), Image: def(g.Image, gcp.DefaultImage),
		Network: network, Subnetwork: optionalString(g.Subnetwork), NetworkTags: set(g.NetworkTags),
		ServiceAccount: optionalString(g.ServiceAccount), Scopes: scopes,
		Preemptible: types.BoolValue(g.Preemptible), Spot: types.BoolValue(g.Spot), StaticEgressIP: types.BoolValue(g.StaticEgressIP),
		EgressAddressName: optionalString(g.EgressAddressName), WaitForProxy: types.BoolValue(g.WaitForProxy),
		// Null when off, as a configuration that leaves it unset reads (and as a state from before it existed).
		CloudLogging: optionalTrue(g.CloudLogging),
		ShieldedVM:   types.BoolValue(!g.DisableShieldedVM), OSLogin: types.BoolValue(!g.DisableOSLogin),
		AllowProjectSSHKeys: types.BoolValue(g.AllowProjectSSHKeys),
		Instances:           types.Int64Value(int64(max(gcp.DefaultInstances, g.Instances))),
	}
}

// setResolved records the project and zone the backend chose where the configuration left them unset, and
// the hardening the VM has where the state has none: a state written before these attributes existed then
// shows what the VM is, and a plan that wants otherwise says so (and replaces it) instead of guessing.
func (g *gcpPlacementModel) setResolved(inst backend.Instance) {
	id := inst.ID
	if g.Project.IsUnknown() || g.Project.IsNull() {
		g.Project = types.StringValue(id.Target)
	}
	if g.Zone.IsUnknown() || g.Zone.IsNull() {
		g.Zone = types.StringValue(id.Scope)
	}
	read, ok := inst.Placement.Options.(*gcp.Options)
	if !ok || read == nil {
		return
	}
	fill := func(v *types.Bool, actual bool) {
		if v.IsNull() || v.IsUnknown() {
			*v = types.BoolValue(actual)
		}
	}
	fill(&g.ShieldedVM, !read.DisableShieldedVM)
	fill(&g.OSLogin, !read.DisableOSLogin)
	fill(&g.AllowProjectSSHKeys, read.AllowProjectSSHKeys)
	if g.Instances.IsUnknown() {
		g.Instances = types.Int64Value(int64(max(gcp.DefaultInstances, read.Instances)))
	}
}

// int64Or is v's value, or def where v is null or unknown.
func int64Or(v types.Int64, def int64) int64 {
	if v.IsNull() || v.IsUnknown() {
		return def
	}
	return v.ValueInt64()
}

// optionalTrue is true, or null for false: an optional switch that is off unless set.
func optionalTrue(v bool) types.Bool {
	if v {
		return types.BoolValue(true)
	}
	return types.BoolNull()
}

// boolOr is v's value, or def where v is null or unknown.
func boolOr(v types.Bool, def bool) bool {
	if v.IsNull() || v.IsUnknown() {
		return def
	}
	return v.ValueBool()
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]bool{}
	for _, s := range a {
		seen[s] = true
	}
	for _, s := range b {
		if !seen[s] {
			return false
		}
	}
	return true
}
