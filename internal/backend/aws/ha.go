package aws

import (
	"context"
	"sort"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
)

// A proxy of several instances (Options.Instances > 1) is its first instance, member 0, made and read as a
// proxy of one is (the id, the parameters, the security group, the instance role and log group are its),
// and members 1 to n-1: instances of the same Name with TagMember, each in its subnet (memberSubnet), each
// reading its own parameters (memberParameters) bound to it alone, so that Reconfigure reaches them one at
// a time; and the load balancer in front of them all (loadBalancer.go).

// findMembers are the live members k > 0 of the proxy named name, by k: this provider's, with TagMember.
func (b *Backend) findMembers(ctx context.Context, r *region, name string) (map[int]*ec2types.Instance, error) {
	out := map[int]*ec2types.Instance{}
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		clear(out)
		res, err := r.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
			{Name: awssdk.String("tag:" + tagName), Values: []string{name}},
			{Name: awssdk.String("tag-key"), Values: []string{TagMember}},
			{Name: awssdk.String("instance-state-name"), Values: liveStates},
		}})
		if err != nil {
			return classify(instanceObject(r.name, name), err)
		}
		for _, rs := range res.Reservations {
			for i := range rs.Instances {
				in := &rs.Instances[i]
				if k := memberOf(in); k > 0 && managed(tagMap(in.Tags)) {
					out[k] = in
				}
			}
		}
		return nil
	})
	return out, err
}

// memberSpec is spec as member k's parameters are written and bound: under memberParameters.
func memberSpec(spec backend.Spec, k int) backend.Spec {
	spec.Name = memberParameters(spec.Name, k)
	return spec
}

// ensureMembers launches members 1 to n-1 that an earlier attempt did not (adopting those of this proxy's
// UID, refusing another's), each with its own parameters written first and bound to it once it exists,
// waits for each to run, then makes the load balancer over them all. It returns the members' instance ids,
// member 0's first.
func (b *Backend) ensureMembers(ctx context.Context, r *region, spec backend.Spec, o Options, groupID string, place placement, first *ec2types.Instance) ([]string, error) {
	ids := []string{awssdk.ToString(first.InstanceId)}
	existing, err := b.findMembers(ctx, r, spec.Name)
	if err != nil {
		return ids, err
	}
	if o.CreateInstanceRole {
		// Made for member 0 already: this finds it, for its profile's name.
		if o.IAMInstanceProfile, err = b.ensureInstanceRole(ctx, r, spec, o); err != nil {
			return ids, err
		}
	}
	for k := 1; k < o.instances(); k++ {
		obj := memberObject(r.name, spec.Name, k)
		in := existing[k]
		if in != nil {
			if err := (backend.Ownership{Owner: spec.Owner}).Check(obj, tagMap(in.Tags)[backend.LabelOwner], tagMap(in.Tags)[backend.LabelUID]); err != nil {
				return ids, err
			}
			if uid := tagMap(in.Tags)[backend.LabelUID]; uid != spec.UID {
				return ids, backend.Permanent(obj, "was left by proxy %s of this name: delete that proxy (egress_proxy_orphans lists it), then apply again", uid)
			}
		}
		ms := memberSpec(spec, k)
		rendered, err := renderParameters(ms.Name, spec.Proxy, guest.FormatLatest)
		if err != nil {
			return ids, backend.NewError(backend.ClassPermanent, obj, err)
		}
		if err := b.putParameters(ctx, r, ms, newStoredSpec(spec.Proxy, o, rendered), rendered, ""); err != nil {
			return ids, err
		}
		fresh := in == nil
		if fresh {
			if in, err = b.runInstance(ctx, r, spec, o, groupID, k); err != nil {
				return ids, err
			}
		}
		id := awssdk.ToString(in.InstanceId)
		ids = append(ids, id)
		if err := b.bindParameters(ctx, r, ms, id, fresh, rendered); err != nil {
			return ids, err
		}
		if _, err := b.waitRunning(ctx, r, obj, id); err != nil {
			return ids, err
		}
		if o.WaitForProxy {
			if err := b.waitApplied(ctx, r, ms.Name, rendered); err != nil {
				return ids, err
			}
		}
	}
	_, err = b.ensureLoadBalancer(ctx, r, spec, place.vpcID, place.subnetIDs(), ids)
	return ids, err
}

// readMembers fills a proxy of several instances in: its members with their health as the load balancer's
// target group reports it, the load balancer's address and DNS name, and State from the members while the
// first instance runs. Nothing for a proxy of one (want, its settings' instances).
func (b *Backend) readMembers(ctx context.Context, r *region, first *ec2types.Instance, inst *backend.Instance, want int) error {
	if want <= 1 {
		return nil // a proxy of one, read as it always was
	}
	members, err := b.findMembers(ctx, r, inst.Name)
	if err != nil {
		return err
	}
	l, _, _, err := b.findLoadBalancer(ctx, r, inst.Name)
	if err != nil {
		return err
	}
	health, err := b.targetHealth(ctx, r, inst.Name, l.targetGroup)
	if err != nil {
		return err
	}
	members[0] = first
	keys := make([]int, 0, len(members))
	for k := range members {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		in := members[k]
		id := awssdk.ToString(in.InstanceId)
		m := backend.Member{Name: id, Scope: awssdk.ToString(in.Placement.AvailabilityZone),
			InternalAddress: awssdk.ToString(in.PrivateIpAddress), EgressAddress: awssdk.ToString(in.PublicIpAddress)}
		switch h, ok := health[id]; {
		case !ok:
			m.Reason = "not registered with the load balancer's target group"
		case h.State == elbtypes.TargetHealthStateEnumHealthy:
			m.Healthy = true
		default:
			m.Reason = string(h.State)
			if h.Reason != "" {
				m.Reason += " (" + string(h.Reason) + ")"
			}
			if d := awssdk.ToString(h.Description); d != "" {
				m.Reason += ": " + d
			}
		}
		inst.Members = append(inst.Members, m)
	}
	address, dnsName := l.addresses()
	inst.InternalAddress, inst.InternalName = address, dnsName
	inst.EgressAddress, inst.IngressAddress = "", ""
	if inst.State == backend.StateRunning {
		inst.State = backend.DegradedState(inst.Members)
	}
	return nil
}

// terminateMembers terminates members 1 to n-1 and waits until they are gone.
func (b *Backend) terminateMembers(ctx context.Context, r *region, name string) error {
	members, err := b.findMembers(ctx, r, name)
	if err != nil || len(members) == 0 {
		return err
	}
	var ids []string
	for k, in := range members {
		tags := tagMap(in.Tags)
		if err := backend.OwnershipOf(ctx).Check(memberObject(r.name, name, k), tags[backend.LabelOwner], tags[backend.LabelUID]); err != nil {
			return err
		}
		ids = append(ids, awssdk.ToString(in.InstanceId))
	}
	sort.Strings(ids)
	obj := instanceObject(r.name, name)
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		_, err := r.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids})
		return classify(obj, err)
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := b.waitTerminated(ctx, r, obj, id); err != nil {
			return err
		}
	}
	return nil
}
