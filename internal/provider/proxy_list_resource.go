package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/list"
	"github.com/hashicorp/terraform-plugin-framework/list/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
)

var (
	_ list.ListResourceWithConfigure      = (*proxyListResource)(nil)
	_ list.ListResourceWithValidateConfig = (*proxyListResource)(nil)
)

// NewProxyListResource returns the egress_proxy list resource, which `terraform query` uses to find the
// owner's proxies, orphans first of all, and to write the import and resource blocks that adopt them.
func NewProxyListResource() list.ListResource { return &proxyListResource{} }

type proxyListResource struct {
	data *providerData
}

type proxyListModel struct {
	Backends     types.List   `tfsdk:"backends"`
	OrphanedOnly types.Bool   `tfsdk:"orphaned_only"`
	KnownIDs     types.List   `tfsdk:"known_ids"`
	MinAge       types.String `tfsdk:"min_age"`
	Labels       types.Map    `tfsdk:"labels"`
}

func (l *proxyListResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_proxy"
}

func (l *proxyListResource) ListResourceConfigSchema(_ context.Context, _ list.ListResourceSchemaRequest, resp *list.ListResourceSchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Lists the egress proxies of the provider's `owner` on the configured backends, for `terraform query`. " +
			"Each result carries the proxy's identity and a display name (id, user labels, age); with `include_resource = true` " +
			"also the whole `egress_proxy` object, so `terraform query -generate-config-out=FILE` writes import and resource blocks " +
			"that adopt the proxies with no changes. Scopes (hosts, zones, namespaces) that could not be listed are reported as warnings.",
		Attributes: map[string]schema.Attribute{
			"backends": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Backends to list; every configured backend when unset.",
				Validators:          []validator.List{listvalidator.ValueStringsAre(stringvalidator.OneOf(kindNames()...)), listvalidator.UniqueValues()}},
			"orphaned_only": schema.BoolAttribute{Optional: true,
				MarkdownDescription: "List only orphans: proxies whose id is not in `known_ids` and that are older than `min_age`, as `egress_proxy_orphans` does."},
			"known_ids": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "With `orphaned_only`: ids of the proxies that are still wanted, left out of the result.",
				Validators:          []validator.List{listvalidator.ValueStringsAre(attribute_validator.ProviderID(idForms))}},
			"min_age": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Only proxies at least this old are listed, a Go duration. Defaults to `" + defaultMinAge.String() +
					"` with `orphaned_only`, so creates in flight are not mistaken for orphans, and to `0s` without.",
				Validators: []validator.String{attribute_validator.Duration()}},
			"labels": schema.MapAttribute{Optional: true, ElementType: types.StringType,
				MarkdownDescription: "Only proxies carrying all these labels with these values are listed.",
				Validators: []validator.Map{
					mapvalidator.KeysAre(attribute_validator.LabelKey()),
					mapvalidator.ValueStringsAre(attribute_validator.LabelValue()),
				}},
		},
	}
}

func (l *proxyListResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	data, diags := providerDataFrom(req.ProviderData)
	resp.Diagnostics.Append(diags...)
	l.data = data
}

// ValidateListResourceConfig refuses known_ids without orphaned_only: they would filter nothing, and a user
// who wrote them expects the known proxies to be left out.
func (l *proxyListResource) ValidateListResourceConfig(ctx context.Context, req list.ValidateConfigRequest, resp *list.ValidateConfigResponse) {
	var m proxyListModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.KnownIDs.IsNull() || m.KnownIDs.IsUnknown() || m.OrphanedOnly.IsUnknown() {
		return
	}
	if !m.OrphanedOnly.ValueBool() {
		resp.Diagnostics.AddAttributeError(path.Root("known_ids"), "known_ids without orphaned_only",
			"Attribute known_ids only applies with orphaned_only = true: set orphaned_only = true to leave the known proxies out, or remove known_ids.")
	}
}

func (l *proxyListResource) filter(ctx context.Context, config tfsdk.Config) (proxyFilter, diag.Diagnostics) {
	var (
		m     proxyListModel
		f     proxyFilter
		diags diag.Diagnostics
	)
	diags.Append(config.Get(ctx, &m)...)
	diags.Append(m.Backends.ElementsAs(ctx, &f.kinds, false)...)
	known, d := knownIDSet(ctx, m.KnownIDs)
	diags.Append(d...)
	diags.Append(m.Labels.ElementsAs(ctx, &f.labels, false)...)
	f.orphanedOnly, f.known = m.OrphanedOnly.ValueBool(), known
	// Only orphans have an age below which they are left out by default: they may still be in flight.
	var defaultAge time.Duration
	if f.orphanedOnly {
		defaultAge = defaultMinAge
	}
	f.minAge = minAgeOr(m.MinAge, defaultAge)
	return f, diags
}

