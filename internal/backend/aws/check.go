package aws

import (
	"context"
	"fmt"
	"strconv"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Check reports each region's health: the credentials accepted (the caller's identity read) and EC2
// reachable, with the account's instance and Elastic IP limits and the Elastic IPs allocated as details;
// Degraded when no Elastic IP is left under the quota.
func (b *Backend) Check(ctx context.Context) []backend.Health {
	return backend.EachTarget(ctx, b.Regions(), b.checkRegion)
}

func (b *Backend) checkRegion(ctx context.Context, name string) backend.Health {
	h := backend.Health{Target: name, Details: map[string]string{}}
	unhealthy := func(reason, message string) backend.Health {
		h.Reason, h.Details[backend.DetailMessage] = reason, message
		return h
	}
	r, err := b.clients(ctx, name)
	if err != nil {
		return unhealthy(backend.HealthUnauthorized, err.Error())
	}
	who, err := r.sts.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		return unhealthy(healthReason(err), classify("aws credentials for region "+name, err).Error())
	}
	h.Details["account"], h.Details["arn"] = awssdk.ToString(who.Account), awssdk.ToString(who.Arn)
	attrs, err := r.ec2.DescribeAccountAttributes(ctx, &ec2.DescribeAccountAttributesInput{
		AttributeNames: nil, // all: max-instances, max-elastic-ips, vpc-max-elastic-ips, ...
	})
	if err != nil {
		return unhealthy(healthReason(err), classify("aws EC2 in region "+name, err).Error())
	}
	maxAddresses := -1
	for _, a := range attrs.AccountAttributes {
		switch n := awssdk.ToString(a.AttributeName); n {
		case "max-instances", "vpc-max-elastic-ips":
			if len(a.AttributeValues) > 0 {
				v := awssdk.ToString(a.AttributeValues[0].AttributeValue)
				h.Details["limit_"+n] = v
				if n == "vpc-max-elastic-ips" {
					if m, err := strconv.Atoi(v); err == nil {
						maxAddresses = m
					}
				}
			}
		}
	}
	// The headroom a static_egress_ip proxy needs: an Elastic IP under the region's quota.
	addresses, err := r.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{})
	if err != nil {
		return unhealthy(healthReason(err), classify("aws Elastic IPs in region "+name, err).Error())
	}
	inUse := len(addresses.Addresses)
	h.Details["elastic_ips_allocated"] = strconv.Itoa(inUse)
	if maxAddresses >= 0 && inUse >= maxAddresses {
		return unhealthy(backend.HealthDegraded, fmt.Sprintf("%d of %d Elastic IPs allocated in %s: a proxy with static_egress_ip cannot get one", inUse, maxAddresses, name))
	}
	h.Healthy, h.Reason = true, backend.HealthHealthy
	return h
}

// healthReason names what a failed check request found, as one of backend.HealthReasons.
func healthReason(err error) string {
	switch errorCode(err) {
	case "AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "ExpiredToken", "SignatureDoesNotMatch", "AccessDenied", "UnrecognizedClientException":
		return backend.HealthUnauthorized
	case "OptInRequired":
		return backend.HealthNotFound
	}
	if backend.ClassOf(classify("", err)) == backend.ClassTransient {
		return backend.HealthUnreachable
	}
	return backend.HealthError
}
