package attribute_validator

import (
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
)

// GCPZone accepts a Compute Engine zone name, such as europe-west1-b.
func GCPZone() validator.String { return stringFunc{"gcp zone", gcp.ValidateZone} }

// GCPRegion accepts a Compute Engine region name, such as europe-west1.
func GCPRegion() validator.String { return stringFunc{"gcp region", gcp.ValidateRegion} }

// ServiceAccount accepts a service account's email, or "default".
func ServiceAccount() validator.String {
	return stringFunc{"service account", gcp.ValidateServiceAccount}
}
