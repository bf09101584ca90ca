package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// awsClientRules refuses at plan time, on allowed_client_cidrs, more client ranges of one family than the
// proxy's security group can hold under VPC's default quota of rules per group: each range is one inbound
// rule, and EC2 would refuse them only once the group exists; with metrics, each metrics range is two more
// (one on each metrics port). It sits on the aws attribute, since only a proxy placed there has the limit. The
// backend reads the region's own quota again when it applies.
type awsClientRules struct{}

var _ validator.Object = awsClientRules{}

func (awsClientRules) Description(context.Context) string {
	return fmt.Sprintf("at most %d IPv4 and %d IPv6 inbound rules: one per range of allowed_client_cidrs, two per range of metrics.allowed_client_cidrs",
		aws.DefaultRulesPerSecurityGroup, aws.DefaultRulesPerSecurityGroup)
}

func (v awsClientRules) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (awsClientRules) ValidateObject(ctx context.Context, req validator.ObjectRequest, resp *validator.ObjectResponse) {
	if req.ConfigValue.IsNull() {
		return
	}
	clients, ok := configuredRanges(ctx, req, path.Root("allowed_client_cidrs"))
	if !ok {
		return
	}
	ipv4, ipv6 := aws.ClientRuleCounts(clients)
	// A proxy of several instances also admits its load balancer's health checks, one rule per subnet.
	health := awsHealthRules(req.ConfigValue)
	ipv4 += health
	limit := aws.DefaultRulesPerSecurityGroup
	if ipv4 > limit || ipv6 > limit {
		resp.Diagnostics.AddAttributeError(path.Root("allowed_client_cidrs"), "Too many client ranges for an aws proxy's security group",
			fmt.Sprintf("allowed_client_cidrs has %d IPv4 and %d IPv6 ranges. On aws each range is one inbound rule of the proxy's "+
				"security group (and with several instances, each of aws.subnet_ids one more, %d here, for the load balancer's health "+
				"checks), and VPC allows %d rules of each family per group by default (quota L-0EA8095F, \"Inbound or outbound "+
				"rules per security group\"). List fewer, wider ranges, or split the clients across proxies.", ipv4-health, ipv6, health, limit))
		return
	}
	// With metrics, each metrics range is one more rule on each of the two metrics ports (aws.IngressRuleCounts).
	var metrics types.Object
	if d := req.Config.GetAttribute(ctx, path.Root("metrics"), &metrics); d.HasError() || metrics.IsNull() || metrics.IsUnknown() {
		return
	}
	at := path.Root("metrics").AtName("allowed_client_cidrs")
	scrapers, ok := configuredRanges(ctx, req, at)
	if !ok {
		return
	}
	ipv4, ipv6 = aws.IngressRuleCounts(proxyconf.Settings{AllowedClientCIDRs: clients, Metrics: &proxyconf.MetricsSettings{AllowedClientCIDRs: scrapers}})
	ipv4 += health
	if ipv4 > limit || ipv6 > limit {
		resp.Diagnostics.AddAttributeError(at, "Too many client and metrics ranges for an aws proxy's security group",
			fmt.Sprintf("allowed_client_cidrs and metrics.allowed_client_cidrs need %d IPv4 and %d IPv6 inbound rules of the proxy's "+
				"security group: one per client range, and two per metrics range (one on each metrics port). VPC allows %d rules of "+
				"each family per group by default (quota L-0EA8095F, \"Inbound or outbound rules per security group\"). List fewer, "+
				"wider ranges.", ipv4, ipv6, limit))
	}
}

// configuredRanges are the known elements of the set at p in the configuration; false when the set is null or
// unknown.
func configuredRanges(ctx context.Context, req validator.ObjectRequest, p path.Path) ([]string, bool) {
	var set types.Set
	if d := req.Config.GetAttribute(ctx, p, &set); d.HasError() || set.IsNull() || set.IsUnknown() {
		return nil, false
	}
	var known []string
	for _, e := range set.Elements() {
		if s, ok := e.(types.String); ok && !s.IsNull() && !s.IsUnknown() {
			known = append(known, s.ValueString())
		}
	}
	return known, true
}

// awsHealthRules is how many rules a proxy of several instances adds for its load balancer's health checks:
// one per subnet of aws.subnet_ids, when instances is above 1; 0 otherwise or while not known.
func awsHealthRules(placement types.Object) int {
	attrs := placement.Attributes()
	n, ok := attrs["instances"].(types.Int64)
	subnets, ok2 := attrs["subnet_ids"].(types.List)
	if !ok || !ok2 || n.IsNull() || n.IsUnknown() || n.ValueInt64() <= 1 || subnets.IsNull() || subnets.IsUnknown() {
		return 0
	}
	return len(subnets.Elements())
}
