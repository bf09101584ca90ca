package ec2fake

import (
	"fmt"
	"net/http"
	"regexp"
)

// The Service Quotas JSON 1.1 API ("Service Quotas API Reference"): a POST of a JSON body with
// X-Amz-Target: ServiceQuotasV20190624.<Action>, signed for the service servicequotas, answered with JSON;
// errors are 400 (500 for ServiceException) with {"__type": code, "Message": words}. The fake serves the one
// action the backend calls, GetServiceQuota, for the EC2 quotas the backend reads, and takes their values from
// the limits RunInstances and AllocateAddress enforce, so the quota a client reads is the one it runs into.

const sqTargetPrefix = "ServiceQuotasV20190624."

type sqHandler func(s *Server, rg *region, c *call) (any, *apiError)

// sqActions are the actions the fake serves; any other target is UnknownOperationException.
var sqActions = map[string]sqHandler{
	"GetServiceQuota": (*Server).getServiceQuota,
}

// The EC2 quota codes the fake knows (Service Quotas console and ListServiceQuotas for the service code ec2;
// "Amazon EC2 service quotas" in the EC2 user guide names the On-Demand and Spot ones).
const (
	// QuotaOnDemandStandardVCPUs is "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", in
	// vCPUs: Options.MaxVCPUs.
	QuotaOnDemandStandardVCPUs = "L-1216C47A"
	// QuotaSpotStandardVCPUs is "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests", in vCPUs:
	// Options.MaxSpotVCPUs.
	QuotaSpotStandardVCPUs = "L-34B43A08"
	// QuotaElasticIPs is "EC2-VPC Elastic IPs": Options.MaxElasticIPs.
	QuotaElasticIPs = "L-0263D0A3"
	// QuotaRulesPerSecurityGroup is VPC's "Inbound or outbound rules per security group" (service code vpc):
	// Options.MaxRulesPerGroup.
	QuotaRulesPerSecurityGroup = "L-0EA8095F"
)

// vpcServiceName is how Service Quotas names VPC.
const vpcServiceName = "Amazon Virtual Private Cloud (Amazon VPC)"

// vpcQuotas are the quotas of the service code vpc the fake knows (R49).
func (s *Server) vpcQuotas(rg *region) map[string]sqQuota {
	return map[string]sqQuota{
		QuotaRulesPerSecurityGroup: {ServiceCode: "vpc", ServiceName: vpcServiceName,
			QuotaArn:  "arn:aws:servicequotas:" + rg.name + ":" + s.opts.AccountID + ":vpc/" + QuotaRulesPerSecurityGroup,
			QuotaCode: QuotaRulesPerSecurityGroup, QuotaName: "Inbound or outbound rules per security group",
			Value: float64(s.opts.MaxRulesPerGroup), Unit: "None", Adjustable: true},
	}
}

// ec2ServiceName is how Service Quotas names EC2 (its CLI example of get-service-quota for L-1216C47A).
const ec2ServiceName = "Amazon Elastic Compute Cloud (Amazon EC2)"

// The patterns of GetServiceQuota's ServiceCode and QuotaCode (Service Quotas API Reference: GetServiceQuota,
// Request Parameters).
var (
	serviceCodeRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]{1,63}$`)
	quotaCodeRE   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9-]{1,128}$`)
)

