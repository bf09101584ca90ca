package aws

import (
	"context"
	"fmt"
	"strconv"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// placement is where a proxy's instances run: the VPC and the subnets, in the order the options give them.
type placement struct {
	vpcID   string
	subnets []ec2types.Subnet
	several bool
}

// instances is how many instances serve the proxy.
func (o Options) instances() int { return max(o.Instances, 1) }

// subnets are the subnets the instances are spread over: SubnetIDs for several, SubnetID for one.
func (o Options) subnets() []string {
	if len(o.SubnetIDs) > 0 {
		return o.SubnetIDs
	}
	return []string{o.SubnetID}
}

// memberSubnet is member k's subnet: the members go round the subnets in order.
func (o Options) memberSubnet(k int) string {
	s := o.subnets()
	return s[k%len(s)]
}

// validateInstances refuses what no proxy of several instances can be: a count out of range, several in one
// subnet (or subnet_id with subnet_ids), an Elastic IP (each member has its own public address; one
// address for all is not what a load balancer's members can share).
func (o Options) validateInstances() error {
	switch n := o.Instances; {
	case n < 0 || n > MaxInstances:
		return fmt.Errorf("aws.instances must be between 1 and %d, got %d", MaxInstances, n)
	case n <= 1 && len(o.SubnetIDs) > 0:
		return fmt.Errorf("aws.subnet_ids is for several instances: with one, set aws.subnet_id")
	case n <= 1:
		return nil
	case o.SubnetID != "":
		return fmt.Errorf("aws.instances = %d spreads the instances over aws.subnet_ids, one subnet per Availability Zone: set subnet_ids instead of subnet_id", n)
	case len(o.SubnetIDs) < 2:
		return fmt.Errorf("aws.instances = %d needs aws.subnet_ids in at least two Availability Zones, got %d subnet(s)", n, len(o.SubnetIDs))
	case o.StaticEgressIP || o.EIPAllocationID != "":
		return fmt.Errorf("aws.instances = %d: static_egress_ip and eip_allocation_id give one instance an Elastic IP; each of several instances has its own public address", n)
	}
	return nil
}

// placementOf reads the subnets of o: each must exist, and for several instances all must be in one VPC and
// each in its own Availability Zone, where the load balancer has a node.
func (b *Backend) placementOf(ctx context.Context, r *region, o Options) (placement, error) {
	ids := o.subnets()
	var found []ec2types.Subnet
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		out, err := r.ec2.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: ids})
		if err != nil {
			return classify(fmt.Sprintf("aws subnets %v in region %s", ids, r.name), err)
		}
		found = out.Subnets
		return nil
	})
	if err != nil {
		return placement{}, err
	}
	p := placement{several: o.instances() > 1}
	zones := map[string]string{}
	for _, id := range ids {
		var sn *ec2types.Subnet
		for i := range found {
			if awssdk.ToString(found[i].SubnetId) == id {
				sn = &found[i]
			}
		}
		obj := fmt.Sprintf("aws subnet %s in region %s", id, r.name)
		if sn == nil {
			return placement{}, backend.Permanent(obj, "no such subnet: set aws.subnet_id (or subnet_ids) to the region's")
		}
		vpc, zone := awssdk.ToString(sn.VpcId), awssdk.ToString(sn.AvailabilityZone)
		if p.vpcID != "" && vpc != p.vpcID {
			return placement{}, backend.Permanent(obj, "is in VPC %s, not in %s with the other subnets: aws.subnet_ids must be of one VPC", vpc, p.vpcID)
		}
		if other, dup := zones[zone]; dup && p.several {
			return placement{}, backend.Permanent(obj, "is in Availability Zone %s, as subnet %s is: aws.subnet_ids must each be in their own zone", zone, other)
		}
		p.vpcID, zones[zone] = vpc, id
		p.subnets = append(p.subnets, *sn)
	}
	return p, nil
}

// healthRanges are the ranges the load balancer's health checks come from, the subnets of its nodes; none
// for one instance.
func (p placement) healthRanges() []string {
	if !p.several {
		return nil
	}
	var out []string
	for _, sn := range p.subnets {
		out = append(out, awssdk.ToString(sn.CidrBlock))
	}
	return out
}

func (p placement) subnetIDs() []string {
	var out []string
	for _, sn := range p.subnets {
		out = append(out, awssdk.ToString(sn.SubnetId))
	}
	return out
}

// TagMember marks member k > 0 of a proxy of several instances, with k as its value: member 0, the first
// instance, carries none, so that a proxy of one is tagged as it always was. Every member carries the
// proxy's Name.
const TagMember = "egress-member"

// TagInstances is, on every instance of a proxy of several, how many it has: a delete of a proxy of one (no
// such tag) looks for no members and no load balancer, and costs what it always did.
const TagInstances = "egress-instances"

// TagImage is, on an instance whose root volume an image roll made again (rollImage), the image it was made
// from: DescribeInstances' ImageId is the image the instance was launched from, and EC2's documentation does
// not say that a root volume replacement changes it. An instance without the tag runs the image it was
// launched from (imageOf).
const TagImage = "egress-image"

// memberParameters names member k's parameters under guest.ParameterPrefix: the proxy's own for member 0, a
// path under them for the others, whose instance reads those only (each bound to its instance, TagInstance).
func memberParameters(proxy string, k int) string {
	if k == 0 {
		return proxy
	}
	return proxy + "/member-" + strconv.Itoa(k)
}

func memberObject(region, proxy string, k int) string {
	if k == 0 {
		return instanceObject(region, proxy)
	}
	return fmt.Sprintf("aws instance %s (member %d) in region %s", proxy, k, region)
}

// memberOf is an instance's member number: 0 for the proxy's first instance (no TagMember), -1 for a tag that
// does not parse.
func memberOf(in *ec2types.Instance) int {
	v, ok := tagMap(in.Tags)[TagMember]
	if !ok {
		return 0
	}
	k, err := strconv.Atoi(v)
	if err != nil || k < 1 {
		return -1
	}
	return k
}
