package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws"
)

// awsClientRules refuses at plan time, on allowed_client_cidrs, more client ranges of one family than the
// proxy's security group can hold under VPC's default quota of rules per group: each range is one inbound
// rule, and EC2 would refuse them only once the group exists. It sits on the aws attribute, since only a
// proxy placed there has the limit. The backend reads the region's own quota again when it applies.
type awsClientRules struct{}

var _ validator.Object = awsClientRules{}

func (awsClientRules) Description(context.Context) string {
	return fmt.Sprintf("at most %d IPv4 and %d IPv6 ranges in allowed_client_cidrs", aws.DefaultRulesPerSecurityGroup, aws.DefaultRulesPerSecurityGroup)
}

func (v awsClientRules) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (awsClientRules) ValidateObject(ctx context.Context, req validator.ObjectRequest, resp *validator.ObjectResponse) {
	if req.ConfigValue.IsNull() {
		return
	}
	var clients types.Set
	if d := req.Config.GetAttribute(ctx, path.Root("allowed_client_cidrs"), &clients); d.HasError() || clients.IsNull() || clients.IsUnknown() {
		return
	}
	var known []string
	for _, e := range clients.Elements() {
		if s, ok := e.(types.String); ok && !s.IsNull() && !s.IsUnknown() {
			known = append(known, s.ValueString())
		}
	}
	ipv4, ipv6 := aws.ClientRuleCounts(known)
	if limit := aws.DefaultRulesPerSecurityGroup; ipv4 > limit || ipv6 > limit {
		resp.Diagnostics.AddAttributeError(path.Root("allowed_client_cidrs"), "Too many client ranges for an aws proxy's security group",
			fmt.Sprintf("allowed_client_cidrs has %d IPv4 and %d IPv6 ranges. On aws each range is one inbound rule of the proxy's "+
				"security group, and VPC allows %d rules of each family per group by default (quota L-0EA8095F, \"Inbound or outbound "+
				"rules per security group\"). List fewer, wider ranges, or split the clients across proxies.", ipv4, ipv6, limit))
	}
}
