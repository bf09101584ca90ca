package aws

import (
	"fmt"
	"regexp"
)

// EC2's resource ids are a prefix and 8 or 17 hex digits ("Resource IDs" in the EC2 user guide).
var (
	subnetIDRE     = regexp.MustCompile(`^subnet-([0-9a-f]{8}|[0-9a-f]{17})$`)
	groupIDRE      = regexp.MustCompile(`^sg-([0-9a-f]{8}|[0-9a-f]{17})$`)
	amiRE          = regexp.MustCompile(`^ami-([0-9a-f]{8}|[0-9a-f]{17})$`)
	allocationIDRE = regexp.MustCompile(`^eipalloc-([0-9a-f]{8}|[0-9a-f]{17})$`)
	// instanceTypeRE: family, generation and attributes, a dot, a size ("Amazon EC2 instance type naming
	// conventions").
	instanceTypeRE = regexp.MustCompile(`^[a-z][a-z0-9-]*\.[a-z0-9-]+$`)
	// instanceProfileRE: a name of IAM's characters (1 to 128), or an instance profile's ARN.
	instanceProfileRE = regexp.MustCompile(`^([\w+=,.@-]{1,128}|arn:aws[a-z-]*:iam::[0-9]{12}:instance-profile/[\w+=,.@/-]{1,128})$`)
)

func idValidator(what string, re *regexp.Regexp, example string) func(string) error {
	return func(s string) error {
		if !re.MatchString(s) {
			return fmt.Errorf("%q is not %s id such as %s", s, what, example)
		}
		return nil
	}
}

// Validators of the resource's settings, for the provider's plan-time checks.
var (
	ValidateSubnetID        = idValidator("a subnet", subnetIDRE, "subnet-0123456789abcdef0")
	ValidateSecurityGroupID = idValidator("a security group", groupIDRE, "sg-0123456789abcdef0")
	ValidateAMI             = idValidator("an image (AMI)", amiRE, "ami-0123456789abcdef0")
	ValidateAllocationID    = idValidator("an Elastic IP allocation", allocationIDRE, "eipalloc-0123456789abcdef0")
)

// ValidateInstanceType accepts the shape of an instance type, such as t3.micro.
func ValidateInstanceType(s string) error {
	if !instanceTypeRE.MatchString(s) {
		return fmt.Errorf("%q is not an instance type such as t3.micro", s)
	}
	return nil
}

// ValidateInstanceProfile accepts an instance profile's name or ARN.
func ValidateInstanceProfile(s string) error {
	if !instanceProfileRE.MatchString(s) {
		return fmt.Errorf("%q is not an instance profile name or ARN (arn:aws:iam::123456789012:instance-profile/NAME)", s)
	}
	return nil
}