func (l *proxyListResource) List(ctx context.Context, req list.ListRequest, stream *list.ListResultsStream) {
	if l.data == nil {
		var diags diag.Diagnostics
		diags.AddError("Provider not configured", "The egress provider was not configured before the list: this is a bug in the provider or Terraform.")
		stream.Results = list.ListResultsStreamDiagnostics(diags)
		return
	}
	f, diags := l.filter(ctx, req.Config)
	if diags.HasError() {
		stream.Results = list.ListResultsStreamDiagnostics(diags)
		return
	}
	stream.Results = func(push func(list.ListResult) bool) {
		listCtx, cancel := context.WithTimeout(ctx, defaultReadTimeout)
		defer cancel()
		instances, failed := l.data.listOwned(listCtx, f.kinds)
		now := time.Now()
		if len(failed) > 0 {
			// Sent before the results, so a limit that ends the stream early cannot drop it.
			var warning diag.Diagnostics
			warning.Append(incompleteListDiagnostic(failed, "run the query again"))
			if !push(list.ListResult{Diagnostics: warning}) {
				return
			}
		}
		for i, inst := range f.selectFrom(instances, now) {
			if req.Limit > 0 && int64(i) >= req.Limit {
				return
			}
			if !push(l.result(ctx, req, inst, now)) {
				return
			}
		}
	}
}

// result is one listed proxy: its identity, its display name and, when asked for, the object an import of
// its id reads, so that the configuration Terraform generates from it plans no changes.
func (l *proxyListResource) result(ctx context.Context, req list.ListRequest, inst backend.Instance, now time.Time) list.ListResult {
	r := req.NewListResult(ctx)
	r.DisplayName = displayName(inst, now)
	r.Diagnostics.Append(r.Identity.Set(ctx, proxyIdentityModel{ID: types.StringValue(inst.ID.String())})...)
	if req.IncludeResource {
		full, diags := l.readForImport(ctx, inst)
		r.Diagnostics.Append(diags...)
		r.Diagnostics.Append(importedObject(ctx, r.Resource, full, l.data.defaultLabels)...)
	}
	return r
}

// readForImport reads the listed proxy the way an import does. A listing is made to find proxies, not to
// describe them: some backends list without the proxy's settings (kubernetes reads no ConfigMap for a list),
// and a configuration generated from that would plan changes or not validate. When the read fails, the
// listing is used and the result says so.
func (l *proxyListResource) readForImport(ctx context.Context, listed backend.Instance) (backend.Instance, diag.Diagnostics) {
	var diags diag.Diagnostics
	b, err := l.data.registry.Backend(ctx, listed.ID.Backend)
	if err == nil {
		var full backend.Instance
		full, err = getRetried(ctx, b, listed.ID)
		if err == nil {
			return full, diags
		}
	}
	diags.AddWarning("Proxy listed but not read back",
		fmt.Sprintf("%s was listed, but reading it for its full object failed (%s): the object is what the listing holds, and a configuration generated from it may plan changes. Run the query again, or import the proxy by its id.",
			listed.ID, backend.ClassOf(err)))
	return listed, diags
}

// importedObject fills obj, a null egress_proxy object, the way Read fills the state of a proxy imported by
// its id: from nothing but what the backend reports.
func importedObject(ctx context.Context, obj *tfsdk.Resource, inst backend.Instance, defaults map[string]string) diag.Diagnostics {
	var diags diag.Diagnostics
	// An import starts from an object whose attributes are all null but its id; a struct cannot be read out
	// of a null object, only out of one whose attributes are null.
	attrs := map[string]tftypes.Value{}
	objType, ok := obj.Schema.Type().TerraformType(ctx).(tftypes.Object)
	if !ok {
		diags.AddError("Unexpected egress_proxy schema", fmt.Sprintf("its type is %T, not an object: this is a bug in the provider", obj.Schema.Type()))
		return diags
	}
	for name, t := range objType.AttributeTypes {
		attrs[name] = tftypes.NewValue(t, nil)
	}
	obj.Raw = tftypes.NewValue(objType, attrs)
	var m proxyResourceModel
	diags.Append(m.read(ctx, obj)...)
	if diags.HasError() {
		return diags
	}
	diags.Append(m.setInstance(inst, defaults)...)
	diags.Append(m.write(ctx, obj, obj.Schema.Type())...)
	return diags
}
