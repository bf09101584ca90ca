package aws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// storedForChange reads the proxy's stored spec for an Update that changes what (its number of instances, its
// image) in place, which needs it: one gone or unreadable is Permanent, with the replacement as the way out.
func (b *Backend) storedForChange(ctx context.Context, r *region, name, what string) (storedSpec, error) {
	st, ok, _, err := b.readStoredSpec(ctx, r, name)
	if err == nil && !ok {
		err = backend.Permanent(instanceObject(r.name, name), "its settings parameter is gone or does not parse: its %s cannot change in place; replace the proxy", what)
	}
	return st, err
}

// recordCount records target as the proxy's count: in its settings parameter (what Get and Delete read) and
// as TagInstances on its first instance (what Update reads) and on its members below target.
func (b *Backend) recordCount(ctx context.Context, r *region, spec backend.Spec, first *ec2types.Instance, members map[int]*ec2types.Instance, target int) error {
	st, err := b.storedForChange(ctx, r, spec.Name, "number of instances")
	if err != nil {
		return err
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
		return classify(instanceObject(r.name, spec.Name), err)
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

// A new image over a proxy of several instances is an Update too (rollImage); for a proxy of one it is a
// replacement, at plan time. Each member keeps its instance, and so its id, addresses, role and parameters:
// its root volume is made again from the new image by a root volume replacement task (replaceRoot), and the
// instance reboots onto it. The first instance is the proxy's handle (its name, its parameters bound to its
// ARN), which a new instance could not take over.

// rollImage brings every member of the proxy of n instances whose first instance is first and whose root
// volume is not made from the image spec asks for to it, one instance at a time, the proxy serving
// throughout:
//
//  1. the image is recorded in the settings parameter, with Rolling, so that a member made again from now on
//     (restoreMembers) runs it, and Delete knows of the surge member;
//  2. a surge member, number n, is made with it (restoreMembers, its subnet by its number) and waited for
//     until its target is healthy;
//  3. each member on another image, the highest-numbered first and the first instance last, leaves the target
//     group (waited for until drained), gets its new root volume (replaceRoot), joins the group again and is
//     waited for until its target is healthy;
//  4. the surge member goes (shrinkMembers), and Rolling is cleared.
//
// So the proxy never has fewer than n instances serving, but for the largest count, MaxInstances, which has
// no room for a surge and takes its members out one by one. An Update cut anywhere leaves a proxy whose
// members run two images, or a surge member: Get names both images (membersImage) and lists the surge member,
// and the next plan asks for an Update, which goes on from where this one stopped. Nothing is called but a
// read when every member runs the image asked for and no roll is under way.
func (b *Backend) rollImage(ctx context.Context, r *region, spec backend.Spec, first *ec2types.Instance, n int) error {
	o, ok := spec.Placement.Options.(*Options)
	if !ok || o == nil || !amiRE.MatchString(o.AMI) {
		return nil // no image asked for (the proxy keeps its own), or one Get read as two
	}
	want := o.AMI
	st, err := b.storedForChange(ctx, r, spec.Name, "image")
	if err != nil {
		return err
	}
	members, err := b.findMembers(ctx, r, spec.Name)
	if err != nil {
		return err
	}
	members[0] = first
	var stale []int
	for k := n - 1; k >= 0; k-- {
		if in := members[k]; in != nil && !memberGone(in) && imageOf(in) != want {
			stale = append(stale, k)
		}
	}
	if len(stale) == 0 && st.AMI == want && !st.Rolling {
		return nil
	}
	if st.AMI != want || !st.Rolling {
		st.AMI, st.Rolling = want, true
		if err := b.putSettings(ctx, r, spec, st); err != nil {
			return err
		}
	}
	vpcID := awssdk.ToString(first.VpcId)
	if len(stale) > 0 && n < MaxInstances {
		if err := b.restoreMembers(ctx, r, spec, first, members, n+1); err != nil {
			return err
		}
		// Listed again for the surge member restoreMembers may have launched; the others are the same instances.
		if members, err = b.findMembers(ctx, r, spec.Name); err != nil {
			return err
		}
		members[0] = first
		if in := members[n]; in != nil {
			if err := b.waitTargetHealthy(ctx, r, spec.Name, memberObject(r.name, spec.Name, n), awssdk.ToString(in.InstanceId)); err != nil {
				return err
			}
		}
	}
	for _, k := range stale {
		id := awssdk.ToString(members[k].InstanceId)
		mobj := memberObject(r.name, spec.Name, k)
		if err := b.deregisterMembers(ctx, r, spec.Name, []string{id}); err != nil {
			return err
		}
		if err := b.replaceRoot(ctx, r, mobj, id, want); err != nil {
			return err
		}
		if err := b.ensureLoadBalancer(ctx, r, spec, vpcID, st.SubnetIDs, []string{id}); err != nil {
			return err
		}
		if err := b.waitTargetHealthy(ctx, r, spec.Name, mobj, id); err != nil {
			return err
		}
	}
	// shrinkMembers takes only the members from n up: here the surge member.
	if err := b.shrinkMembers(ctx, r, spec, members, n, n); err != nil {
		return err
	}
	st.Rolling = false
	return b.putSettings(ctx, r, spec, st)
}

// replaceRoot makes the root volume of the instance id (the member obj names) again from image, by a root volume
// replacement task: the instance keeps its id, addresses, role and parameters, and reboots onto the new volume,
// the old one deleted. It waits until the task has succeeded, then records the image on the instance
// (TagImage). The new volume is left with the tags EC2 gives it: the caller policy lets the provider tag
// only what carries its tags already, or what it makes with them, and EC2's documentation does not say
// that the replacement takes the old volume's. The task's client token is the instance's and the
// image's, so that an Update cut after the call and run again gets the same task back, not a second one.
func (b *Backend) replaceRoot(ctx context.Context, r *region, obj, id, image string) error {
	sum := sha256.Sum256([]byte(id + "/" + image))
	token := "egress-root-" + hex.EncodeToString(sum[:20])
	var task string
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		out, err := r.ec2.CreateReplaceRootVolumeTask(ctx, &ec2.CreateReplaceRootVolumeTaskInput{
			InstanceId: awssdk.String(id), ImageId: awssdk.String(image), DeleteReplacedRootVolume: awssdk.Bool(true),
			ClientToken: awssdk.String(token),
		})
		if err != nil {
			return classify(obj, err)
		}
		task = awssdk.ToString(out.ReplaceRootVolumeTask.ReplaceRootVolumeTaskId)
		return nil
	})
	if err != nil {
		return err
	}
	err = b.pollUntil(ctx, obj, "its root volume to be made again from image "+image, func(ctx context.Context) (bool, error) {
		out, err := r.ec2.DescribeReplaceRootVolumeTasks(ctx, &ec2.DescribeReplaceRootVolumeTasksInput{ReplaceRootVolumeTaskIds: []string{task}})
		if err != nil {
			return false, classify(obj, err)
		}
		for _, t := range out.ReplaceRootVolumeTasks {
			switch t.TaskState {
			case ec2types.ReplaceRootVolumeTaskStateSucceeded:
				return true, nil
			case ec2types.ReplaceRootVolumeTaskStateFailed:
				return false, backend.Permanent(obj, "EC2 could not make its root volume again from image %s (task %s failed; the instance runs on its old volume): "+
					"check that the image has the instance's architecture and virtualization type, then apply again", image, task)
			case ec2types.ReplaceRootVolumeTaskStateFailedDetached:
				return false, backend.Permanent(obj, "EC2 could not make its root volume again from image %s, and left the instance without one (task %s failed-detached): "+
					"replace the proxy", image, task)
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		_, err := r.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: ec2Tags(map[string]string{TagImage: image})})
		return classify(obj, err)
	})
}
