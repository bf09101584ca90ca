package ec2fake

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/servicequotas"
)

// sqClient is a Service Quotas client of cfg that makes each call once (no retries), as the harness's others.
func sqClient(cfg aws.Config) *servicequotas.Client {
	return servicequotas.NewFromConfig(cfg, func(o *servicequotas.Options) { o.RetryMaxAttempts = 1 })
}

// sq is the Service Quotas client of the harness's region.
func (h *harness) sq() *servicequotas.Client { return sqClient(h.s.AWSConfig(h.region)) }

// quota reads an ec2 quota of the harness's region.
func (h *harness) quota(code string) (*servicequotas.GetServiceQuotaOutput, error) {
	return h.sq().GetServiceQuota(h.ctx, &servicequotas.GetServiceQuotaInput{ServiceCode: aws.String("ec2"), QuotaCode: aws.String(code)})
}
