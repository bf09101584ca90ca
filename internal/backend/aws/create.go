package aws

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Defaults of a proxy instance: Squid for a few clients fits a burstable instance comfortably.
const (
	DefaultInstanceType = "t3.micro"
	// debianAMIParameter is the public SSM parameter Debian publishes for its latest Debian 12 image, per
	// architecture ("Debian on Amazon EC2", the Debian wiki's Cloud/AmazonEC2Image page).
	debianAMIParameter = "/aws/service/debian/release/12/latest/"
)

// resolve fills the placement's empty settings with the backend's defaults and refuses what no API call
// could accept. It returns the region and the options.
func (b *Backend) resolve(ctx context.Context, spec backend.Spec) (*region, Options, error) {
	object := "aws proxy " + spec.Name
	pl := spec.Placement
	if pl.Backend != "" && pl.Backend != Kind {
		return nil, Options{}, backend.Permanent(object, "placement is for the %s backend, not aws", pl.Backend)
	}
	if pl.Scope != "" {
		return nil, Options{}, backend.Permanent(object, "an aws placement has no scope, got %q", pl.Scope)
	}
	name := pl.Target
	if name == "" {
		name = b.DefaultRegion()
	}
	r, err := b.clients(ctx, name)
	if err != nil {
		return nil, Options{}, err
	}
	given, err := backend.OptionsOf[Options](pl)
	if err != nil {
		return nil, Options{}, err
	}
	var o Options
	if given != nil {
		o = *given
	}
	switch {
	case o.SubnetID == "" && len(o.SubnetIDs) == 0:
		return nil, o, backend.Permanent(object, "aws.subnet_id is required: the subnet's VPC holds the proxy's security group")
	case o.IAMInstanceProfile == "" && !o.CreateInstanceRole:
		return nil, o, backend.Permanent(object, "aws.iam_instance_profile or aws.create_instance_role is required: the instance's role reads the proxy's configuration from SSM")
	case o.IAMInstanceProfile != "" && o.CreateInstanceRole:
		return nil, o, backend.Permanent(object, "aws.create_instance_role makes the proxy's own instance profile; it cannot be combined with iam_instance_profile")
	case o.StaticEgressIP && o.EIPAllocationID != "":
		return nil, o, backend.Permanent(object, "static_egress_ip allocates an address; it cannot be combined with eip_allocation_id")
	}
	if err := o.validateInstances(); err != nil {
		return nil, o, backend.Permanent(object, "%v", err)
	}
	if err := o.CloudWatchLogs.validate(); err != nil {
		return nil, o, backend.Permanent(object, "aws.cloudwatch_logs: %v", err)
	}
	if o.InstanceType == "" {
		o.InstanceType = DefaultInstanceType
	}
	if o.AMI == "" {
		if o.AMI, err = b.defaultAMI(ctx, r, o.InstanceType); err != nil {
			return nil, o, err
		}
	}
	return r, o, nil
}

// defaultAMI reads the latest Debian 12 image of the instance type's architecture.
func (b *Backend) defaultAMI(ctx context.Context, r *region, instanceType string) (string, error) {
	path := debianAMIParameter + architectureOf(instanceType)
	var out *ssm.GetParameterOutput
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) (err error) {
		out, err = r.ssm.GetParameter(ctx, &ssm.GetParameterInput{Name: awssdk.String(path)})
		return classify(parameterObject(r.name, path), err)
	})
	if err != nil {
		return "", err
	}
	return awssdk.ToString(out.Parameter.Value), nil
}

// architectureOf tells an instance type's architecture by its family, as EC2 names them: a "g" after the
// generation (t4g, m7g, c7gn) is Graviton, arm64, and so is a1, the first Graviton family, which has no
// "g"; everything else this backend offers is amd64.
func architectureOf(instanceType string) string {
	family, _, _ := strings.Cut(instanceType, ".")
	if family == "a1" {
		return "arm64"
	}
	for i, c := range family {
		if c >= '0' && c <= '9' {
			if strings.HasPrefix(family[i+1:], "g") {
				return "arm64"
			}
			break
		}
	}
	return "amd64"
}

