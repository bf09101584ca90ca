package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// awsInstances refuses at plan time, on aws.instances, what the backend would refuse when it applies
// (aws.Options.validateInstances): several instances need subnet_ids (and not subnet_id) and no Elastic IP;
// one takes subnet_id.
type awsInstances struct{}

var _ validator.Int64 = awsInstances{}

func (awsInstances) Description(context.Context) string {
	return "above 1, with subnet_ids in at least two Availability Zones and without static_egress_ip or eip_allocation_id; 1 with subnet_id"
}

func (v awsInstances) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (awsInstances) ValidateInt64(ctx context.Context, req validator.Int64Request, resp *validator.Int64Response) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	n := req.ConfigValue.ValueInt64()
	parent := req.Path.ParentPath()
	var subnets types.List
	var staticIP types.Bool
	var eip types.String
	if d := req.Config.GetAttribute(ctx, parent.AtName("subnet_ids"), &subnets); d.HasError() {
		return
	}
	if d := req.Config.GetAttribute(ctx, parent.AtName("static_egress_ip"), &staticIP); d.HasError() {
		return
	}
	if d := req.Config.GetAttribute(ctx, parent.AtName("eip_allocation_id"), &eip); d.HasError() {
		return
	}
	switch {
	case n > 1 && subnets.IsNull():
		resp.Diagnostics.AddAttributeError(req.Path, "Several aws instances need subnet_ids",
			fmt.Sprintf("aws.instances = %d spreads the instances over aws.subnet_ids, one subnet per Availability Zone of one VPC (at least "+
				"two), where their load balancer has a node each. Set subnet_ids instead of subnet_id.", n))
	case n > 1 && (staticIP.ValueBool() || !eip.IsNull() && !eip.IsUnknown()):
		resp.Diagnostics.AddAttributeError(req.Path, "Several aws instances have no Elastic IP",
			fmt.Sprintf("aws.instances = %d: static_egress_ip and eip_allocation_id give one instance an Elastic IP; each of several "+
				"instances egresses from its own public address (members, egress_addresses). Remove them, or keep one instance.", n))
	case n == 1 && !subnets.IsNull():
		resp.Diagnostics.AddAttributeError(req.Path, "One aws instance takes subnet_id",
			"aws.subnet_ids is for several instances: with instances = 1, set aws.subnet_id.")
	}
}
