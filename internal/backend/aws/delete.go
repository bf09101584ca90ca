package aws

import (
	"context"
	"fmt"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
)

// Delete terminates the instance and removes everything Create made for it: its Elastic IP (not the user's),
// its own log group (not a shared one), its security group and its parameters. A proxy already gone is success, and its leftovers are removed too.
func (b *Backend) Delete(ctx context.Context, id backend.ProviderID) error {
	return b.delete(ctx, id, false)
}

// DeleteForReplacement deletes as Delete does but keeps the Elastic IP the backend allocated and the proxy's own
// log group with its lines, tagged with the proxy's name, for the successor of that name to adopt; ListByTag does
// not list them as a proxy, and the successor's destroy releases and deletes them (a successor without
// CloudWatch Logs too).
func (b *Backend) DeleteForReplacement(ctx context.Context, id backend.ProviderID) error {
	return b.delete(ctx, id, true)
}

func (b *Backend) delete(ctx context.Context, id backend.ProviderID, keepAddress bool) error {
	if err := checkID(id); err != nil {
		return err
	}
	r, err := b.clients(ctx, id.Target)
	if err != nil {
		return err
	}
	obj := instanceObject(id.Target, id.Name)
	in, err := b.findInstance(ctx, r, id.Name)
	if err != nil {
		return err
	}
	// A proxy of several instances: the load balancer first, then the members beyond the first (ha.go).
	several, err := b.deleteMembers(ctx, r, id.Name, in)
	if err != nil {
		return err
	}
	if in != nil {
		tags := tagMap(in.Tags)
		if !managed(tags) {
			return backend.Permanent(obj, "instance %s has this name but was not made by this provider: it is left as it is", awssdk.ToString(in.InstanceId))
		}
		if err := backend.OwnershipOf(ctx).Check(obj, tags[backend.LabelOwner], tags[backend.LabelUID]); err != nil {
			return err
		}
		instanceID := awssdk.ToString(in.InstanceId)
		err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
			_, err := r.ec2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{instanceID}})
			if errorCode(err) == "InvalidInstanceID.NotFound" {
				return nil
			}
			return classify(obj, err)
		})
		if err != nil {
			return err
		}
		if err := b.waitTerminated(ctx, r, obj, instanceID); err != nil {
			return err
		}
	}
	// The proxy's own role once no instance uses it, and before its group: a crash in between leaves the
	// group, listed as a leftover whose delete comes back here (instancerole.go).
	if err := b.deleteOwnInstanceRole(ctx, r, id.Name, in); err != nil {
		return err
	}
	// Its own log group, before the group that lists a leftover: a crash in between is listed and deleted
	// again. The lines go with it, but for a replacement's successor of the same name, which adopts the group.
	if err := b.deleteLogGroup(ctx, r, id.Name, keepAddress); err != nil {
		return err
	}
	if !keepAddress {
		if err := b.releaseOwnAddresses(ctx, r, id.Name); err != nil {
			return err
		}
	}
	if err := b.deleteSecurityGroup(ctx, r, id.Name); err != nil {
		return err
	}
	// The members' parameters before the first's, whose settings say how many there were.
	for k := 1; k < several; k++ {
		if err := b.deleteParameters(ctx, r, memberParameters(id.Name, k), in != nil); err != nil {
			return err
		}
	}
	// The instance, when there was one, was this owner's: so are its parameters (another owner's Create of
	// the name is refused while it lives), and their tags need no look.
	return b.deleteParameters(ctx, r, id.Name, in != nil)
}

// deleteMembers deletes what a proxy of several instances has beyond its first instance: the load balancer
// and target group, then members 1 to n-1. It returns how many members the proxy had (its settings say, or
// the members found), 1 for a proxy of one, which it leaves alone without a call to Elastic Load Balancing:
// its first instance has no TagInstances; without a first instance (a leftover), the settings and the members
// say, since the load balancer is made after the members and the settings before them, so while it exists
// one of the two does.
func (b *Backend) deleteMembers(ctx context.Context, r *region, name string, first *ec2types.Instance) (int, error) {
	if first != nil {
		if _, several := tagMap(first.Tags)[TagInstances]; !several {
			return 1, nil // a proxy of one, whose first instance says so: no more calls than before
		}
	}
	st, _, _, err := b.readStoredSpec(ctx, r, name)
	if err != nil {
		return 0, err
	}
	members, err := b.findMembers(ctx, r, name)
	if err != nil {
		return 0, err
	}
	n := max(st.Instances, 1)
	if st.Rolling {
		n = st.Instances + 1 // the surge member of an image roll cut before it went
	}
	for k := range members {
		n = max(n, k+1)
	}
	if n == 1 {
		return 1, nil
	}
	if first != nil {
		if err := backend.OwnershipOf(ctx).Check(instanceObject(r.name, name), tagMap(first.Tags)[backend.LabelOwner], tagMap(first.Tags)[backend.LabelUID]); err != nil {
			return 0, err
		}
	}
	if err := b.deleteLoadBalancer(ctx, r, name); err != nil {
		return 0, err
	}
	return n, b.terminateMembers(ctx, r, name)
}

