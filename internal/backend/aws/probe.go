package aws

import (
	"context"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
)

// probeProxy names the parameters the SSM probes read: a proxy name no proxy can have (names come from
// NameFromUID or the user, and are at most 63 characters of a DNS label; this one is longer), so the probes
// read nothing of anyone's.
const probeProxy = "egress-backends-permission-probe-of-a-name-no-proxy-can-have-ever"

// probe is one request Check makes to learn whether the caller may do something, changing nothing: an EC2
// dry run ("DryRun: Checks whether you have the required permissions for the operation, without actually
// making the request ... If you have the required permissions, the error response is DryRunOperation.
// Otherwise, it is UnauthorizedOperation."), or a read of parameters no proxy has.
type probe struct {
	what string
	call func(ctx context.Context, r *region) error
}

// probes ask for what a Create needs before it makes anything the policy conditions on tags: the launch, the
// security group and the Elastic IP, each with the provider's tags (and so ec2:CreateTags at creation), the
// reads of the subnet and groups, Debian's image parameter, the reads of a proxy's parameters, and the list of
// log groups every delete and list makes (logs.go). What needs
// an object of the provider's (its changes and deletes, conditioned on its tags), a write of parameters, the
// proxy's role (iam:PassRole; each proxy names its own) or a customer's key cannot be asked without making
// one: a Create that lacks them fails naming the permission and CallerPolicyFile.
var probes = []probe{
	{"the launch of a proxy's instance", func(ctx context.Context, r *region) error {
		ami, err := r.ssm.GetParameter(ctx, &ssm.GetParameterInput{Name: awssdk.String(debianAMIParameter + architectureOf(DefaultInstanceType))})
		if err != nil {
			return err
		}
		tags := ec2Tags(map[string]string{backend.LabelManagedBy: backend.ManagedByValue})
		_, err = r.ec2.RunInstances(ctx, &ec2.RunInstancesInput{DryRun: awssdk.Bool(true), ImageId: ami.Parameter.Value,
			InstanceType: DefaultInstanceType, MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1),
			TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: tags}, {ResourceType: ec2types.ResourceTypeVolume, Tags: tags}}})
		return err
	}},
	{"a proxy's security group", func(ctx context.Context, r *region) error {
		_, err := r.ec2.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{DryRun: awssdk.Bool(true), GroupName: awssdk.String(securityGroupName(probeProxy)),
			Description: awssdk.String("egress_backends permission probe"),
			TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeSecurityGroup,
				Tags: ec2Tags(map[string]string{backend.LabelManagedBy: backend.ManagedByValue})}}})
		return err
	}},
	{"a proxy's Elastic IP", func(ctx context.Context, r *region) error {
		_, err := r.ec2.AllocateAddress(ctx, &ec2.AllocateAddressInput{DryRun: awssdk.Bool(true), Domain: ec2types.DomainTypeVpc,
			TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeElasticIp,
				Tags: ec2Tags(map[string]string{backend.LabelManagedBy: backend.ManagedByValue})}}})
		return err
	}},
	{"the subnets", func(ctx context.Context, r *region) error {
		_, err := r.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{DryRun: awssdk.Bool(true)})
		return err
	}},
	{"the security groups", func(ctx context.Context, r *region) error {
		_, err := r.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{DryRun: awssdk.Bool(true)})
		return err
	}},
	{"a proxy's parameters", func(ctx context.Context, r *region) error {
		_, err := r.ssm.GetParameters(ctx, &ssm.GetParametersInput{Names: []string{guest.ParameterPath(probeProxy, guest.ParameterSettings)}})
		return err
	}},
	{"a proxy's own log group, which every delete and list looks for", func(ctx context.Context, r *region) error {
		_, err := r.logs.DescribeLogGroups(ctx, &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: awssdk.String(ownLogGroup(probeProxy)), Limit: awssdk.Int32(1)})
		return err
	}},
	{"a proxy's parameters' tags", func(ctx context.Context, r *region) error {
		_, err := r.ssm.ListTagsForResource(ctx, &ssm.ListTagsForResourceInput{ResourceType: ssmtypes.ResourceTypeForTaggingParameter,
			ResourceId: awssdk.String(guest.ParameterPath(probeProxy, guest.ParameterSettings))})
		return err
	}},
}

// probePermissions runs the probes and returns the IAM actions AWS refused. An answer that is neither a yes
// (DryRunOperation, or the read's own answer) nor a denial (no default VPC for the dry runs, a throttled
// request) tells nothing, and is left: the reads Check makes besides report a region that does not answer.
func (b *Backend) probePermissions(ctx context.Context, r *region) ([]string, error) {
	var missing []string
	for _, p := range probes {
		err := p.call(ctx, r)
		if ctx.Err() != nil {
			return missing, ctx.Err()
		}
		if action, _ := MissingPermission(err); action != "" {
			missing = append(missing, action)
		}
	}
	return missing, nil
}