// clientToken makes RunInstances idempotent across a lost answer: the same UID gives the same token, at most
// 64 ASCII characters ("Ensuring idempotency in Amazon EC2 API requests").
func clientToken(uid string) string {
	sum := sha256.Sum256([]byte(uid))
	return "egress-" + hex.EncodeToString(sum[:24])
}

// maxLaunchTokens bounds the launches of one UID whose instances were terminated before Create saw them.
const maxLaunchTokens = 5

// clientTokenN is the UID's n-th token: clientToken for n = 0, and one of its own for each launch after an
// instance of the previous token was terminated (EC2 refuses a terminated instance's token with
// IdempotentInstanceTerminated since January 2025). A sequence, not a random token, so every launch stays
// idempotent across a lost answer.
func clientTokenN(uid string, n int) string {
	if n == 0 {
		return clientToken(uid)
	}
	return clientToken(fmt.Sprintf("%s#%d", uid, n))
}

// Create makes the parameters, the security group, the instance and, when asked, the Elastic IP, in that
// order, so that what identifies the proxy exists before what costs. A live instance of the name carrying
// spec.UID is adopted.
func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Instance, error) {
	r, o, err := b.resolve(ctx, spec)
	if err != nil {
		return backend.Instance{}, err
	}
	obj := instanceObject(r.name, spec.Name)
	// A new instance runs the current guest, which reads a packed config.
	rendered, err := renderParameters(spec.Name, spec.Proxy, guest.FormatLatest)
	if err == nil {
		err = checkSizes(spec.Name, spec.Proxy, o, rendered)
	}
	if err != nil {
		return backend.Instance{}, backend.NewError(backend.ClassPermanent, obj, err)
	}
	in, err := b.earlierAttempt(ctx, r, obj, spec)
	if err != nil {
		return backend.Instance{}, err
	}
	kept, err := b.keptAddresses(ctx, r, spec, o)
	if err != nil {
		return backend.Instance{}, err
	}
	// The group first: it is made with its tags in one request, so that whatever a crash leaves of the
	// proxy from here on is listed by ListByTag (as a leftover of its name) until a create adopts it or a
	// delete of that id removes it, parameters included.
	groupID, place, err := b.ensureSecurityGroup(ctx, r, spec, o)
	if err != nil {
		return backend.Instance{}, err
	}
	if err := b.putParameters(ctx, r, spec, newStoredSpec(spec.Proxy, o, rendered), rendered, ""); err != nil {
		return backend.Instance{}, err
	}
	fresh := in == nil
	if in == nil {
		if in, err = b.launch(ctx, r, spec, o, groupID); err != nil {
			return backend.Instance{}, err
		}
	}
	// From here on the instance exists: an error comes with its id, so the provider records it and nothing leaks.
	made := backend.Instance{ID: backend.ProviderID{Backend: Kind, Target: r.name, Name: spec.Name}, Name: spec.Name, UID: spec.UID}
	instanceID := awssdk.ToString(in.InstanceId)
	if err := b.bindParameters(ctx, r, spec, instanceID, fresh, rendered); err != nil {
		return made, err
	}
	if in, err = b.waitRunning(ctx, r, obj, instanceID); err != nil {
		return made, err
	}
	if err := b.attachEgressAddress(ctx, r, spec, o, instanceID, kept); err != nil {
		return made, err
	}
	if o.instances() > 1 {
		if _, err := b.ensureMembers(ctx, r, spec, o, groupID, place, in); err != nil {
			return made, err
		}
	}
	if o.WaitForProxy {
		if err := b.waitApplied(ctx, r, spec.Name, rendered); err != nil {
			return made, err
		}
	}
	// The poll that saw the instance run described it whole, unless an Elastic IP has changed its public
	// address since, or the wait for the guest has given it time to change.
	if o.StaticEgressIP || o.EIPAllocationID != "" || o.WaitForProxy {
		if in, err = b.findInstance(ctx, r, spec.Name); err != nil {
			return made, err
		}
		if in == nil {
			return made, backend.Transient(obj, "the instance was made but is not listed yet")
		}
	}
	return b.readBack(ctx, r, in)
}