// sqErr is a Service Quotas error: 400 but for its server-side ServiceException (500) and the fake's own
// NotImplemented (501).
func sqErr(code, format string, args ...any) *apiError {
	status := http.StatusBadRequest
	switch code {
	case "ServiceException":
		status = http.StatusInternalServerError
	case "NotImplemented":
		status = http.StatusNotImplemented
	}
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// sqMetric is a quota's UsageMetric: the CloudWatch metric of what is in use.
type sqMetric struct {
	MetricNamespace               string            `json:"MetricNamespace"`
	MetricName                    string            `json:"MetricName"`
	MetricDimensions              map[string]string `json:"MetricDimensions"`
	MetricStatisticRecommendation string            `json:"MetricStatisticRecommendation"`
}

// sqQuota is the ServiceQuota shape GetServiceQuota answers.
type sqQuota struct {
	ServiceCode string    `json:"ServiceCode"`
	ServiceName string    `json:"ServiceName"`
	QuotaArn    string    `json:"QuotaArn"`
	QuotaCode   string    `json:"QuotaCode"`
	QuotaName   string    `json:"QuotaName"`
	Value       float64   `json:"Value"`
	Unit        string    `json:"Unit"`
	Adjustable  bool      `json:"Adjustable"`
	GlobalQuota bool      `json:"GlobalQuota"`
	UsageMetric *sqMetric `json:"UsageMetric,omitempty"`
}

// vcpuMetric is the usage metric of a vCPU quota of class ("Standard/OnDemand", "Standard/Spot"), as the
// CLI example of get-aws-default-service-quota for L-1216C47A shows it.
func vcpuMetric(class string) *sqMetric {
	return &sqMetric{MetricNamespace: "AWS/Usage", MetricName: "ResourceCount", MetricStatisticRecommendation: "Maximum",
		MetricDimensions: map[string]string{"Class": class, "Resource": "vCPU", "Service": "EC2", "Type": "Resource"}}
}

// ec2Quotas are the quotas of the service code ec2 the fake knows, by quota code, with the values of its
// options: the applied values, adjustable, per region.
func (s *Server) ec2Quotas(rg *region) map[string]sqQuota {
	quota := func(code, name string, value int, metric *sqMetric) sqQuota {
		return sqQuota{ServiceCode: "ec2", ServiceName: ec2ServiceName, QuotaArn: "arn:aws:servicequotas:" + rg.name + ":" + s.opts.AccountID + ":ec2/" + code,
			QuotaCode: code, QuotaName: name, Value: float64(max(value, 0)), Unit: "None", Adjustable: true, UsageMetric: metric}
	}
	return map[string]sqQuota{
		QuotaOnDemandStandardVCPUs: quota(QuotaOnDemandStandardVCPUs, "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", s.opts.MaxVCPUs, vcpuMetric("Standard/OnDemand")),
		QuotaSpotStandardVCPUs:     quota(QuotaSpotStandardVCPUs, "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests", s.opts.MaxSpotVCPUs, vcpuMetric("Standard/Spot")),
		QuotaElasticIPs:            quota(QuotaElasticIPs, "EC2-VPC Elastic IPs", s.opts.MaxElasticIPs, nil),
	}
}

// getServiceQuota answers a quota's applied value (Service Quotas API Reference: GetServiceQuota): a quota
// of the service code ec2 the fake knows; any other service or quota code is NoSuchResourceException. A
// resource-level quota (ContextId) is not modelled.
func (s *Server) getServiceQuota(rg *region, c *call) (any, *apiError) {
	var in struct {
		ServiceCode, QuotaCode, ContextId *string
	}
	if e := decode(c.body, &in); e != nil {
		return nil, e
	}
	if in.ContextId != nil {
		return nil, sqErr("NotImplemented", "ec2fake does not model resource-level quotas (ContextId)")
	}
	for _, f := range []struct {
		name  string
		value *string
		re    *regexp.Regexp
	}{{"ServiceCode", in.ServiceCode, serviceCodeRE}, {"QuotaCode", in.QuotaCode, quotaCodeRE}} {
		if f.value == nil || !f.re.MatchString(*f.value) {
			return nil, sqErr("IllegalArgumentException", "Invalid %s: it is required and must match %s.", f.name, f.re.String())
		}
	}
	quotas := map[string]func(*region) map[string]sqQuota{"ec2": s.ec2Quotas, "vpc": s.vpcQuotas}[*in.ServiceCode]
	if quotas == nil {
		return nil, sqErr("NoSuchResourceException", "The request failed because the specified service does not exist.")
	}
	q, ok := quotas(rg)[*in.QuotaCode]
	if !ok {
		return nil, sqErr("NoSuchResourceException", "The request failed because the specified quota does not exist.")
	}
	return map[string]any{"Quota": q}, nil
}

// checkSQAction refuses an action Service Quotas has not, or that the caller's policies do not allow (R42,
// R51). The caller holds s.mu.
func (s *Server) checkSQAction(c *call) *apiError {
	if _, ok := sqActions[c.action]; !ok {
		return sqErr("UnknownOperationException", "")
	}
	return s.authorizeCall(c)
}
