package provider

import (
	"context"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/datasource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
)

var _ datasource.DataSourceWithConfigure = (*proxyOrphansDataSource)(nil)

// defaultMinAge keeps proxies that are being created right now (by this or another run) out of the list.
const defaultMinAge = 10 * time.Minute

// NewProxyOrphansDataSource returns the egress_proxy_orphans data source.
func NewProxyOrphansDataSource() datasource.DataSource { return &proxyOrphansDataSource{} }

type proxyOrphansDataSource struct {
	data *providerData
}

type proxyOrphansModel struct {
	KnownIDs   types.Set      `tfsdk:"known_ids"`
	MinAge     types.String   `tfsdk:"min_age"`
	Backends   types.List     `tfsdk:"backends"`
	Orphans    []orphanModel  `tfsdk:"orphans"`
	Incomplete types.Bool     `tfsdk:"incomplete"`
	Errors     []types.String `tfsdk:"errors"`
	Timeouts   timeouts.Value `tfsdk:"timeouts"`
}

type orphanModel struct {
	ID        types.String `tfsdk:"id"`
	Name      types.String `tfsdk:"name"`
	UID       types.String `tfsdk:"uid"`
	Backend   types.String `tfsdk:"backend"`
	CreatedAt types.String `tfsdk:"created_at"`
	State     types.String `tfsdk:"state"`
	Labels    types.Map    `tfsdk:"labels"`
}

func (d *proxyOrphansDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_proxy_orphans"
}

func kindNames() []string {
	kinds := backendKinds()
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return names
}

func (d *proxyOrphansDataSource) Schema(ctx context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Lists the egress proxies this provider's `owner` made that no configuration knows any more: " +
			"instances carrying the owner's labels whose id is not in `known_ids` and that are older than `min_age`. " +
			"Scopes (hosts, zones, namespaces) that could not be listed are reported in `errors`, never silently left out.",
		Attributes: map[string]schema.Attribute{
			"known_ids": schema.SetAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Ids of the proxies that are still wanted, usually `[for p in egress_proxy.all : p.id]`.",
				Validators:          []validator.Set{setvalidator.ValueStringsAre(attribute_validator.ProviderID(idForms))}},
			"min_age": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Only instances at least this old are listed, so creates in flight are not mistaken for orphans. A Go duration; defaults to `10m`.",
				Validators:          []validator.String{attribute_validator.Duration()}},
			"backends": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Backends to list; every configured backend when unset.",
				Validators:          []validator.List{listvalidator.ValueStringsAre(stringvalidator.OneOf(kindNames()...)), listvalidator.UniqueValues()}},
			"orphans": schema.ListNestedAttribute{Computed: true, MarkdownDescription: "The orphaned instances, sorted by id.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"id":         schema.StringAttribute{Computed: true, MarkdownDescription: "Provider ID, usable in an `import` block."},
					"name":       schema.StringAttribute{Computed: true, MarkdownDescription: "Backend object name."},
					"uid":        schema.StringAttribute{Computed: true, MarkdownDescription: "UID label of the instance."},
					"backend":    schema.StringAttribute{Computed: true, MarkdownDescription: "Backend kind."},
					"created_at": schema.StringAttribute{Computed: true, MarkdownDescription: "Creation time as the backend reports it (RFC 3339); empty when unknown."},
					"state":      schema.StringAttribute{Computed: true, MarkdownDescription: "Lifecycle state."},
					"labels":     schema.MapAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "User labels."},
				}}},
			"incomplete": schema.BoolAttribute{Computed: true, MarkdownDescription: "True when some scope could not be listed: orphans there are missing from the list."},
			"errors":     schema.ListAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "One entry per scope that could not be listed, with the reason."},
		},
		Blocks: map[string]schema.Block{"timeouts": timeouts.Block(ctx)},
	}
}

func (d *proxyOrphansDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	data, diags := providerDataFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	d.data = data
}

func (d *proxyOrphansDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m proxyOrphansModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	timeout, diags := m.Timeouts.Read(ctx, defaultReadTimeout)
	resp.Diagnostics.Append(diags...)
	known, diags := knownIDSet(ctx, m.KnownIDs)
	resp.Diagnostics.Append(diags...)
	var kinds []string
	resp.Diagnostics.Append(m.Backends.ElementsAs(ctx, &kinds, false)...)
	if resp.Diagnostics.HasError() {
		return
	}
	minAge := minAgeOr(m.MinAge, defaultMinAge)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	instances, failed := d.data.listOwned(ctx, kinds)
	m.Orphans = []orphanModel{}
	for _, inst := range selectOrphans(instances, known, minAge, time.Now()) {
		o, diags := orphanFrom(ctx, inst)
		resp.Diagnostics.Append(diags...)
		m.Orphans = append(m.Orphans, o)
	}
	m.Incomplete = types.BoolValue(len(failed) > 0)
	m.Errors = []types.String{}
	for _, f := range failed {
		m.Errors = append(m.Errors, types.StringValue(scopeFailureText(f)))
	}
	if len(failed) > 0 {
		resp.Diagnostics.Append(incompleteListDiagnostic(failed, "read the data source again"))
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func orphanFrom(ctx context.Context, inst backend.Instance) (orphanModel, diag.Diagnostics) {
	labels, diags := types.MapValueFrom(ctx, types.StringType, backend.UserLabels(inst.Labels))
	created := ""
	if !inst.CreatedAt.IsZero() {
		created = inst.CreatedAt.UTC().Format(time.RFC3339)
	}
	return orphanModel{
		ID: types.StringValue(inst.ID.String()), Name: types.StringValue(inst.Name), UID: types.StringValue(inst.UID),
		Backend: types.StringValue(string(inst.ID.Backend)), CreatedAt: types.StringValue(created),
		State: types.StringValue(string(inst.State)), Labels: labels,
	}, diags
}
