package aws

import (
	"context"
	"slices"
	"strconv"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// A change of the number of instances between two counts above one is an Update (Update, resizeMembers);
// to or from one it is a replacement, at plan time: a proxy of one has no load balancer, and its address is
// its instance's.
//
// Fewer: the members from the new count up leave the target group first, so the load balancer sends them no
// new connection and lets the open ones finish (its deregistration delay, 300 seconds unless the target
// group says otherwise), then are terminated and their parameters deleted; only then does the proxy record
// the new count. More: the proxy records the new count first, so the members it lacks are Gone, and
// restoreMembers makes them as it makes a member lost behind Terraform's back (its subnet by its number,
// its own parameters, registered with the target group). A change cut anywhere leaves a proxy that Get reads
// as Degraded, with the members it lacks Gone, and that the next Update finishes; Delete deletes the
// parameters of every member up to the count recorded, which is never below a member that has them.

// planCount is the number of instances an Update of the proxy of n asks for: spec's when both are above
// one, n otherwise (a change to or from one is a replacement, never an Update).
func planCount(spec backend.Spec, n int) int {
	if o, ok := spec.Placement.Options.(*Options); ok && o != nil && o.Instances > 1 && n > 1 {
		return o.Instances
	}
	return n
}

// resizeMembers brings the proxy named spec.Name, whose first instance is first, its live members members
// and its recorded count n, to target instances: the members from target up removed (shrinkMembers), then
// target recorded (recordCount). The members a larger count lacks are made by restoreMembers after. Nothing
// is called when n is target and no member is above it.
func (b *Backend) resizeMembers(ctx context.Context, r *region, spec backend.Spec, first *ec2types.Instance, members map[int]*ec2types.Instance, n, target int) error {
	if target > MaxInstances {
		return backend.Permanent(instanceObject(r.name, spec.Name), "aws.instances must be between 1 and %d, got %d", MaxInstances, target)
	}
	above := false
	for k := range members {
		above = above || k >= target
	}
	if n == target && !above {
		return nil
	}
	if err := b.shrinkMembers(ctx, r, spec, members, n, target); err != nil {
		return err
	}
	return b.recordCount(ctx, r, spec, first, members, target)
}

// shrinkMembers removes members target to n-1 and any live one above (a larger count cut before it was
// recorded): out of the target group, waited for until the load balancer has let go of them (drained), then
// terminated, then their parameters deleted.
func (b *Backend) shrinkMembers(ctx context.Context, r *region, spec backend.Spec, members map[int]*ec2types.Instance, n, target int) error {
	var ids []string
	last := n
	for k, in := range members {
		if k < target {
			continue
		}
		last = max(last, k+1)
		tags := tagMap(in.Tags)
		if err := backend.OwnershipOf(ctx).Check(memberObject(r.name, spec.Name, k), tags[backend.LabelOwner], tags[backend.LabelUID]); err != nil {
			return err
		}
		if !memberGone(in) {
			ids = append(ids, awssdk.ToString(in.InstanceId))
		}
	}
	slices.Sort(ids)
	if len(ids) > 0 {
		if err := b.deregisterMembers(ctx, r, spec.Name, ids); err != nil {
			return err
		}
		if err := b.terminate(ctx, r, instanceObject(r.name, spec.Name), ids); err != nil {
			return err
		}
	}
	for k := last - 1; k >= target; k-- {
		if err := b.deleteParameters(ctx, r, memberParameters(spec.Name, k), true); err != nil {
			return err
		}
	}
	return nil
}

// deregisterMembers takes the instances ids out of the proxy's target group and waits until the load
// balancer no longer lists them (draining ends once their open connections close or the group's
// deregistration delay passes). No target group: nothing to leave.
func (b *Backend) deregisterMembers(ctx context.Context, r *region, proxy string, ids []string) error {
	l, _, _, err := b.findLoadBalancer(ctx, r, proxy)
	if err != nil || l.targetGroup == nil {
		return err
	}
	obj := targetGroupObject(r.name, proxy)
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		_, err := r.elb.DeregisterTargets(ctx, &elb.DeregisterTargetsInput{TargetGroupArn: l.targetGroup.TargetGroupArn, Targets: targetsOf(ids)})
		return classify(obj, err)
	})
	if err != nil {
		return err
	}
	return b.pollUntil(ctx, obj, "the load balancer to drain the removed instances' connections", func(ctx context.Context) (bool, error) {
		health, err := b.targetHealth(ctx, r, proxy, l.targetGroup)
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(ids, func(id string) bool { _, listed := health[id]; return listed }), nil
	})
}

// recordCount records target as the proxy's count: in its settings parameter (what Get and Delete read) and
// as TagInstances on its first instance (what Update reads) and on its members below target.
func (b *Backend) recordCount(ctx context.Context, r *region, spec backend.Spec, first *ec2types.Instance, members map[int]*ec2types.Instance, target int) error {
	obj := instanceObject(r.name, spec.Name)
	st, ok, _, err := b.readStoredSpec(ctx, r, spec.Name)
	if err != nil {
		return err
	}
	if !ok {
		return backend.Permanent(obj, "its settings parameter is gone or does not parse: its number of instances cannot change; replace the proxy")
	}
	if st.Instances != target {
		st.Instances = target
		if err := b.putSettings(ctx, r, spec, st); err != nil {
			return err
		}
	}
	ids := []string{awssdk.ToString(first.InstanceId)}
	for k, in := range members {
		if k < target && !memberGone(in) {
			ids = append(ids, awssdk.ToString(in.InstanceId))
		}
	}
	slices.Sort(ids)
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		_, err := r.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: ids, Tags: ec2Tags(map[string]string{TagInstances: strconv.Itoa(target)})})
		return classify(obj, err)
	})
}

// terminate terminates the instances ids and waits until each has.
func (b *Backend) terminate(ctx context.Context, r *region, obj string, ids []string) error {
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
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
