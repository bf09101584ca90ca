// Package provider is the Terraform layer of the egress provider: schemas, models, the mapping of Terraform
// operations onto the backend contract, and diagnostics. It knows no SDK: every backend is reached through
// internal/backend.
package provider

import (
	"context"
	"fmt"
	"os"

	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework/action"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
)

// OwnerEnvVar is read when the provider block sets no owner.
const OwnerEnvVar = "EGRESS_OWNER"

var (
	_ provider.Provider                  = (*egressProvider)(nil)
	_ provider.ProviderWithListResources = (*egressProvider)(nil)
	_ provider.ProviderWithActions       = (*egressProvider)(nil)
)

// New returns the provider factory main.go serves.
func New(version string) func() provider.Provider {
	return func() provider.Provider {
		return &egressProvider{version: version, factories: defaultFactories}
	}
}

// factoriesFunc turns a provider configuration into the backends it configures. Tests swap it for one that
// returns in-memory backends.
type factoriesFunc func(cfg providerModel) map[backend.Kind]backend.Factory

type egressProvider struct {
	version   string
	factories factoriesFunc
}

// providerData is what resources and data sources receive from Configure.
type providerData struct {
	registry      *backend.Registry
	owner         string
	defaultLabels map[string]string
	// targets lists, per configured backend, the targets (hosts, clusters, projects) its block names, so a
	// resource naming another is refused at plan time. A backend missing here accepts any target.
	targets map[backend.Kind][]string
}

// providerDataFrom unpacks what Configure handed to resources and data sources; nil before configuration.
func providerDataFrom(v any) (*providerData, diag.Diagnostics) {
	var diags diag.Diagnostics
	if v == nil {
		return nil, diags
	}
	data, ok := v.(*providerData)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("got %T: this is a bug in the provider", v))
	}
	return data, diags
}

// providerModel is the provider block: its shared attributes, and the backend blocks it sets, each read by
// its backend's descriptor.
type providerModel struct {
	Owner         types.String `tfsdk:"owner"`
	DefaultLabels types.Map    `tfsdk:"default_labels"`
	// blocks are the backend blocks the configuration sets, by kind.
	blocks map[backend.Kind]providerBlock
}

// readProviderModel reads the provider configuration: the shared attributes, then each backend block that is
// set, through its descriptor.
func readProviderModel(ctx context.Context, config tfsdk.Config, version string) (providerModel, diag.Diagnostics) {
	var cfg providerModel
	var obj types.Object
	diags := config.Get(ctx, &obj)
	if diags.HasError() {
		return cfg, diags
	}
	blocks, d := splitBackendBlocks(ctx, obj, &cfg)
	diags.Append(d...)
	// After the split: reading the shared attributes replaces the whole struct, unexported fields included.
	cfg.blocks = map[backend.Kind]providerBlock{}
	for _, desc := range backendDescriptors {
		if block, set := blocks[desc.kind()]; set {
			pb, d := desc.readProviderBlock(ctx, block, version)
			diags.Append(d...)
			cfg.blocks[desc.kind()] = pb
		}
	}
	return cfg, diags
}

// defaultFactories builds the backends the configuration sets; each connects on first use.
func defaultFactories(cfg providerModel) map[backend.Kind]backend.Factory {
	factories := map[backend.Kind]backend.Factory{}
	for kind, block := range cfg.blocks {
		factories[kind] = block.factory()
	}
	return factories
}

// configuredTargets lists the targets each configured backend block names, where it names them all.
func configuredTargets(cfg providerModel) map[backend.Kind][]string {
	targets := map[backend.Kind][]string{}
	for kind, block := range cfg.blocks {
		if names, enumerated := block.targets(); enumerated {
			targets[kind] = names
		}
	}
	return targets
}

func (p *egressProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "egress"
	resp.Version = p.version
}

