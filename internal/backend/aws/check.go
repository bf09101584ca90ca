package aws

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/servicequotas"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	smithy "github.com/aws/smithy-go"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// The EC2 quotas Check reads from Service Quotas (service code ec2). EC2's On-Demand and Spot limits are
// vCPUs per family group ("Amazon EC2 service quotas" in the EC2 user guide); a proxy's default type is of
// the Standard group.
const (
	quotaOnDemandStandardVCPUs = "L-1216C47A" // Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances
	quotaSpotStandardVCPUs     = "L-34B43A08" // All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests
	quotaElasticIPs            = "L-0263D0A3" // EC2-VPC Elastic IPs
)

// defaultInstanceVCPUs is what DefaultInstanceType (t3.micro) takes of the On-Demand Standard quota: 2 vCPUs
// ("Amazon EC2 instance types": t3.micro, 1 core of 2 threads).
const defaultInstanceVCPUs = 2

// The details Check reports besides backend.DetailMessage.
const (
	detailAccount                = "account"
	detailARN                    = "arn"
	detailQuotaSource            = "quota_source" // quotaSourceServiceQuotas or quotaSourceAccountAttributes
	detailQuotaSourceNote        = "quota_source_note"
	detailQuotaVCPUs             = "quota_on_demand_vcpus"
	detailVCPUsInUse             = "vcpus_in_use"
	detailQuotaSpotVCPUs         = "quota_spot_vcpus"
	detailSpotVCPUsInUse         = "spot_vcpus_in_use"
	detailQuotaInstances         = "quota_instances" // the legacy max-instances, only from the account attributes
	detailInstancesInUse         = "instances_in_use"
	detailQuotaElasticIPs        = "quota_elastic_ips"
	detailElasticIPsInUse        = "elastic_ips_allocated"
	detailMissingPermissions     = "missing_permissions" // the IAM actions AWS refused, or that a probe found refused
	quotaSourceServiceQuotas     = "service_quotas"
	quotaSourceAccountAttributes = "account_attributes"
)

// Check reports each region's health: the credentials accepted (the caller's identity read), and the headroom
// a new proxy needs under the region's quotas, read from Service Quotas: the On-Demand Standard vCPUs against
// those of the pending and running instances, the Spot ones alike, the Elastic IPs against those allocated.
// Degraded when a proxy of the default instance type would not fit, or no Elastic IP is left. A caller that
// cannot reach Service Quotas gets EC2's legacy account attributes instead (max-instances,
// vpc-max-elastic-ips), which say nothing of vCPUs; a detail says so. A permission of the caller's policy
// (CallerPolicyFile) that AWS refuses is named in missing_permissions and makes the region Degraded, with the
// document that grants it: the check goes on with what it may read.
func (b *Backend) Check(ctx context.Context) []backend.Health {
	return backend.EachTarget(ctx, b.Regions(), b.checkRegion)
}

func (b *Backend) checkRegion(ctx context.Context, name string) backend.Health {
	c := &regionCheck{name: name, h: backend.Health{Target: name, Details: map[string]string{}}}
	r, err := b.clients(ctx, name)
	if err != nil {
		return c.unhealthy(backend.HealthUnauthorized, err.Error())
	}
	who, err := r.sts.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		return c.failed("aws credentials", err)
	}
	c.h.Details[detailAccount], c.h.Details[detailARN] = awssdk.ToString(who.Account), awssdk.ToString(who.Arn)
	q, failure := c.quotas(ctx, r)
	if failure != nil {
		return *failure
	}
	use, err := readUsage(ctx, r)
	switch {
	case err == nil:
		c.h.Details[detailInstancesInUse] = strconv.Itoa(use.instances)
		c.h.Details[detailVCPUsInUse] = strconv.Itoa(use.onDemandVCPUs)
		c.h.Details[detailSpotVCPUsInUse] = strconv.Itoa(use.spotVCPUs)
	case c.denied(err):
		use.onDemandVCPUs = -1
	default:
		return c.failed("aws instances", err)
	}
	// The headroom a static_egress_ip proxy needs: an Elastic IP under the region's quota.
	allocated := -1
	addresses, err := r.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{})
	switch {
	case err == nil:
		allocated = len(addresses.Addresses)
		c.h.Details[detailElasticIPsInUse] = strconv.Itoa(allocated)
	case !c.denied(err):
		return c.failed("aws Elastic IPs", err)
	}
	probed, err := b.probePermissions(ctx, r)
	if err != nil {
		return c.failed("aws permissions", err)
	}
	for _, action := range probed {
		c.addMissing(action)
	}
	return c.verdict(q, use, allocated)
}

// regionCheck is one region's check on its way: the health it builds, and the permissions AWS refused.
type regionCheck struct {
	name    string
	h       backend.Health
	missing []string
}

func (c *regionCheck) unhealthy(reason, message string) backend.Health {
	c.h.Reason, c.h.Details[backend.DetailMessage] = reason, message
	return c.h
}

