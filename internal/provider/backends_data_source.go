package provider

import (
	"context"
	"maps"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

var _ datasource.DataSourceWithConfigure = (*backendsDataSource)(nil)

// NewBackendsDataSource returns the egress_backends data source.
func NewBackendsDataSource() datasource.DataSource { return &backendsDataSource{} }

type backendsDataSource struct {
	data *providerData
}

type backendsModel struct {
	Backends []backendHealthModel `tfsdk:"backends"`
	Healthy  types.Bool           `tfsdk:"healthy"`
}

type backendHealthModel struct {
	Backend types.String `tfsdk:"backend"`
	Target  types.String `tfsdk:"target"`
	Healthy types.Bool   `tfsdk:"healthy"`
	Reason  types.String `tfsdk:"reason"`
	Details types.Map    `tfsdk:"details"`

	DegradedProxies []degradedProxyModel `tfsdk:"degraded_proxies"`
	ProxyErrors     []types.String       `tfsdk:"proxy_errors"`
}

func (d *backendsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_backends"
}

func (d *backendsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = backendsSchema()
}

func backendsSchema() schema.Schema {
	target := map[string]schema.Attribute{
		"backend": schema.StringAttribute{Computed: true, MarkdownDescription: "Backend kind."},
		"target":  schema.StringAttribute{Computed: true, MarkdownDescription: "Target name as configured on the provider, or `*` for the whole backend."},
		"healthy": schema.BoolAttribute{Computed: true, MarkdownDescription: "Whether the target can take proxies now."},
		"reason":  schema.StringAttribute{Computed: true, MarkdownDescription: "Machine-readable reason, one of " + codeList(backend.HealthReasons) + "."},
		"details": schema.MapAttribute{Computed: true, ElementType: types.StringType, MarkdownDescription: "Facts the check gathered (versions, free space); `" + backend.DetailMessage + "` says in words what is wrong."},
	}
	maps.Copy(target, degradedAttributes())
	return schema.Schema{
		MarkdownDescription: "Health of every configured backend target (libvirt host, cluster, project, region), and the provider's `owner`'s " +
			"proxies there that are `Degraded`. Reading it never fails: an unhealthy or unreachable target, or one whose proxies could not be " +
			"listed, is reported as data, so it can drive a `check` block.",
		Attributes: map[string]schema.Attribute{
			"healthy": schema.BoolAttribute{Computed: true, MarkdownDescription: "True when every target is healthy."},
			"backends": schema.ListNestedAttribute{Computed: true, MarkdownDescription: "One entry per target, sorted by backend and target.",
				NestedObject: schema.NestedAttributeObject{Attributes: target}},
		},
	}
}

func (d *backendsDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	data, diags := providerDataFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	d.data = data
}

func (d *backendsDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	// The health checks bound themselves; the proxies' listing and reads get proxiesReadTimeout.
	proxiesCtx, cancel := context.WithTimeout(ctx, proxiesReadTimeout)
	defer cancel()
	m := backendsModel{Backends: []backendHealthModel{}, Healthy: types.BoolValue(true)}
	for _, kind := range d.data.registry.Configured() {
		health := d.check(ctx, kind)
		targets := make([]string, len(health))
		for i, h := range health {
			targets[i] = h.Target
		}
		proxies := d.data.proxiesByTarget(proxiesCtx, kind, targets)
		for _, h := range health {
			details, diags := types.MapValueFrom(ctx, types.StringType, h.Details)
			resp.Diagnostics.Append(diags...)
			m.Backends = append(m.Backends, backendHealthModel{
				Backend: types.StringValue(string(kind)), Target: types.StringValue(h.Target),
				Healthy: types.BoolValue(h.Healthy), Reason: types.StringValue(h.Reason), Details: details,
				DegradedProxies: proxies[h.Target].degraded, ProxyErrors: proxies[h.Target].errors,
			})
			if !h.Healthy {
				m.Healthy = types.BoolValue(false)
			}
		}
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (d *backendsDataSource) check(ctx context.Context, kind backend.Kind) []backend.Health {
	b, err := d.data.registry.Backend(ctx, kind)
	if err != nil {
		return []backend.Health{{Target: "*", Reason: backend.HealthBackendUnavailable, Details: map[string]string{backend.DetailMessage: err.Error()}}}
	}
	c, ok := b.(backend.Checker)
	if !ok {
		return []backend.Health{{Target: "*", Healthy: true, Reason: backend.HealthNoHealthCheck, Details: map[string]string{}}}
	}
	health := c.Check(ctx)
	for i := range health {
		if health[i].Details == nil {
			health[i].Details = map[string]string{}
		}
	}
	return health
}
