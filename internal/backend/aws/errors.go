package aws

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	smithy "github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// classify gives err a class and names the object, keeping the service's message whole; a Quota error gets
// the advice of this backend, and a permission the credentials lack the document that grants it.
func classify(object string, err error) error {
	return backend.Classify(object, err, classOf, func(e *backend.Error) {
		if e.Class == backend.ClassQuota && e.Advice == "" {
			e.Advice = quotaAdvice[errorCode(err)]
			if e.Advice == "" {
				e.Advice = QuotaAdvice
			}
		}
		if e.Advice == "" {
			e.Advice = permissionAdvice(err)
		}
	})
}

// QuotaAdvice is what a user can do about a Quota error of this backend.
const QuotaAdvice = "The account's EC2 limits in this region are reached (instances, vCPUs or Elastic IPs). Free some " +
	"(terminate unused instances, release unused Elastic IPs), or ask for an increase in Service Quotas, then apply again."

// quotaAdvice is the advice of a quota that is not an account's EC2 limits.
var quotaAdvice = map[string]string{
	"RulesPerSecurityGroupLimitExceeded": RulesAdvice,
	"LimitExceeded":                      IAMQuotaAdvice,
}

// IAMQuotaAdvice is what a user can do when IAM refuses the proxy's own role or instance profile over a quota.
const IAMQuotaAdvice = "The account's IAM quotas are reached (roles and instance profiles, 1,000 each by default; one role per " +
	"instance profile): delete unused ones, ask for an increase, or give the proxy an instance profile of your own " +
	"(iam_instance_profile instead of create_instance_role), then apply again."

// RulesAdvice is what a user can do when the proxy's clients do not fit in its security group.
const RulesAdvice = "Each range of allowed_client_cidrs is one inbound rule of the proxy's security group (each range of " +
	"metrics.allowed_client_cidrs two, one per metrics port), and the region's quota " +
	"\"Inbound or outbound rules per security group\" (Service Quotas, VPC, L-0EA8095F; 60 by default, counted apart for IPv4 and " +
	"IPv6) is reached: list fewer, wider ranges, split the clients across proxies, or ask for an increase, then apply again."

// The error codes EC2, SSM and Service Quotas answer, by what can be done about them ("EC2 API Reference: Error
// codes"; "AWS Systems Manager API Reference: Common Errors"; "Service Quotas API Reference").
var (
	quotaCodes = map[string]bool{
		"InstanceLimitExceeded": true, "VcpuLimitExceeded": true, "AddressLimitExceeded": true,
		"MaxSpotInstanceCountExceeded": true, "ParameterLimitExceeded": true, "ResourceLimitExceeded": true,
		"RulesPerSecurityGroupLimitExceeded": true,
		// Elastic Load Balancing's quotas ("ELBv2 API Reference": CreateLoadBalancer, CreateTargetGroup,
		// CreateListener, RegisterTargets, Errors).
		"TooManyLoadBalancers": true, "TooManyTargetGroups": true, "TooManyListeners": true, "TooManyTargets": true,
		// IAM's quotas of roles and instance profiles per account ("IAM API Reference": CreateRole, Errors).
		"LimitExceeded": true,
		// CloudWatch Logs' quotas (log groups per region): "CloudWatch Logs API Reference", CreateLogGroup, Errors.
		"LimitExceededException": true,
	}
	transientCodes = map[string]bool{
		"InsufficientInstanceCapacity": true, "RequestLimitExceeded": true, "Throttling": true, "ThrottlingException": true,
		"InternalError": true, "InternalServerError": true, "ServiceUnavailable": true, "Unavailable": true,
		"InsufficientAddressCapacity": true, "DependencyViolation": true, "IncorrectInstanceState": true,
		"InvalidInstanceID.NotFound.Eventual": true, "TooManyUpdates": true,
		// Service Quotas' throttling (Service Quotas API Reference: GetServiceQuota, Errors).
		"TooManyRequestsException": true,
		// IAM's: a change to the same entity under way, a failure of its own ("IAM API Reference": Common Errors).
		"ConcurrentModification": true, "ServiceFailure": true,
		// CloudWatch Logs': its service down, a change to the same group under way ("CloudWatch Logs API
		// Reference": Common Errors, OperationAbortedException).
		"ServiceUnavailableException": true, "OperationAbortedException": true,
	}
	notFoundCodes = map[string]bool{
		"InvalidInstanceID.NotFound": true, "InvalidGroup.NotFound": true, "InvalidAllocationID.NotFound": true,
		"ParameterNotFound": true, "InvalidAssociationID.NotFound": true,
	}
)

// classOf reads the service's error code (smithy.APIError); failing that, the HTTP status and the transport.
func classOf(err error) (backend.Class, string) {
	var api smithy.APIError
	if errors.As(err, &api) {
		code := api.ErrorCode()
		switch {
		case quotaCodes[code]:
			return backend.ClassQuota, ""
		case transientCodes[code]:
			return backend.ClassTransient, ""
		case notFoundCodes[code]:
			return backend.ClassNotFound, ""
		}
		var resp *smithyhttp.ResponseError
		if errors.As(err, &resp) && resp.HTTPStatusCode() >= 500 {
			return backend.ClassTransient, ""
		}
		return backend.ClassPermanent, ""
	}
	// The SDK's retryer gave up on throttling or a 5xx: still transient for the provider's own retry.
	var maxAttempts *retry.MaxAttemptsError
	if errors.As(err, &maxAttempts) {
		return backend.ClassTransient, ""
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return backend.ClassTransient, ""
	}
	var ne net.Error
	var errno syscall.Errno
	if errors.As(err, &ne) || errors.As(err, &errno) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return backend.ClassTransient, ""
	}
	return backend.ClassUnclassified, ""
}

// errorCode is the service's error code of err, "" when it has none.
func errorCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}