// failed ends the check on err, naming the permission and its document when err is a denial.
func (c *regionCheck) failed(what string, err error) backend.Health {
	message := classify(what+" in region "+c.name, err).Error()
	if action, _ := MissingPermission(err); action != "" {
		c.h.Details[detailMissingPermissions] = action
		message += ". " + permissionAdvice(err)
	}
	return c.unhealthy(healthReason(err), message)
}

func (c *regionCheck) addMissing(action string) {
	if !slices.Contains(c.missing, action) {
		c.missing = append(c.missing, action)
	}
}

// denied records the permission err says the caller lacks, and reports whether it was such a denial: a
// refused read is skipped, and the rest still checked.
func (c *regionCheck) denied(err error) bool {
	action, _ := MissingPermission(err)
	if action != "" {
		c.addMissing(action)
	}
	return action != ""
}

// quotas reads the region's quotas from Service Quotas or, when it refuses or cannot be reached, from EC2's
// legacy account attributes; a failure that ends the check is returned as its health.
func (c *regionCheck) quotas(ctx context.Context, r *region) (quotas, *backend.Health) {
	q, err := readQuotas(ctx, r)
	switch {
	case err == nil:
		c.h.Details[detailQuotaSource] = quotaSourceServiceQuotas
		return q, nil
	case ctx.Err() != nil:
		h := c.failed("aws Service Quotas", err)
		return q, &h
	}
	// A caller that may not read Service Quotas, or a network that does not reach it (a private VPC may have an
	// EC2 endpoint and none for it): the legacy attributes, with the reason, rather than a region called down
	// that can run proxies.
	note := "Service Quotas could not be read (" + classify("aws Service Quotas in region "+c.name, err).Error() + ")"
	if c.denied(err) {
		note = "Service Quotas refused servicequotas:GetServiceQuota (" + errorMessage(err) + ")"
	}
	c.h.Details[detailQuotaSource] = quotaSourceAccountAttributes
	c.h.Details[detailQuotaSourceNote] = note + ": the limits are EC2's legacy account attributes, which do not give the vCPU quota; " +
		"allow servicequotas:GetServiceQuota (" + CallerPolicyFile + ") and reach its endpoint to check the vCPU headroom"
	if q, err = readAccountAttributes(ctx, r); err != nil && !c.denied(err) {
		h := c.failed("aws EC2", err)
		return q, &h
	}
	return q, nil
}

// verdict sums the check up: Degraded when a proxy of the default type or its Elastic IP would not fit (a
// count that could not be read, -1, says nothing), or a permission is missing.
func (c *regionCheck) verdict(q quotas, use usage, allocated int) backend.Health {
	var short []string
	if q.onDemandVCPUs >= 0 {
		c.h.Details[detailQuotaVCPUs] = strconv.Itoa(q.onDemandVCPUs)
		if left := q.onDemandVCPUs - use.onDemandVCPUs; use.onDemandVCPUs >= 0 && left < defaultInstanceVCPUs {
			short = append(short, fmt.Sprintf("%d of %d On-Demand Standard vCPUs in use in %s: a proxy of the default type %s (%d vCPUs) cannot launch",
				use.onDemandVCPUs, q.onDemandVCPUs, c.name, DefaultInstanceType, defaultInstanceVCPUs))
		}
	}
	if q.spotVCPUs >= 0 {
		c.h.Details[detailQuotaSpotVCPUs] = strconv.Itoa(q.spotVCPUs)
	}
	if q.instances >= 0 {
		c.h.Details[detailQuotaInstances] = strconv.Itoa(q.instances)
	}
	if q.elasticIPs >= 0 {
		c.h.Details[detailQuotaElasticIPs] = strconv.Itoa(q.elasticIPs)
		if allocated >= 0 && allocated >= q.elasticIPs {
			short = append(short, fmt.Sprintf("%d of %d Elastic IPs allocated in %s: a proxy with static_egress_ip cannot get one", allocated, q.elasticIPs, c.name))
		}
	}
	if len(c.missing) > 0 {
		sort.Strings(c.missing)
		c.h.Details[detailMissingPermissions] = strings.Join(c.missing, ", ")
		short = append(short, fmt.Sprintf("the credentials (%s) lack %s: grant them the policy in %s (the provider's documentation, AWS, Permissions)",
			c.h.Details[detailARN], strings.Join(c.missing, ", "), CallerPolicyFile))
	}
	if len(short) > 0 {
		return c.unhealthy(backend.HealthDegraded, strings.Join(short, "; "))
	}
	c.h.Healthy, c.h.Reason = true, backend.HealthHealthy
	return c.h
}

// quotas are a region's limits; -1 where the source does not give one.
type quotas struct {
	onDemandVCPUs, spotVCPUs, elasticIPs, instances int
}

