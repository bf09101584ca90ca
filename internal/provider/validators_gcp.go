package provider

import (
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

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
