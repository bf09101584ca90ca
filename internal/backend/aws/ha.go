package aws

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

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
//
// Member k > 0 is Gone (backend.Member) when no instance of it is pending, running, stopping or stopped: none
// is listed, or the one there is shutting down or terminated (EC2 lists a terminated instance for about an
// hour; "Amazon EC2 instance state changes": neither state comes back, the instance is ended for good). A
// stopped or stopping member, or one failing its health checks, exists and is not Gone: it is unhealthy, and
// starting it is the user's. Update makes a Gone member again (restoreMembers), as a retried Create would.
//
// The first instance can be lost too. The proxy is then read through its live member of lowest k (findProxy):
// Degraded, with member 0 Gone, and its next Update launches the first again, before anything else, with the
// proxy's own parameters bound to the new instance's ARN alone (bindParameters) and registered with the target
// group, so that the id, the load balancer and every other member stay.

// findMembers are the live members k > 0 of the proxy named name, by k: this provider's, with TagMember. One
// shutting down is among them (liveStates) unless another instance of its k is not: it is listed beside the
// one made again in its place, and the live one wins.
func (b *Backend) findMembers(ctx context.Context, r *region, name string) (map[int]*ec2types.Instance, error) {
	return b.listMembers(ctx, r, name, memberQuery{states: liveStates}, func(prev, _ *ec2types.Instance) bool { return memberGone(prev) })
}

// memberQuery says which instances of a proxy's name listMembers lists.
type memberQuery struct {
	states    []string
	withFirst bool   // member 0 too, the first instance, which has no TagMember
	uid       string // the proxy's UID only, when not empty: a former proxy's of the name are not its members
}