// earlierAttempt is the instance of this name that an earlier attempt of this create made, to go on from, or
// nil: one shutting down is waited for and is then none; one the provider did not make, another owner's or
// another proxy's of this owner is refused.
func (b *Backend) earlierAttempt(ctx context.Context, r *region, obj string, spec backend.Spec) (*ec2types.Instance, error) {
	in, err := b.findInstance(ctx, r, spec.Name)
	if err != nil {
		return nil, err
	}
	if in != nil && stateName(in) == ec2types.InstanceStateNameShuttingDown {
		// On its way out, and gone for Get and ListByTag: a replacement whose delete half died after it
		// terminated the old instance leaves it so. Its group and kept Elastic IP are this proxy's to adopt
		// once it is terminated; refusing over it would ask the user to delete what is deleting itself.
		if err := b.waitTerminated(ctx, r, obj, awssdk.ToString(in.InstanceId)); err != nil {
			return nil, err
		}
		if in, err = b.findInstance(ctx, r, spec.Name); err != nil {
			return nil, err
		}
	}
	if in == nil {
		return nil, nil
	}
	tags := tagMap(in.Tags)
	if !managed(tags) {
		return nil, backend.Permanent(obj, "an instance with this name already exists (%s) and belongs to %s, not proxy %s: choose another name or delete it",
			awssdk.ToString(in.InstanceId), ownerOf(tags), spec.UID)
	}
	// Another owner's: refused naming both owners. The same owner's with another UID: a proxy no state
	// holds (a killed apply's), which egress_proxy_orphans lists.
	if err := (backend.Ownership{Owner: spec.Owner}).Check(obj, tags[backend.LabelOwner], tags[backend.LabelUID]); err != nil {
		return nil, err
	}
	if tags[backend.LabelUID] != spec.UID {
		return nil, backend.Permanent(obj, "an instance with this name already exists (%s) and belongs to %s of owner %q, not proxy %s: choose another name, or delete it (egress_proxy_orphans lists it)",
			awssdk.ToString(in.InstanceId), ownerOf(tags), tags[backend.LabelOwner], spec.UID)
	}
	return in, nil
}

// keptAddresses are, with static_egress_ip, the Elastic IPs kept for this name (a predecessor's, for this
// proxy to adopt); a kept address of another owner is refused before anything is made for this proxy.
func (b *Backend) keptAddresses(ctx context.Context, r *region, spec backend.Spec, o Options) ([]ec2types.Address, error) {
	if !o.StaticEgressIP {
		return nil, nil
	}
	kept, err := b.ownAddresses(ctx, r, spec.Name)
	if err != nil {
		return nil, err
	}
	for _, a := range kept {
		tags := tagMap(a.Tags)
		if err := (backend.Ownership{Owner: spec.Owner}).Check(fmt.Sprintf("aws Elastic IP %s in region %s", awssdk.ToString(a.PublicIp), r.name),
			tags[backend.LabelOwner], tags[backend.LabelUID]); err != nil {
			return nil, err
		}
	}
	return kept, nil
}

// launch runs the proxy's instance in groupID, with its own instance role first when create_instance_role
// asks for one. A launch refused gives back what this create made (giveBack).
func (b *Backend) launch(ctx context.Context, r *region, spec backend.Spec, o Options, groupID string) (*ec2types.Instance, error) {
	with := o
	// What is given back is this owner's only: a role of the name another owner made stays theirs.
	mine := backend.WithOwnership(ctx, backend.Ownership{Owner: spec.Owner})
	// The log group before the instance whose guest writes to it, and after the security group, so that a
	// crash leaves it listed (logs.go).
	if err := b.ensureLogGroup(ctx, r, spec, o); err != nil {
		return nil, b.giveBack(mine, r, spec.Name, false, err)
	}
	if o.CreateInstanceRole {
		// After the group, so that a crash leaves the role listed with it as a leftover (instancerole.go).
		var err error
		if with.IAMInstanceProfile, err = b.ensureInstanceRole(ctx, r, spec, o); err != nil {
			return nil, b.giveBack(mine, r, spec.Name, true, err)
		}
	}
	in, err := b.runInstance(ctx, r, spec, with, 0, memberLaunch{groupID: groupID})
	if err != nil {
		return nil, b.giveBack(mine, r, spec.Name, o.CreateInstanceRole, err)
	}
	return in, nil
}