// readQuotas reads the region's vCPU and Elastic IP quotas from Service Quotas, one call each. The first
// refusal ends it: a caller denied one is denied all.
func readQuotas(ctx context.Context, r *region) (quotas, error) {
	q := quotas{instances: -1}
	for _, want := range []struct {
		code string
		into *int
	}{{quotaOnDemandStandardVCPUs, &q.onDemandVCPUs}, {quotaSpotStandardVCPUs, &q.spotVCPUs}, {quotaElasticIPs, &q.elasticIPs}} {
		out, err := r.quotas.GetServiceQuota(ctx, &servicequotas.GetServiceQuotaInput{ServiceCode: awssdk.String("ec2"), QuotaCode: awssdk.String(want.code)})
		if err != nil {
			return q, err
		}
		*want.into = -1
		if out.Quota != nil && out.Quota.Value != nil {
			*want.into = int(*out.Quota.Value)
		}
	}
	return q, nil
}

// The account attributes of EC2's legacy limits (EC2 API Reference: DescribeAccountAttributes).
const (
	attrMaxInstances     ec2types.AccountAttributeName = "max-instances"
	attrVPCMaxElasticIPs ec2types.AccountAttributeName = "vpc-max-elastic-ips"
)

// readAccountAttributes reads the limits EC2's account attributes still give: the instance count
// (max-instances) and the Elastic IPs (vpc-max-elastic-ips); no vCPU quota.
func readAccountAttributes(ctx context.Context, r *region) (quotas, error) {
	q := quotas{onDemandVCPUs: -1, spotVCPUs: -1, elasticIPs: -1, instances: -1}
	attrs, err := r.ec2.DescribeAccountAttributes(ctx, &ec2.DescribeAccountAttributesInput{
		AttributeNames: []ec2types.AccountAttributeName{attrMaxInstances, attrVPCMaxElasticIPs},
	})
	if err != nil {
		return q, err
	}
	for _, a := range attrs.AccountAttributes {
		if len(a.AttributeValues) == 0 {
			continue
		}
		v, err := strconv.Atoi(awssdk.ToString(a.AttributeValues[0].AttributeValue))
		if err != nil {
			continue
		}
		switch ec2types.AccountAttributeName(awssdk.ToString(a.AttributeName)) {
		case attrMaxInstances:
			q.instances = v
		case attrVPCMaxElasticIPs:
			q.elasticIPs = v
		}
	}
	return q, nil
}

// usage is what the region's pending and running instances take of its quotas.
type usage struct {
	instances, onDemandVCPUs, spotVCPUs int
}

// readUsage sums the vCPUs of the region's pending and running instances of the Standard families, On-Demand
// and Spot apart, as L-1216C47A and L-34B43A08 count them: one DescribeInstances a page of listPageSize.
func readUsage(ctx context.Context, r *region) (usage, error) {
	var u usage
	pages := ec2.NewDescribeInstancesPaginator(r.ec2, &ec2.DescribeInstancesInput{
		MaxResults: awssdk.Int32(listPageSize),
		Filters:    []ec2types.Filter{{Name: awssdk.String("instance-state-name"), Values: []string{"pending", "running"}}},
	})
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return u, err
		}
		for _, res := range out.Reservations {
			for _, in := range res.Instances {
				u.instances++
				if !standardFamily(in.InstanceType) {
					continue
				}
				switch in.InstanceLifecycle {
				case "":
					u.onDemandVCPUs += vcpusOf(in)
				case ec2types.InstanceLifecycleTypeSpot:
					u.spotVCPUs += vcpusOf(in)
				}
			}
		}
	}
	return u, nil
}

// vcpusOf is an instance's vCPUs: its cores times their threads ("CPU options for Amazon EC2 instances"),
// as DescribeInstances describes them.
func vcpusOf(in ec2types.Instance) int {
	if in.CpuOptions == nil {
		return 0
	}
	return int(awssdk.ToInt32(in.CpuOptions.CoreCount)) * max(int(awssdk.ToInt32(in.CpuOptions.ThreadsPerCore)), 1)
}

// standardFamily reports whether an instance type is of the Standard families (A, C, D, H, I, M, R, T, Z)
// the Standard vCPU quotas count: Inf, DL, HPC, Trn and Mac begin with those letters but have quotas of their
// own ("Amazon EC2 service quotas": On-Demand Instance quotas).
func standardFamily(t ec2types.InstanceType) bool {
	family, _, _ := strings.Cut(string(t), ".")
	for _, other := range []string{"inf", "dl", "hpc", "trn", "mac"} {
		if strings.HasPrefix(family, other) {
			return false
		}
	}
	return family != "" && strings.ContainsRune("acdhimrtz", rune(family[0]))
}

// errorMessage is a service's error code and words, or err's text when it has none.
func errorMessage(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode() + ": " + api.ErrorMessage()
	}
	return err.Error()
}

// healthReason names what a failed check request found, as one of backend.HealthReasons.
func healthReason(err error) string {
	switch errorCode(err) {
	case "AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "ExpiredToken", "SignatureDoesNotMatch", "AccessDenied",
		"AccessDeniedException", "UnrecognizedClientException":
		return backend.HealthUnauthorized
	case "OptInRequired":
		return backend.HealthNotFound
	}
	if backend.ClassOf(classify("", err)) == backend.ClassTransient {
		return backend.HealthUnreachable
	}
	return backend.HealthError
}
