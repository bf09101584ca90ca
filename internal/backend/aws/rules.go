package aws

import (
	"context"
	"fmt"
	"net/netip"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/servicequotas"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// DefaultRulesPerSecurityGroup is VPC's default quota of inbound rules per security group, counted apart for
// IPv4 and IPv6 rules ("Amazon VPC quotas", Security groups). Each range of allowed_client_cidrs is one rule
// of the proxy's group, so it is also the most ranges of one family a plan accepts.
const DefaultRulesPerSecurityGroup = 60

// quotaRulesPerSecurityGroup is that quota's code in Service Quotas, under the service code vpc.
const quotaRulesPerSecurityGroup = "L-0EA8095F"

// ClientRuleCounts are the inbound rules the proxy's group needs for clients: IPv4 and IPv6 ranges, which
// the quota counts apart.
func ClientRuleCounts(clients []string) (ipv4, ipv6 int) {
	for _, c := range clients {
		if p, err := netip.ParsePrefix(c); err == nil && p.Addr().Is6() {
			ipv6++
		} else {
			ipv4++
		}
	}
	return ipv4, ipv6
}

// rulesQuota is the region's quota of rules per security group, read from Service Quotas; the default when
// it cannot be read (no servicequotas:GetServiceQuota, no endpoint), since EC2 then still enforces one.
func (b *Backend) rulesQuota(ctx context.Context, r *region) int {
	out, err := r.quotas.GetServiceQuota(ctx, &servicequotas.GetServiceQuotaInput{
		ServiceCode: awssdk.String("vpc"), QuotaCode: awssdk.String(quotaRulesPerSecurityGroup)})
	if err != nil || out.Quota == nil || out.Quota.Value == nil {
		return DefaultRulesPerSecurityGroup
	}
	return int(*out.Quota.Value)
}

// IngressRuleCounts are the inbound rules the proxy's group needs for settings s: each client range on the
// proxy port and, with metrics, each metrics range on each of the two metrics ports (ingressRules), IPv4 and
// IPv6 apart. A range on two ports is two rules: the quota counts each range of each permission ("Amazon VPC
// quotas", Security groups), as the fake does (ec2fake R18, R49).
func IngressRuleCounts(s proxyconf.Settings) (ipv4, ipv6 int) {
	ipv4, ipv6 = ClientRuleCounts(s.AllowedClientCIDRs)
	if s.Metrics != nil {
		m4, m6 := ClientRuleCounts(s.Metrics.AllowedClientCIDRs)
		ipv4, ipv6 = ipv4+2*m4, ipv6+2*m6
	}
	return ipv4, ipv6
}

// checkClientRules refuses, before anything is made or changed, clients (and metrics clients) that do not fit
// in the proxy's group under the region's quota: EC2 would refuse the rules only after the group exists.
// health is how many IPv4 ranges the group also admits the load balancer's health checks from (a proxy of
// several instances: one per subnet).
func (b *Backend) checkClientRules(ctx context.Context, r *region, obj string, s proxyconf.Settings, health int) error {
	ipv4, ipv6 := IngressRuleCounts(s)
	ipv4 += health
	if ipv4 <= 1 && ipv6 <= 1 {
		return nil // one range of each fits any quota: no request
	}
	quota := b.rulesQuota(ctx, r)
	if ipv4 <= quota && ipv6 <= quota {
		return nil
	}
	return &backend.Error{Class: backend.ClassQuota, Object: obj, Advice: RulesAdvice,
		Err: fmt.Errorf("allowed_client_cidrs (and each range of metrics.allowed_client_cidrs, on two ports, and with several instances each subnet, for the load balancer's health checks) need %d IPv4 and %d IPv6 inbound rules of the proxy's security group, and the region's quota is %d rules of each per group", ipv4, ipv6, quota)}
}
