package ec2fake

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
)

// What a rule's test reads back after a change, read as a client reads it: over the wire, through the
// SDK's Describe and Get calls, never from the fake's memory, so that the rule holds for the client and
// not only inside the fake.

// group is one security group as DescribeSecurityGroups answers it.
func (h *harness) group(id string) ec2types.SecurityGroup {
	h.t.Helper()
	out, err := h.ec2.DescribeSecurityGroups(h.ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: []string{id}})
	h.ok("DescribeSecurityGroups "+id, err)
	if len(out.SecurityGroups) != 1 {
		h.t.Fatalf("DescribeSecurityGroups %s answered %d groups", id, len(out.SecurityGroups))
	}
	return out.SecurityGroups[0]
}

// groupCount counts the region's security groups, page by page.
func (h *harness) groupCount() int {
	h.t.Helper()
	n := 0
	pages := ec2.NewDescribeSecurityGroupsPaginator(h.ec2, &ec2.DescribeSecurityGroupsInput{MaxResults: aws.Int32(1000)})
	for pages.HasMorePages() {
		out, err := pages.NextPage(h.ctx)
		h.ok("DescribeSecurityGroups", err)
		n += len(out.SecurityGroups)
	}
	return n
}

// permissionList lists described permissions, one "protocol from-to source" a range or source group.
func permissionList(perms []ec2types.IpPermission) []string {
	var out []string
	for _, p := range perms {
		ports := fmt.Sprintf("%s %d-%d", aws.ToString(p.IpProtocol), aws.ToInt32(p.FromPort), aws.ToInt32(p.ToPort))
		for _, r := range p.IpRanges {
			out = append(out, ports+" "+aws.ToString(r.CidrIp))
		}
		for _, g := range p.UserIdGroupPairs {
			out = append(out, ports+" "+aws.ToString(g.GroupId))
		}
	}
	return out
}

// ingress is a group's inbound permissions as DescribeSecurityGroups answers them (permissionList).
func (h *harness) ingress(id string) []string {
	h.t.Helper()
	return permissionList(h.group(id).IpPermissions)
}

// egress is a group's outbound permissions as DescribeSecurityGroups answers them (permissionList).
func (h *harness) egress(id string) []string {
	h.t.Helper()
	return permissionList(h.group(id).IpPermissionsEgress)
}

// address is one Elastic IP as DescribeAddresses answers it.
func (h *harness) address(allocationID string) ec2types.Address {
	h.t.Helper()
	out, err := h.ec2.DescribeAddresses(h.ctx, &ec2.DescribeAddressesInput{AllocationIds: []string{allocationID}})
	h.ok("DescribeAddresses "+allocationID, err)
	if len(out.Addresses) != 1 {
		h.t.Fatalf("DescribeAddresses %s answered %d addresses", allocationID, len(out.Addresses))
	}
	return out.Addresses[0]
}

// instanceTags are an instance's tags as DescribeInstances answers them.
func (h *harness) instanceTags(id string) map[string]string {
	h.t.Helper()
	in, err := h.describe(id)
	h.ok("DescribeInstances "+id, err)
	return tagMap(in.Tags)
}

// subnetTags are a subnet's tags as DescribeSubnets answers them.
func (h *harness) subnetTags(id string) map[string]string {
	h.t.Helper()
	out, err := h.ec2.DescribeSubnets(h.ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{id}})
	h.ok("DescribeSubnets "+id, err)
	if len(out.Subnets) != 1 {
		h.t.Fatalf("DescribeSubnets %s answered %d subnets", id, len(out.Subnets))
	}
	return tagMap(out.Subnets[0].Tags)
}

// parameter is a parameter as GetParameter answers it, decrypted.
func (h *harness) parameter(name string) (*ssmtypes.Parameter, error) {
	out, err := h.ssm.GetParameter(h.ctx, &ssm.GetParameterInput{Name: aws.String(name), WithDecryption: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	return out.Parameter, nil
}

// parameterTags are a parameter's tags as ListTagsForResource answers them.
func (h *harness) parameterTags(name string) map[string]string {
	h.t.Helper()
	out, err := h.ssm.ListTagsForResource(h.ctx, &ssm.ListTagsForResourceInput{ResourceType: ssmtypes.ResourceTypeForTaggingParameter, ResourceId: aws.String(name)})
	h.ok("ListTagsForResource "+name, err)
	tags := map[string]string{}
	for _, t := range out.TagList {
		tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return tags
}
