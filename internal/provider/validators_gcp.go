package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
)

// The gcp backend's plan-time checks of names, each the backend's own.

// gcpZone accepts a Compute Engine zone name, such as europe-west1-b.
func gcpZone() validator.String { return attribute_validator.Func("gcp zone", gcp.ValidateZone) }

// gcpRegion accepts a Compute Engine region name, such as europe-west1.
func gcpRegion() validator.String { return attribute_validator.Func("gcp region", gcp.ValidateRegion) }

// gcpServiceAccount accepts a service account's email, or "default".
func gcpServiceAccount() validator.String {
	return attribute_validator.Func("service account", gcp.ValidateServiceAccount)
}

// gcpCloudLoggingScopes refuses cloud_logging = true with scopes that keep the VM's token from writing logs
// (gcp.ValidateCloudLogging): the shipper would be refused at every write. Unset scopes are the default,
// cloud-platform; scopes not known yet are checked at the plan that knows them.
type gcpCloudLoggingScopes struct{}

const gcpCloudLoggingScopesDescription = "when true, scopes (if set) include cloud-platform or logging.write"

func (gcpCloudLoggingScopes) Description(context.Context) string {
	return gcpCloudLoggingScopesDescription
}

func (gcpCloudLoggingScopes) MarkdownDescription(context.Context) string {
	return gcpCloudLoggingScopesDescription
}

func (gcpCloudLoggingScopes) ValidateBool(ctx context.Context, req validator.BoolRequest, resp *validator.BoolResponse) {
	if !req.ConfigValue.ValueBool() {
		return
	}
	var scopes types.Set
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, req.Path.ParentPath().AtName("scopes"), &scopes)...)
	if resp.Diagnostics.HasError() || scopes.IsNull() || scopes.IsUnknown() {
		return
	}
	for _, e := range scopes.Elements() {
		if e.IsUnknown() {
			return
		}
	}
	var list []string
	resp.Diagnostics.Append(scopes.ElementsAs(ctx, &list, false)...)
	// The service account's own check is TrueRequiresValid's: here one stands in, so only the scopes speak.
	if err := gcp.ValidateCloudLogging(gcp.Options{CloudLogging: true, ServiceAccount: "x", Scopes: list}); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Cloud logging needs a scope that writes logs", fmt.Sprintf("Attribute %s: %s.", req.Path, err))
	}
}

// gcpInstancesFit refuses instances above one where the rest of the configuration is for one VM (a static
// address, gcp.ValidateInstances; metrics, gcp.ErrHAMetrics) or where the proxy's name leaves no room for
// its VMs' names (gcp.ValidateHAName). Values not known yet are checked at the plan that knows them.
type gcpInstancesFit struct{}

const gcpInstancesFitDescription = "above 1, without static_egress_ip, egress_address_name or metrics, and with a name that leaves room for the VMs' suffixes"

func (gcpInstancesFit) Description(context.Context) string { return gcpInstancesFitDescription }

func (gcpInstancesFit) MarkdownDescription(context.Context) string { return gcpInstancesFitDescription }

func (gcpInstancesFit) ValidateInt64(ctx context.Context, req validator.Int64Request, resp *validator.Int64Response) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() || req.ConfigValue.ValueInt64() <= 1 {
		return
	}
	n := int(req.ConfigValue.ValueInt64())
	var static types.Bool
	var named, name types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, req.Path.ParentPath().AtName("static_egress_ip"), &static)...)
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, req.Path.ParentPath().AtName("egress_address_name"), &named)...)
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("name"), &name)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var metrics types.Object
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("metrics"), &metrics)...)
	if resp.Diagnostics.HasError() {
		return
	}
	opts := gcp.Options{Instances: n, StaticEgressIP: static.ValueBool(), EgressAddressName: named.ValueString()}
	err := gcp.ValidateInstances(opts)
	if err == nil && !metrics.IsNull() {
		err = gcp.ErrHAMetrics
	}
	if err == nil && !name.IsNull() && !name.IsUnknown() {
		err = gcp.ValidateHAName(name.ValueString(), n)
	}
	if err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Proxy of several instances not possible", fmt.Sprintf("Attribute %s: %s.", req.Path, err))
	}
}