// giveBack removes what Create made before EC2 refused the launch (the proxy's own instance role when
// withRole says it made one, its own log group, the security group and the parameters), so that a refused create leaves nothing
// behind, as the contract's Delete would. Only a launch that was refused (Quota, Permanent) is given back:
// after a Transient error or a cancelled one, the instance may exist (a lost answer), and the retry's client
// token finds it. A failed clean-up is told in the error.
func (b *Backend) giveBack(ctx context.Context, r *region, name string, withRole bool, launch error) error {
	if class := backend.ClassOf(launch); class != backend.ClassQuota && class != backend.ClassPermanent {
		return launch
	}
	// Detached from the caller's context, whose end (a timeout, Ctrl-C) may be why the launch failed, and
	// bounded.
	cctx, cancel := backend.CleanupContext(ctx)
	defer cancel()
	var roleErr error
	if withRole {
		roleErr = b.deleteInstanceRole(cctx, r, name)
	}
	if err := errors.Join(roleErr, b.deleteLogGroup(cctx, r, name, false), b.deleteSecurityGroup(cctx, r, name), b.deleteParameters(cctx, r, name, false)); err != nil {
		return fmt.Errorf("%w (and what was made for it could not all be removed: %w; egress_proxy_orphans lists the leftovers)", launch, err)
	}
	return launch
}

func ownerOf(tags map[string]string) string {
	if !managed(tags) {
		return "no proxy of this provider"
	}
	return "proxy " + tags[backend.LabelUID]
}

// tagCreated holds, on the proxy's security group and Elastic IP, when they were made or adopted: EC2 records
// no creation time of either, and egress_proxy_orphans' min_age needs one for a leftover listed by them.
const tagCreated = "egress-created"

// groupTags are the tags of the group and the Elastic IP: the proxy's, and when they were made.
func groupTags(spec backend.Spec, now time.Time) map[string]string {
	tags := objectTags(spec)
	tags[tagCreated] = now.UTC().Format(time.RFC3339)
	return tags
}

// securityGroupName names the proxy's own security group, unique in its VPC.
func securityGroupName(proxy string) string { return "egress-proxy-" + proxy }

// ensureSecurityGroup finds or makes the proxy's security group in the subnet's VPC and sets its ingress
// rules to the allowed clients on the proxy port. Create calls it only once no live instance of the name is
// another proxy's, so a group of the provider's with another UID is a gone proxy's leftover.
//
// With several instances it also admits the load balancer's health checks to the health port from the
// placement's subnets, where the load balancer's nodes are, and returns the placement (placement.go).
func (b *Backend) ensureSecurityGroup(ctx context.Context, r *region, spec backend.Spec, o Options) (string, placement, error) {
	name := securityGroupName(spec.Name)
	obj := fmt.Sprintf("aws security group %s in region %s", name, r.name)
	place, err := b.placementOf(ctx, r, o)
	if err != nil {
		return "", placement{}, err
	}
	if err := b.checkClientRules(ctx, r, obj, spec.Proxy, len(place.healthRanges())); err != nil {
		return "", placement{}, err
	}
	vpcID := place.vpcID
	group, err := b.findSecurityGroup(ctx, r, name, vpcID)
	if err != nil {
		return "", placement{}, err
	}
	made := false // by this call, moments ago: EC2 may not know its id everywhere yet
	if group != nil {
		tags := tagMap(group.Tags)
		if !managed(tags) {
			return "", placement{}, backend.Permanent(obj, "a security group of this name already exists (%s) and was not made by this provider: delete it or choose another proxy name",
				awssdk.ToString(group.GroupId))
		}
		// Only the owner's own leftovers are adopted: another team's group of this name stays theirs.
		if err := (backend.Ownership{Owner: spec.Owner}).Check(obj, tags[backend.LabelOwner], tags[backend.LabelUID]); err != nil {
			return "", placement{}, err
		}
		if tags[backend.LabelUID] != spec.UID {
			// Left by a proxy of this name that is gone (Create found no live instance of the name before
			// getting here, or it would have refused): a terminated instance's group, or a crash between
			// the group and the launch. Adopted, as the successor adopts a kept Elastic IP.
			err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
				_, err := r.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{awssdk.ToString(group.GroupId)}, Tags: ec2Tags(groupTags(spec, time.Now()))})
				return classify(obj, err)
			})
			if err != nil {
				return "", placement{}, err
			}
		}
	} else {
		made = true
		err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
			out, err := r.ec2.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
				GroupName: awssdk.String(name), VpcId: awssdk.String(vpcID),
				Description:       awssdk.String("egress proxy " + spec.Name + ": the allowed clients on the proxy port"),
				TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeSecurityGroup, Tags: ec2Tags(groupTags(spec, time.Now()))}},
			})
			if errorCode(err) == "InvalidGroup.Duplicate" {
				// A retry after a lost answer: the group was made.
				group, err = b.findSecurityGroup(ctx, r, name, vpcID)
				if err == nil && group == nil {
					err = backend.Transient(obj, "reported as existing but not listed yet")
				}
				return err
			}
			if err != nil {
				return classify(obj, err)
			}
			group = &ec2types.SecurityGroup{GroupId: out.GroupId, VpcId: awssdk.String(vpcID)}
			return nil
		})
		if err != nil {
			return "", placement{}, err
		}
	}
	groupID := awssdk.ToString(group.GroupId)
	return groupID, place, b.setIngress(ctx, r, obj, group, spec.Proxy, place.healthRanges(), made)
}