// listMembers lists, by k > 0 (k >= 0 with q.withFirst), the instances of this provider's of the proxy named
// name that q asks for; of two of one k, in replaces prev where replaces says so.
func (b *Backend) listMembers(ctx context.Context, r *region, name string, q memberQuery, replaces func(prev, in *ec2types.Instance) bool) (map[int]*ec2types.Instance, error) {
	filters := []ec2types.Filter{
		{Name: awssdk.String("tag:" + tagName), Values: []string{name}},
		{Name: awssdk.String("instance-state-name"), Values: q.states},
	}
	if !q.withFirst {
		filters = append(filters, ec2types.Filter{Name: awssdk.String("tag-key"), Values: []string{TagMember}})
	}
	if q.uid != "" {
		filters = append(filters, ec2types.Filter{Name: awssdk.String("tag:" + backend.LabelUID), Values: []string{q.uid}})
	}
	from := 1
	if q.withFirst {
		from = 0
	}
	out := map[int]*ec2types.Instance{}
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		clear(out)
		res, err := r.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: filters})
		if err != nil {
			return classify(instanceObject(r.name, name), err)
		}
		for _, rs := range res.Reservations {
			for i := range rs.Instances {
				in := &rs.Instances[i]
				if k := memberOf(in); k >= from && managed(tagMap(in.Tags)) && (out[k] == nil || replaces(out[k], in)) {
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
		in := existing[k]
		if in != nil {
			if err := adoptableMember(spec, memberObject(r.name, spec.Name, k), in); err != nil {
				return ids, err
			}
		}
		id, err := b.makeMember(ctx, r, spec, o, k, in, memberLaunch{groupID: groupID, format: guest.FormatLatest, created: createdTag(createdOf(first))})
		if err != nil {
			return ids, err
		}
		ids = append(ids, id)
	}
	err = b.ensureLoadBalancer(ctx, r, spec, place.vpcID, place.subnetIDs(), ids)
	return ids, err
}

// memberGone says that a member's instance is ended for good: shutting down or terminated (or none).
func memberGone(in *ec2types.Instance) bool {
	switch stateName(in) {
	case "", ec2types.InstanceStateNameShuttingDown, ec2types.InstanceStateNameTerminated:
		return true
	}
	return false
}

// adoptableMember refuses a member instance of the proxy's name that is another owner's or another proxy's.
func adoptableMember(spec backend.Spec, obj string, in *ec2types.Instance) error {
	tags := tagMap(in.Tags)
	if err := (backend.Ownership{Owner: spec.Owner}).Check(obj, tags[backend.LabelOwner], tags[backend.LabelUID]); err != nil {
		return err
	}
	if uid := tags[backend.LabelUID]; uid != spec.UID {
		return backend.Permanent(obj, "was left by proxy %s of this name: delete that proxy (egress_proxy_orphans lists it), then apply again", uid)
	}
	return nil
}

// memberLaunch is how makeMember launches a member, beyond the spec and the options.
type memberLaunch struct {
	groupID string             // the proxy's own security group
	seed    string             // when not empty, the launch's client tokens are its own (runInstance)
	format  guest.ConfigFormat // the format its parameters are written in
	created string             // the proxy's creation time, tagged on the instance (tagCreated); "" for none
}

// tagsKey is tags as one string, the same for the same tags.
func tagsKey(tags map[string]string) string {
	var b strings.Builder
	for _, t := range ec2Tags(tags) {
		fmt.Fprintf(&b, "%q=%q;", awssdk.ToString(t.Key), awssdk.ToString(t.Value))
	}
	return b.String()
}

// createdTag is a creation time as tagCreated holds it.
func createdTag(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// makeMember makes member k as Create does, going on from in, what an earlier attempt left (nil: none): its
// own parameters written, its instance launched unless in is live, the parameters bound to it, and waited for
// until it runs (and, with wait_for_proxy, until its guest applied them). One shutting down is none; without a
// seed it is first waited for until it is terminated, as its client token would answer it again. launch.seed,
// when not empty, makes the launch's client tokens its own (a member made again after its instance ended). Member
// 0 is the first instance made again (restoreMembers): its parameters are the proxy's own, written in the
// format the proxy records, and bound to the new instance alone. It returns the instance's id.
func (b *Backend) makeMember(ctx context.Context, r *region, spec backend.Spec, o Options, k int, in *ec2types.Instance, launch memberLaunch) (string, error) {
	obj := memberObject(r.name, spec.Name, k)
	seed := launch.seed
	if in != nil && memberGone(in) {
		if seed == "" {
			if err := b.waitTerminated(ctx, r, obj, awssdk.ToString(in.InstanceId)); err != nil {
				return "", err
			}
		}
		in = nil
	}
	ms := memberSpec(spec, k)
	rendered, err := renderParameters(ms.Name, spec.Proxy, launch.format)
	if err != nil {
		return "", backend.NewError(backend.ClassPermanent, obj, err)
	}
	if err := b.putParameters(ctx, r, ms, newStoredSpec(spec.Proxy, o, rendered), rendered, ""); err != nil {
		return "", err
	}
	fresh := in == nil
	if fresh {
		if in, err = b.runInstance(ctx, r, spec, o, k, launch); err != nil {
			return "", err
		}
	}
	id := awssdk.ToString(in.InstanceId)
	if err := b.bindParameters(ctx, r, ms, id, fresh, rendered); err != nil {
		return id, err
	}
	if _, err := b.waitRunning(ctx, r, obj, id); err != nil {
		return id, err
	}
	if o.WaitForProxy {
		if err := b.waitApplied(ctx, r, ms.Name, rendered); err != nil {
			return id, err
		}
	}
	return id, nil
}

// endedMembers are, by k >= 0, the instances of the proxy named name and UID uid that EC2 still lists as
// terminated, the latest launched of each k: what a Gone member was, for its name and zone.
func (b *Backend) endedMembers(ctx context.Context, r *region, name, uid string) (map[int]*ec2types.Instance, error) {
	q := memberQuery{states: []string{string(ec2types.InstanceStateNameTerminated)}, withFirst: true, uid: uid}
	return b.listMembers(ctx, r, name, q, func(prev, in *ec2types.Instance) bool {
		return awssdk.ToTime(in.LaunchTime).After(awssdk.ToTime(prev.LaunchTime))
	})
}

// goneMembers are the members 0 to n-1 that are Gone (memberGone), by k, with the instance each was when EC2
// still lists it (shutting down or terminated), nil otherwise; members are findMembers' with the first instance
// (nil when none is live) as member 0, and uid the proxy's.
func (b *Backend) goneMembers(ctx context.Context, r *region, name, uid string, members map[int]*ec2types.Instance, n int) (map[int]*ec2types.Instance, error) {
	gone := map[int]*ec2types.Instance{}
	missing := false
	for k := range n {
		if in := members[k]; in == nil || memberGone(in) {
			gone[k] = in
			missing = missing || in == nil
		}
	}
	if !missing {
		return gone, nil
	}
	ended, err := b.endedMembers(ctx, r, name, uid)
	if err != nil {
		return nil, err
	}
	for k, in := range gone {
		if in == nil {
			gone[k] = ended[k]
		}
	}
	return gone, nil
}

// restoreMembers makes again, as a retried Create would, the members of the proxy of n instances that are Gone,
// the first instance among them, with spec's rules and labels (spec's UID and owner are the proxy's), and
// registers them with the load balancer's target group; the other members are left as they are. members are
// findMembers' with the first instance (nil when none is live) as member 0; ref is a live instance of the proxy:
// the first, or the member standing in for it (findProxy). The options are the proxy's as its stored spec holds
// them (readStored), its own security group the one ref is in.
func (b *Backend) restoreMembers(ctx context.Context, r *region, spec backend.Spec, ref *ec2types.Instance, members map[int]*ec2types.Instance, n int) error {
	gone, err := b.goneMembers(ctx, r, spec.Name, spec.UID, members, n)
	if err != nil || len(gone) == 0 {
		return err
	}
	obj := instanceObject(r.name, spec.Name)
	current, err := b.readStored(ctx, r, ref) // its options; its members are known already
	if err != nil {
		return err
	}
	read, ok := current.Placement.Options.(*Options)
	if !ok || current.Proxy == nil {
		return backend.Permanent(obj, "its settings parameter is gone or does not parse: its gone members cannot be made again; replace the proxy")
	}
	o := *read
	if o.CreateInstanceRole {
		// Made for member 0: this finds it, for its profile's name.
		if o.IAMInstanceProfile, err = b.ensureInstanceRole(ctx, r, spec, o); err != nil {
			return err
		}
	}
	vpcID := awssdk.ToString(ref.VpcId)
	group, err := b.findSecurityGroup(ctx, r, securityGroupName(spec.Name), vpcID)
	if err != nil {
		return err
	}
	if group == nil {
		return backend.Permanent(obj, "its security group %s is gone: its gone members cannot be made again; replace the proxy", securityGroupName(spec.Name))
	}
	// Every instance made again carries the proxy's creation time, as Get reports it, so that it stays.
	created := createdOf(ref)
	firstFormat := guest.FormatLatest
	if endedFirst, firstGone := gone[0]; firstGone {
		created = createdWithoutFirst(created, endedFirst)
		// The first's parameters are the proxy's: written in the format its stored spec records, which the
		// other members' guests and the next Reconfigure go by.
		st, ok, _, err := b.readStoredSpec(ctx, r, spec.Name)
		if err != nil {
			return err
		}
		if ok {
			firstFormat = st.ConfigFormat // FormatWhole (0) too: a proxy an early provider made
		}
	}
	var ids []string
	for k := range n {
		ended, isGone := gone[k]
		if !isGone {
			ids = append(ids, awssdk.ToString(members[k].InstanceId))
			continue
		}
		launch := memberLaunch{groupID: awssdk.ToString(group.GroupId), format: guest.FormatLatest, created: createdTag(created)}
		if k == 0 {
			launch.format = firstFormat
		}
		// The client tokens of a member made again are its own, after the instance it replaces, so that a
		// member ended many times does not run out of the tokens of its first launch (maxLaunchTokens). When
		// EC2 no longer lists that instance, they are the request's own: its earlier tokens may have served a
		// launch with other labels, which EC2 refuses to answer again (IdempotentParameterMismatch), while a
		// retry of this request gets its own launch back.
		launch.seed = spec.UID + "/member-" + strconv.Itoa(k) + "/unlisted/" + launch.created + "/" + tagsKey(objectTags(spec))
		if ended != nil {
			launch.seed = spec.UID + "/member-" + strconv.Itoa(k) + "/after-" + awssdk.ToString(ended.InstanceId)
		}
		id, err := b.makeMember(ctx, r, spec, o, k, ended, launch)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	return b.ensureLoadBalancer(ctx, r, spec, vpcID, o.subnets(), ids)
}

// readMembers fills a proxy of several instances in: its members with their health as the load balancer's
// target group reports it (a Gone one, goneMembers, unhealthy without asking), the load balancer's address and
// DNS name, and State from the members while the first instance runs. Nothing for a proxy of one (want, its
// settings' instances).
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
	gone, err := b.goneMembers(ctx, r, inst.Name, inst.UID, members, want)
	if err != nil {
		return err
	}
	if endedFirst, firstGone := gone[0]; firstGone {
		// Read through a member standing in for the first (findProxy): the proxy's creation time as
		// restoreMembers tags the first made again.
		inst.CreatedAt = createdWithoutFirst(inst.CreatedAt, endedFirst)
	}
	keys := make([]int, 0, len(members))
	for k := range members {
		if _, isGone := gone[k]; !isGone {
			keys = append(keys, k)
		}
	}
	for k := range gone {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		if ended, isGone := gone[k]; isGone {
			inst.Members = append(inst.Members, goneMember(inst.Name, k, ended))
			continue
		}
		in := members[k]
		id := awssdk.ToString(in.InstanceId)
		m := backend.Member{Name: id, Scope: awssdk.ToString(in.Placement.AvailabilityZone),
			InternalAddress: awssdk.ToString(in.PrivateIpAddress), EgressAddress: awssdk.ToString(in.PublicIpAddress)}
		switch h, ok := health[id]; {
		case !ok && stateName(in) == ec2types.InstanceStateNameRunning:
			m.Reason = reasonNotRegistered
		case !ok:
			m.Reason = reasonNotRegistered + " (its instance is " + string(stateName(in)) + ")"
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
	if opts, ok := inst.Placement.Options.(*Options); ok && opts != nil {
		opts.AMI = membersImage(members, gone, opts.AMI)
		// A live member above the count (an image roll's surge member, left by an Update cut before it went)
		// counts: the next plan asks for the count, and the Update that removes it.
		for k, in := range members {
			if k >= want && !memberGone(in) { // gone holds members below want only
				opts.Instances = max(opts.Instances, k+1)
			}
		}
	}
	address, dnsName := l.addresses()
	inst.InternalAddress, inst.InternalName = address, dnsName
	inst.EgressAddress, inst.IngressAddress = "", ""
	if inst.State == backend.StateRunning {
		inst.State = backend.DegradedState(inst.Members)
	}
	return nil
}

// membersImage is the image the live members run (imageOf): recorded, the proxy's, or, while some run
// another (an image roll cut before every root volume was made again, rollImage), both named, which no
// configuration equals: the next plan asks for the Update that finishes the roll.
func membersImage(members map[int]*ec2types.Instance, gone map[int]*ec2types.Instance, recorded string) string {
	if recorded == "" {
		return recorded
	}
	for _, k := range slices.Sorted(maps.Keys(members)) {
		if _, isGone := gone[k]; isGone {
			continue
		}
		if image := imageOf(members[k]); image != "" && image != recorded {
			return fmt.Sprintf("%s (and %s on some of its instances)", recorded, image)
		}
	}
	return recorded
}

// imageOf is the image an instance's root volume was made from: the last image rolled over it (TagImage), or
// the one it was launched from.
func imageOf(in *ec2types.Instance) string {
	if image, ok := tagMap(in.Tags)[TagImage]; ok {
		return image
	}
	return awssdk.ToString(in.ImageId)
}

// reasonNotRegistered is the Reason of a running member the target group does not hold: Update registers it
// (readBackRegistered). One that is not running cannot be registered (RegisterTargets refuses it) and says why.
const reasonNotRegistered = "not registered with the load balancer's target group"

// readBackRegistered is readBack after an Update, which also registers with the target group a member that runs
// outside it: one made by an Update cut before it was registered. The next Update finds it live and makes
// nothing, so without this step it would stay outside the load balancer for good; with every member registered
// it costs no call more than readBack.
func (b *Backend) readBackRegistered(ctx context.Context, r *region, spec backend.Spec, in *ec2types.Instance) (backend.Instance, error) {
	inst, err := b.readBack(ctx, r, in)
	if err != nil {
		return inst, err
	}
	if outside := registerable(inst); len(outside) > 0 {
		opts, ok := inst.Placement.Options.(*Options)
		if !ok || opts == nil {
			opts = &Options{}
		}
		if err := b.ensureLoadBalancer(ctx, r, spec, awssdk.ToString(in.VpcId), opts.subnets(), outside); err != nil {
			return backend.Instance{}, err
		}
		return b.readBack(ctx, r, in)
	}
	return inst, nil
}

// registerable are the instance ids of inst's members that run outside its target group (reasonNotRegistered).
func registerable(inst backend.Instance) []string {
	var ids []string
	for _, m := range inst.Members {
		if m.Reason == reasonNotRegistered {
			ids = append(ids, m.Name)
		}
	}
	return ids
}

// goneMember is member k of the proxy named name, Gone: named after the instance it was while EC2 lists it
// (shutting down or terminated), after the proxy and k once it does not.
func goneMember(name string, k int, ended *ec2types.Instance) backend.Member {
	if ended == nil {
		return backend.Member{Name: name + "-member-" + strconv.Itoa(k), Reason: "its instance is gone", Gone: true}
	}
	return backend.Member{Name: awssdk.ToString(ended.InstanceId), Scope: awssdk.ToString(ended.Placement.AvailabilityZone),
		Reason: "its instance is " + string(stateName(ended)), Gone: true}
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
	return b.terminate(ctx, r, instanceObject(r.name, name), ids)
}