// deleteSecurityGroup deletes the proxy's own group. A terminated instance's network interface lets go of it
// a moment after the instance is gone: DependencyViolation until then, which is retried; a DependencyViolation
// from another group's reference is not (heldBy).
func (b *Backend) deleteSecurityGroup(ctx context.Context, r *region, name string) error {
	group, err := b.findSecurityGroup(ctx, r, securityGroupName(name), "")
	if err != nil || group == nil {
		return err
	}
	// A group of that name the provider did not make is the user's, and another owner's is theirs.
	if tags := tagMap(group.Tags); !managed(tags) || tags[tagName] != name || !sameOwner(ctx, tags) {
		return nil
	}
	obj := fmt.Sprintf("aws security group %s in region %s", securityGroupName(name), r.name)
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		_, err := r.ec2.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: group.GroupId})
		if errorCode(err) == "InvalidGroup.NotFound" {
			return nil
		}
		if errorCode(err) == "DependencyViolation" {
			return b.heldBy(ctx, r, obj, awssdk.ToString(group.GroupId), err)
		}
		return classify(obj, err)
	})
}

// deleteParameters deletes every parameter the proxy may have (guest.ParameterPaths: the parts of the config
// and the settings among them, those a longer config left too), in calls of at most ten names
// (DeleteParameters' limit); missing ones are no error. Unless owned says the caller checked already,
// another owner's (a proxy of the same name of another team) are left alone, as their settings
// parameter's tags say.
func (b *Backend) deleteParameters(ctx context.Context, r *region, name string, owned bool) error {
	if !owned {
		if mine, err := b.ownParameters(ctx, r, name); err != nil || !mine {
			return err
		}
	}
	for paths := guest.ParameterPaths(name); len(paths) > 0; {
		batch := paths[:min(len(paths), 10)]
		paths = paths[len(batch):]
		err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
			_, err := r.ssm.DeleteParameters(ctx, &ssm.DeleteParametersInput{Names: batch})
			return classify(parameterObject(r.name, guest.ParameterPath(name, "")), err)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ownParameters reports whether the proxy's parameters are the context's owner's, or nobody's (no settings
// parameter to say).
func (b *Backend) ownParameters(ctx context.Context, r *region, name string) (bool, error) {
	var tags map[string]string
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) (err error) {
		tags, err = b.parameterTags(ctx, r, guest.ParameterPath(name, guest.ParameterSettings))
		return err
	})
	if err != nil {
		return false, err
	}
	return sameOwner(ctx, tags), nil
}

// sameOwner reports whether tags name the context's owner (any UID: a kept address or a leftover is a
// gone proxy's of the same owner), or the context names none.
func sameOwner(ctx context.Context, tags map[string]string) bool {
	return (backend.Ownership{Owner: backend.OwnershipOf(ctx).Owner}).Check("", tags[backend.LabelOwner], "") == nil
}

// heldBy tells apart the two DependencyViolations EC2 answers, in the same words, for the proxy's group: an
// instance that still uses it (the terminated instance's network interface lets go of it within minutes:
// Transient, retried) and another security group whose rule names it, as the source of an inbound rule (a
// rule a user added to admit the proxy elsewhere) or the destination of an outbound one (a rule letting
// clients reach the proxy): it lasts until that rule goes, so Permanent at once, naming every such group,
// rather than retried for the whole timeout.
func (b *Backend) heldBy(ctx context.Context, r *region, obj, groupID string, violation error) error {
	var refs []string
	for _, by := range []struct{ filter, rules string }{
		{"ip-permission.group-id", "inbound"},
		{"egress.ip-permission.group-id", "outbound"},
	} {
		out, err := r.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{
			Filters: []ec2types.Filter{{Name: awssdk.String(by.filter), Values: []string{groupID}}}})
		if err != nil {
			return classify(obj, err)
		}
		for _, g := range out.SecurityGroups {
			if id := awssdk.ToString(g.GroupId); id != groupID {
				refs = append(refs, fmt.Sprintf("%s (%s, VPC %s), its %s rules", id, awssdk.ToString(g.GroupName), awssdk.ToString(g.VpcId), by.rules))
			}
		}
	}
	if len(refs) == 0 {
		return classify(obj, violation)
	}
	named := strings.Join(refs, "; ")
	return &backend.Error{Class: backend.ClassPermanent, Object: obj,
		Err: fmt.Errorf("%w: the security group %s is named by another group's rules: %s", violation, groupID, named),
		Advice: fmt.Sprintf("Remove the rules that name %s, or point them at another group, in %s; then run the operation again. "+
			"EC2 deletes a security group only once no other group's rule refers to it.", groupID, named)}
}