func (b *Backend) findSecurityGroup(ctx context.Context, r *region, name, vpcID string) (*ec2types.SecurityGroup, error) {
	filters := []ec2types.Filter{{Name: awssdk.String("group-name"), Values: []string{name}}}
	if vpcID != "" {
		filters = append(filters, ec2types.Filter{Name: awssdk.String("vpc-id"), Values: []string{vpcID}})
	}
	var found []ec2types.SecurityGroup
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		out, err := r.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: filters})
		if err != nil {
			return classify(fmt.Sprintf("aws security group %s in region %s", name, r.name), err)
		}
		found = out.SecurityGroups
		return nil
	})
	if err != nil || len(found) == 0 {
		return nil, err
	}
	return &found[0], nil
}

// setIngress makes the group admit exactly what ingressRules wants: the allowed clients on the proxy port and,
// with metrics, the metrics clients on the two metrics ports. What is missing is authorized, what is no longer
// wanted (a metrics port turned off or moved, a range dropped) is revoked.
// A group made moments ago may be unknown to these calls for a while: fresh says so, and its NotFound is
// retried (defaultPropagation); an older group's is not, it is gone.
func (b *Backend) setIngress(ctx context.Context, r *region, obj string, group *ec2types.SecurityGroup, s proxyconf.Settings, health []string, fresh bool) error {
	add, remove := diffPermissions(group.IpPermissions, ingressRules(s, health))
	classifyErr := classify
	if fresh {
		classifyErr = b.propagationWindow().classify
	}
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		if len(add) > 0 {
			_, err := r.ec2.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: group.GroupId, IpPermissions: add})
			if err != nil && errorCode(err) != "InvalidPermission.Duplicate" {
				return classifyErr(obj, err)
			}
		}
		if len(remove) > 0 {
			_, err := r.ec2.RevokeSecurityGroupIngress(ctx, &ec2.RevokeSecurityGroupIngressInput{GroupId: group.GroupId, IpPermissions: remove})
			if err != nil && errorCode(err) != "InvalidPermission.NotFound" {
				return classifyErr(obj, err)
			}
		}
		return nil
	})
}

// ingressRules are the rules the proxy's group holds: TCP on the proxy port from each allowed client range
// and, with metrics, TCP on each metrics port from each metrics range alone (proxyconf.MetricsSettings: the
// proxy's clients reach the metrics ports only when listed there too).
//
// A proxy of several instances also admits its load balancer's health checks on the health port from
// health, the ranges of the subnets its nodes are in.
func ingressRules(s proxyconf.Settings, health []string) []ec2types.IpPermission {
	rules := []ec2types.IpPermission{tcpRule(s.Port, s.AllowedClientCIDRs)}
	if len(health) > 0 {
		rules = append(rules, tcpRule(proxyconf.DefaultHealthPort, health))
	}
	if s.Metrics != nil {
		port, squidPort := s.Metrics.Ports()
		rules = append(rules, tcpRule(port, s.Metrics.AllowedClientCIDRs), tcpRule(squidPort, s.Metrics.AllowedClientCIDRs))
	}
	return rules
}

