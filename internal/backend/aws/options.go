package aws

import "github.com/egress-proxies/terraform-provider-egress/internal/backend"

// Kind is this backend's kind: the first part of its ids and the name of its provider and resource blocks.
const Kind backend.Kind = "aws"

// IDForm is how this backend's ids look: the region is the target, and a region has no scope within it.
var IDForm = backend.IDForm{Kind: Kind, Parts: []string{"region", "name"}}

// Options holds the settings of a proxy on EC2. Empty values take the backend's defaults (see create.go).
type Options struct {
	// SubnetID is the subnet the instance runs in; its VPC holds the security group the backend makes.
	SubnetID string
	// Instances is how many instances serve the proxy (0 takes 1). One is the proxy as it always was: one
	// instance, no load balancer. Several sit behind an internal Network Load Balancer (ha_loadbalancer.go),
	// spread over SubnetIDs, one subnet per Availability Zone.
	Instances int
	// SubnetIDs are, for several instances, the subnets they are spread over (member i in SubnetIDs[i mod n]),
	// each in its own Availability Zone of one VPC: the load balancer has a node in each. SubnetID is then
	// empty.
	SubnetIDs []string
	// InstanceType is the EC2 instance type; DefaultInstanceType when empty.
	InstanceType string
	// AMI is the image; empty takes the latest Debian 12 image of the instance type's architecture, read
	// from the public SSM parameter Debian publishes.
	AMI string
	// SecurityGroupIDs are added to the security group the backend makes for the proxy port.
	SecurityGroupIDs []string
	// IAMInstanceProfile names the instance profile (name or ARN) whose role reads the proxy's parameters.
	IAMInstanceProfile string
	// CreateInstanceRole makes, instead, a role and an instance profile for this proxy alone, whose inline
	// policy allows its own parameters only (instancerole.go); Delete removes them. It needs the caller
	// policy's IAM statements, for accounts that let a deployment make roles.
	CreateInstanceRole bool
	// StaticEgressIP allocates an Elastic IP named after the proxy, kept across a replacement and released
	// on destroy. EIPAllocationID instead associates the user's own, which is never released.
	StaticEgressIP  bool
	EIPAllocationID string
	// KMSKeyID is the customer-managed KMS key (id, ARN, alias name or alias ARN) that encrypts the proxy's
	// secrets parameter; empty takes the account's alias/aws/ssm, which every principal of the account may
	// use through SSM. SSM asks KMS with the parameter's ARN as encryption context (PARAMETER_ARN), so a key
	// policy can allow the instance role to decrypt its own proxy's parameter only.
	KMSKeyID string
	// Spot asks for a Spot instance (one-time, terminated when interrupted).
	Spot bool
	// WaitForProxy makes Create wait (within its ctx) until the guest reports the configuration applied.
	WaitForProxy bool
	// CloudWatchLogs, when set, ships the proxy's access log to CloudWatch Logs (logs.go), which AWS charges
	// for by what it ingests and stores; nil keeps the log on the instance only.
	CloudWatchLogs *CloudWatchLogs
}
