package provider

import (
	"context"
	"fmt"

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
