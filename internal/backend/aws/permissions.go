package aws

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	smithy "github.com/aws/smithy-go"
)

// The documents that grant what this backend needs, kept under examples/ and shown by the provider's
// documentation (AWS, Permissions). The tests load them as they are and run with nothing more
// (permissions_test.go), so a call added to the backend without its permission fails them.
const (
	// CallerPolicyFile is the identity-based policy of the credentials the provider calls AWS with.
	CallerPolicyFile = "examples/permissions/aws/caller-policy.json"
	// AssumeRolePolicyFile is what the credentials that assume a role (assume_role) need: sts:AssumeRole on
	// it. The role then needs CallerPolicyFile.
	AssumeRolePolicyFile = "examples/permissions/aws/assume-role-policy.json"
	// InstanceRolePolicyFile is the policy of the proxies' instance role: each instance reads and reports its
	// own proxy's parameters only (TagInstance).
	InstanceRolePolicyFile = "examples/permissions/aws/instance-role-policy.json"
)

// deniedCodes are what the services answer a request the caller's policies do not allow: EC2's
// UnauthorizedOperation, STS's and IAM's AccessDenied, SSM's and Service Quotas' AccessDeniedException.
var deniedCodes = map[string]bool{"UnauthorizedOperation": true, "AccessDenied": true, "AccessDeniedException": true}

// deniedRE reads the action and resource out of IAM's words for a denial: "User: <arn> is not authorized to
// perform: ec2:RunInstances on resource: <arn> because ..." (EC2 puts them before its encoded message).
var deniedRE = regexp.MustCompile(`not authorized to perform: ([a-zA-Z0-9-]+:[A-Za-z0-9*]+)(?: on resource: ([^ ]+))?`)

// iamPrefixes are the IAM service prefixes of the SDK clients' service ids.
var iamPrefixes = map[string]string{"EC2": "ec2", "SSM": "ssm", "STS": "sts", "Service Quotas": "servicequotas", "IAM": "iam", "CloudWatch Logs": "logs", "Elastic Load Balancing v2": "elasticloadbalancing"}

// MissingPermission is the IAM action an AWS denial says the credentials lack, and the resource when it
// names one; "" when err is no denial. Where the words name no action (EC2's older answers carry only the
// encoded message), the action is the operation's own, which is its IAM action for the calls this backend
// makes.
func MissingPermission(err error) (action, resource string) {
	if !deniedCodes[errorCode(err)] {
		return "", ""
	}
	if m := deniedRE.FindStringSubmatch(errorMessage(err)); m != nil {
		return m[1], strings.TrimSuffix(m[2], ".")
	}
	var op *smithy.OperationError
	if errors.As(err, &op) {
		if prefix := iamPrefixes[op.ServiceID]; prefix != "" {
			return prefix + ":" + op.OperationName, ""
		}
	}
	return "", ""
}

// permissionAdvice is what to do about a denial: grant the permission it names, from the document that
// holds it.
func permissionAdvice(err error) string {
	action, resource := MissingPermission(err)
	if action == "" {
		return ""
	}
	what := action
	if resource != "" && resource != "*" {
		what += " on " + resource
	}
	if action == "sts:AssumeRole" {
		return fmt.Sprintf("The credentials that assume the provider's role are not allowed %s. Grant them the policy in %s "+
			"(the provider's documentation shows it, under AWS, Permissions), check that the role's trust policy trusts them, then apply again.",
			what, AssumeRolePolicyFile)
	}
	return fmt.Sprintf("The AWS credentials the provider uses are not allowed %s. Grant them the policy in %s "+
		"(the provider's documentation shows it, under AWS, Permissions), which holds exactly what the provider calls, then apply again.",
		what, CallerPolicyFile)
}
