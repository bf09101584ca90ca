package aws

import (
	"fmt"
	"regexp"
	"strings"
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

// kmsKeyRE: a key id (a UUID, or mrk- and 32 hex digits for a multi-Region key), a key's ARN, an alias name
// (alias/...) or an alias's ARN ("KMS key identifiers (KeyId)" in the KMS developer guide).
var kmsKeyRE = regexp.MustCompile(`^(` +
	`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|mrk-[0-9a-f]{32}|alias/[a-zA-Z0-9/_-]{1,250}|` +
	`arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:(key/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|mrk-[0-9a-f]{32})|alias/[a-zA-Z0-9/_-]{1,250}))$`)

// ValidateKMSKeyID accepts a customer-managed KMS key's id, ARN, alias or alias ARN. AWS managed keys
// (alias/aws/...) are refused: alias/aws/ssm is what a proxy gets without the setting, and its key policy,
// which AWS writes, lets every principal of the account decrypt through SSM.
func ValidateKMSKeyID(s string) error {
	if !kmsKeyRE.MatchString(s) {
		return fmt.Errorf("%q is not a KMS key id, key ARN, alias (alias/NAME) or alias ARN", s)
	}
	if strings.HasPrefix(s, "alias/aws/") || strings.Contains(s, ":alias/aws/") {
		return fmt.Errorf("%q is an AWS managed key, which every principal of the account may use through SSM: name a customer-managed key", s)
	}
	return nil
}

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