func (p *egressProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Creates egress proxies (Squid forward proxies with client and destination allow-lists) " +
			"on " + orList(backendTitles()) + ". Configure each backend you use with its nested " +
			"attribute; a backend that is not configured is never contacted.",
		Attributes: withBackendAttributes(map[string]schema.Attribute{
			"owner": schema.StringAttribute{
				Optional: true,
				MarkdownDescription: "Garbage-collection scope written on every object this provider makes; " +
					"`egress_proxy_orphans` lists the objects of this owner. Lowercase letters, digits, `-` and `_`, " +
					"at most 63 characters. Falls back to the `" + OwnerEnvVar + "` environment variable; one of the two is required.",
				Validators: []validator.String{attribute_validator.LabelValue(), attribute_validator.NotEmpty()},
			},
			"default_labels": schema.MapAttribute{
				Optional:            true,
				ElementType:         types.StringType,
				MarkdownDescription: "Labels added to every proxy; a resource's own `labels` win on conflicting keys. " + labelRulesDescription,
				Validators: []validator.Map{
					mapvalidator.KeysAre(attribute_validator.LabelKey()),
					mapvalidator.ValueStringsAre(attribute_validator.LabelValue()),
				},
			},
		}),
	}
}

func (p *egressProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	cfg, diags := readProviderModel(ctx, req.Config, p.version)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	if cfg.Owner.IsUnknown() {
		resp.Diagnostics.AddAttributeError(path.Root("owner"), "Unknown owner",
			"The provider's owner depends on a value known only after apply. Set it to a literal or a variable, because every plan needs it.")
		return
	}
	owner := cfg.Owner.ValueString()
	if cfg.Owner.IsNull() {
		owner = os.Getenv(OwnerEnvVar)
		if owner == "" {
			resp.Diagnostics.AddAttributeError(path.Root("owner"), "Missing owner",
				"Set owner in the provider block, or the "+OwnerEnvVar+" environment variable. The owner scopes garbage collection: "+
					"egress_proxy_orphans lists what this owner's configurations created.")
			return
		}
		if err := backend.ValidateLabelValue(owner); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("owner"), "Invalid "+OwnerEnvVar, err.Error())
			return
		}
	}
	if cfg.DefaultLabels.IsUnknown() {
		resp.Diagnostics.AddAttributeError(path.Root("default_labels"), "Unknown default labels",
			"The provider's default_labels depend on a value known only after apply. Every plan needs them: use literals or variables.")
		return
	}
	defaults := map[string]string{}
	resp.Diagnostics.Append(cfg.DefaultLabels.ElementsAs(ctx, &defaults, false)...)
	if resp.Diagnostics.HasError() {
		return
	}
	data := &providerData{registry: backend.NewRegistry(p.factories(cfg)), owner: owner, defaultLabels: defaults, targets: configuredTargets(cfg)}
	resp.ResourceData = data
	resp.DataSourceData = data
	resp.ListResourceData = data
	resp.ActionData = data
}

func (p *egressProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{NewProxyResource}
}

func (p *egressProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{NewProxyOrphansDataSource, NewBackendsDataSource}
}

// ListResources serve `terraform query` (Terraform 1.14 and later).
func (p *egressProvider) ListResources(context.Context) []func() list.ListResource {
	return []func() list.ListResource{NewProxyListResource}
}

// Actions serve `terraform apply -invoke` and action triggers (Terraform 1.14 and later).
func (p *egressProvider) Actions(context.Context) []func() action.Action {
	return []func() action.Action{NewProxyGCAction}
}

// withBackendAttributes adds each backend's provider block to the shared attributes.
func withBackendAttributes(shared map[string]schema.Attribute) map[string]schema.Attribute {
	for _, d := range backendDescriptors {
		shared[string(d.kind())] = d.providerSchema()
	}
	return shared
}

// backendTitles names the backends in prose, in the table's order.
func backendTitles() []string {
	titles := make([]string, len(backendDescriptors))
	for i, d := range backendDescriptors {
		titles[i] = d.title()
	}
	return titles
}
