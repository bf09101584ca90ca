package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	providerschema "github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws"
)

// awsDescriptor is the aws backend in the Terraform layer: its provider block is in provider_aws.go, its
// egress_proxy attribute in proxy_resource_aws.go.
type awsDescriptor struct{}

func (awsDescriptor) kind() backend.Kind     { return aws.Kind }
func (awsDescriptor) idForm() backend.IDForm { return aws.IDForm }
func (awsDescriptor) title() string          { return "AWS EC2" }

// servesMetrics: the instance's agent runs mtail and the Squid exporter beside Squid, their ports behind its
// backstop and opened to the metrics ranges alone by its security group (metricsServer;
// internal/backend/aws/guest/metrics.go).
func (awsDescriptor) servesMetrics() {}

func (awsDescriptor) providerSchema() providerschema.SingleNestedAttribute {
	return awsProviderSchema()
}

func (awsDescriptor) readProviderBlock(ctx context.Context, block types.Object, _ string) (providerBlock, diag.Diagnostics) {
	return readObject[awsProviderModel](ctx, block)
}

func (awsDescriptor) placementSchema() schema.SingleNestedAttribute { return awsPlacementSchema() }
func (awsDescriptor) targetAttribute() string                       { return "region" }

func (awsDescriptor) readPlacement(ctx context.Context, block types.Object) (placementModel, diag.Diagnostics) {
	return readObject[awsPlacementModel](ctx, block)
}

func (awsDescriptor) importedPlacement(p backend.Placement) placementModel {
	return awsPlacementFrom(p)
}

func (awsDescriptor) egressAddressNote() string {
	return "`aws`: the instance's public address: its Elastic IP with `static_egress_ip` or `eip_allocation_id`, else the public " +
		"address a public subnet gives it (which changes when the instance is replaced); null in a private subnet, where traffic " +
		"leaves through the VPC's NAT gateway. With several `instances`, null: each instance's is in `members` and `egress_addresses`."
}

func (awsDescriptor) ingressAddressNote() string {
	return "`aws`: the instance's public address, the same as `egress_address`; null with several `instances`, whose load balancer is internal."
}