// tcpRule admits TCP on port from each range.
func tcpRule(port int, ranges []string) ec2types.IpPermission {
	rule := ec2types.IpPermission{IpProtocol: awssdk.String("tcp"), FromPort: awssdk.Int32(int32(port)), ToPort: awssdk.Int32(int32(port))}
	for _, c := range ranges {
		if p, err := netip.ParsePrefix(c); err == nil && p.Addr().Is6() {
			rule.Ipv6Ranges = append(rule.Ipv6Ranges, ec2types.Ipv6Range{CidrIpv6: awssdk.String(c)})
		} else {
			rule.IpRanges = append(rule.IpRanges, ec2types.IpRange{CidrIp: awssdk.String(c)})
		}
	}
	return rule
}

// diffPermissions returns, per port and range, what want has that have lacks and what have has that want lacks.
func diffPermissions(have, want []ec2types.IpPermission) (add, remove []ec2types.IpPermission) {
	type key struct {
		proto      string
		from, to   int32
		cidr       string
		ipv6       bool
		groupOrNot bool
	}
	keys := func(perms []ec2types.IpPermission) []key {
		var ks []key
		for _, p := range perms {
			for _, r := range p.IpRanges {
				ks = append(ks, key{awssdk.ToString(p.IpProtocol), awssdk.ToInt32(p.FromPort), awssdk.ToInt32(p.ToPort), awssdk.ToString(r.CidrIp), false, false})
			}
			for _, r := range p.Ipv6Ranges {
				ks = append(ks, key{awssdk.ToString(p.IpProtocol), awssdk.ToInt32(p.FromPort), awssdk.ToInt32(p.ToPort), awssdk.ToString(r.CidrIpv6), true, false})
			}
		}
		return ks
	}
	haveKeys, wantKeys := keys(have), keys(want)
	perm := func(k key) ec2types.IpPermission {
		p := ec2types.IpPermission{IpProtocol: awssdk.String(k.proto), FromPort: awssdk.Int32(k.from), ToPort: awssdk.Int32(k.to)}
		if k.ipv6 {
			p.Ipv6Ranges = []ec2types.Ipv6Range{{CidrIpv6: awssdk.String(k.cidr)}}
		} else {
			p.IpRanges = []ec2types.IpRange{{CidrIp: awssdk.String(k.cidr)}}
		}
		return p
	}
	for _, k := range wantKeys {
		if !slices.Contains(haveKeys, k) {
			add = append(add, perm(k))
		}
	}
	for _, k := range haveKeys {
		if !slices.Contains(wantKeys, k) {
			remove = append(remove, perm(k))
		}
	}
	return add, remove
}

