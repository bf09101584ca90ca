package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	providerschema "github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
)

// gcpDescriptor is the gcp backend in the Terraform layer: its provider block is in provider_gcp.go, its
// egress_proxy attribute in proxy_resource_gcp.go.
type gcpDescriptor struct{}

func (gcpDescriptor) kind() backend.Kind     { return gcp.Kind }
func (gcpDescriptor) idForm() backend.IDForm { return gcp.IDForm }
func (gcpDescriptor) title() string          { return "GCP Compute Engine" }

// servesMetrics: the proxy VM's startup script runs mtail and the Squid exporter beside Squid, their ports
// behind its backstop (metricsServer); the VPC firewall rule that lets a Prometheus reach them is the user's.
func (gcpDescriptor) servesMetrics() {}

func (gcpDescriptor) providerSchema() providerschema.SingleNestedAttribute {
	return gcpProviderSchema()
}

func (gcpDescriptor) readProviderBlock(ctx context.Context, block types.Object, _ string) (providerBlock, diag.Diagnostics) {
	return readObject[gcpProviderModel](ctx, block)
}

func (gcpDescriptor) placementSchema() schema.SingleNestedAttribute { return gcpPlacementSchema() }
func (gcpDescriptor) targetAttribute() string                       { return "project" }

func (gcpDescriptor) readPlacement(ctx context.Context, block types.Object) (placementModel, diag.Diagnostics) {
	return readObject[gcpPlacementModel](ctx, block)
}

func (gcpDescriptor) importedPlacement(p backend.Placement) placementModel {
	return gcpPlacementFrom(p)
}

func (gcpDescriptor) egressAddressNote() string {
	return "`gcp`: the VM's external address (ephemeral, or the reserved one with `static_egress_ip` or `egress_address_name`); " +
		"empty with `instances` above 1, where each VM has its own (`egress_addresses`)."
}

func (gcpDescriptor) ingressAddressNote() string {
	return "`gcp`: the VM's external address, the same as `egress_address`; empty with `instances` above 1, whose load balancer is internal."
}

func (m *gcpProviderModel) factory() backend.Factory { return gcpFactory(m) }

// targets enumerates nothing: a resource may name any project, which the provider's credentials then reach.
func (m *gcpProviderModel) targets() ([]string, bool) { return nil, false }