// runInstance launches the instance. The client token makes a retry after a lost answer return the same
// instance instead of a second one.
//
// Member k of a proxy of several instances (k > 0; member 0 is the proxy's first instance, launched as a proxy
// of one is) reads its own parameters (memberParameters), carries TagMember and runs in its own subnet
// (Options.memberSubnet), with a client token of its own; launch.seed, when not empty, stands for the UID and
// member in the client tokens (a member made again, restoreMembers); launch.created, when not empty, is
// tagged as the proxy's creation time (tagCreated).
func (b *Backend) runInstance(ctx context.Context, r *region, spec backend.Spec, o Options, k int, launch memberLaunch) (*ec2types.Instance, error) {
	obj := memberObject(r.name, spec.Name, k)
	opts := guest.UserDataOptions{
		Region: r.name, ParameterPrefix: guest.ParameterPath(memberParameters(spec.Name, k), ""), SSMEndpoint: guestSSMEndpoint(r.settings.SSMEndpoint),
	}
	if o.CloudWatchLogs != nil {
		group, stream := logTarget(spec.Name, o.CloudWatchLogs)
		opts.Logs = &guest.LogsTarget{Group: group, Stream: stream, Endpoint: guestSSMEndpoint(r.settings.LogsEndpoint)}
	}
	userData, err := guest.RenderUserData(opts)
	if err != nil {
		return nil, backend.NewError(backend.ClassPermanent, obj, err)
	}
	tagged := objectTags(spec)
	if o.instances() > 1 {
		tagged[TagInstances] = strconv.Itoa(o.instances())
	}
	uid := spec.UID
	if k > 0 {
		tagged[TagMember] = strconv.Itoa(k)
		uid = spec.UID + "/member-" + strconv.Itoa(k)
	}
	if launch.seed != "" {
		uid = launch.seed
	}
	if launch.created != "" {
		tagged[tagCreated] = launch.created
	}
	tags := ec2Tags(tagged)
	in := &ec2.RunInstancesInput{
		ImageId: awssdk.String(o.AMI), InstanceType: ec2types.InstanceType(o.InstanceType),
		MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1), ClientToken: awssdk.String(clientToken(uid)),
		SubnetId: awssdk.String(o.memberSubnet(k)), SecurityGroupIds: append([]string{launch.groupID}, o.SecurityGroupIDs...),
		IamInstanceProfile: instanceProfile(o.IAMInstanceProfile),
		// IMDSv2 only, one hop: a container or a forwarded request on the instance cannot reach the role's
		// credentials ("Use IMDSv2": "Configure the instance metadata options").
		MetadataOptions: &ec2types.InstanceMetadataOptionsRequest{
			HttpTokens: ec2types.HttpTokensStateRequired, HttpPutResponseHopLimit: awssdk.Int32(1),
			HttpEndpoint: ec2types.InstanceMetadataEndpointStateEnabled,
		},
		UserData: awssdk.String(base64.StdEncoding.EncodeToString(userData)),
		TagSpecifications: []ec2types.TagSpecification{
			{ResourceType: ec2types.ResourceTypeInstance, Tags: tags},
			{ResourceType: ec2types.ResourceTypeVolume, Tags: tags},
		},
	}
	if o.Spot {
		in.InstanceMarketOptions = &ec2types.InstanceMarketOptionsRequest{MarketType: ec2types.MarketTypeSpot,
			SpotOptions: &ec2types.SpotMarketOptions{SpotInstanceType: ec2types.SpotInstanceTypeOneTime,
				InstanceInterruptionBehavior: ec2types.InstanceInterruptionBehaviorTerminate}}
	}
	var made *ec2types.Instance
	attempt := 0
	// The proxy's group was made moments ago, and the user's groups and instance profile may have been made
	// by the same apply: EC2 may not know them yet.
	w := b.propagationWindow()
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		in.ClientToken = awssdk.String(clientTokenN(uid, attempt))
		out, err := r.ec2.RunInstances(ctx, in)
		if errorCode(err) == "IdempotentInstanceTerminated" {
			// This UID's instance of that token was terminated (a launch whose answer was lost, ended before
			// the retry): the next token of the UID's sequence launches anew, and stays idempotent itself.
			if attempt++; attempt >= maxLaunchTokens {
				return backend.Permanent(obj, "%d instances launched for proxy %s were terminated: see their state reasons in the EC2 console", attempt, spec.UID)
			}
			return backend.Transient(obj, "the instance of client token %s was terminated: launching with the next token", awssdk.ToString(in.ClientToken))
		}
		if err != nil {
			return w.classify(obj, err)
		}
		if len(out.Instances) == 0 {
			return backend.Transient(obj, "RunInstances answered no instance")
		}
		made = &out.Instances[0]
		return nil
	})
	return made, err
}

// guestSSMEndpoint is the SSM (or CloudWatch Logs) endpoint the guest is given: the provider's own when it is
// HTTPS (a private endpoint), the region's default otherwise. The provider may reach a test's fake over plain
// HTTP; a guest, which reads secrets or sends its access log through it, never does.
func guestSSMEndpoint(providers string) string {
	if strings.HasPrefix(providers, "https://") {
		return providers
	}
	return ""
}

// instanceProfile takes a name or an ARN, as the console and the CLI do.
func instanceProfile(nameOrARN string) *ec2types.IamInstanceProfileSpecification {
	if strings.HasPrefix(nameOrARN, "arn:") {
		return &ec2types.IamInstanceProfileSpecification{Arn: awssdk.String(nameOrARN)}
	}
	return &ec2types.IamInstanceProfileSpecification{Name: awssdk.String(nameOrARN)}
}
