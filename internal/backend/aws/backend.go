package aws

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/servicequotas"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Backend is the aws implementation of backend.Backend, backend.Checker, backend.Reconfigurer and
// backend.Successor.
type Backend struct {
	cfg     Config
	regions map[string]*region
	// pollInitial and pollMax space state polls: short first, growing to pollMax.
	pollInitial, pollMax time.Duration
	retry                backend.Backoff
	// propagation bounds the retries of what EC2 or IAM does not know yet (defaultPropagation).
	propagation time.Duration
}

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Checker      = (*Backend)(nil)
	_ backend.Reconfigurer = (*Backend)(nil)
	_ backend.Successor    = (*Backend)(nil)
)

// region holds one region's settings and its clients, built once on first use.
type region struct {
	name     string
	settings RegionConfig

	once   sync.Once
	err    error
	ec2    ec2API
	ssm    ssmAPI
	sts    stsAPI
	quotas quotasAPI
	iam    iamAPI
	logs   logsAPI
	elb    elbAPI

	// accountID is the credentials' account (account), asked once under accountOnce.
	accountOnce sync.Mutex
	accountID   string
}

// New validates cfg and returns a backend. It reads no credentials and calls nothing.
func New(cfg Config) (*Backend, error) {
	if err := cfg.validate(); err != nil {
		return nil, backend.NewError(backend.ClassPermanent, "aws backend configuration", err)
	}
	b := &Backend{cfg: cfg, regions: map[string]*region{}, pollInitial: 500 * time.Millisecond, pollMax: 5 * time.Second, retry: backend.DefaultBackoff, propagation: defaultPropagation}
	for name, r := range cfg.Regions {
		b.regions[name] = &region{name: name, settings: r}
	}
	return b, nil
}

// Regions lists the configured regions.
func (b *Backend) Regions() []string { return b.cfg.RegionNames() }

// DefaultRegion is where a proxy that names none goes: the configured default, or the one region.
func (b *Backend) DefaultRegion() string {
	if b.cfg.DefaultRegion != "" {
		return b.cfg.DefaultRegion
	}
	if names := b.Regions(); len(names) == 1 {
		return names[0]
	}
	return ""
}

// Close has nothing to release: the SDK's clients hold no connection of their own beyond its HTTP client's
// idle ones, which end with the process.
func (b *Backend) Close() error { return nil }

// clients returns the region's clients, building them on first use. A failure to build them (a shared
// config file that does not parse, a profile that does not exist) is Permanent and named after the region.
func (b *Backend) clients(ctx context.Context, name string) (*region, error) {
	r, ok := b.regions[name]
	if !ok {
		return nil, backend.Permanent("aws region "+name, "region %q is not configured on this provider (configured: %v)", name, b.Regions())
	}
	r.once.Do(func() {
		// Clients outlive the call that built them: not bound to ctx's cancellation.
		cfg, err := b.cfg.sdkConfig(context.WithoutCancel(ctx), name, r.settings)
		if err != nil {
			r.err = backend.Permanent("aws region "+name, "loading the AWS configuration (profile, shared files, credentials): %v", err)
			return
		}
		r.ec2 = ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = optionalString(r.settings.EC2Endpoint) })
		r.ssm = ssm.NewFromConfig(cfg, func(o *ssm.Options) { o.BaseEndpoint = optionalString(r.settings.SSMEndpoint) })
		r.sts = sts.NewFromConfig(cfg, func(o *sts.Options) { o.BaseEndpoint = optionalString(r.settings.STSEndpoint) })
		r.quotas = servicequotas.NewFromConfig(cfg, func(o *servicequotas.Options) {
			o.BaseEndpoint = optionalString(r.settings.ServiceQuotasEndpoint)
		})
		r.logs = cloudwatchlogs.NewFromConfig(cfg, func(o *cloudwatchlogs.Options) { o.BaseEndpoint = optionalString(r.settings.LogsEndpoint) })
		r.elb = elb.NewFromConfig(cfg, func(o *elb.Options) { o.BaseEndpoint = optionalString(r.settings.ELBEndpoint) })
		r.iam = iam.NewFromConfig(cfg, func(o *iam.Options) {
			// IAM is global: one endpoint per partition, signed for the partition's first region.
			o.Region = iamRegion(name)
			o.BaseEndpoint = optionalString(r.settings.IAMEndpoint)
		})
	})
	return r, r.err
}

func optionalString(s string) *string {
	if s == "" {
		return nil
	}
	return awssdk.String(s)
}

func instanceObject(region, name string) string {
	return fmt.Sprintf("aws instance %s in region %s", name, region)
}

func checkID(id backend.ProviderID) error {
	if id.Backend != Kind || id.Scope != "" {
		return backend.Permanent(id.String(), "not an aws id (%s)", IDForm)
	}
	return nil
}

// liveInstance is the instance of the proxy id names, in its region; NotFound when none is pending,
// running, stopping or stopped. A proxy of several whose first instance is gone is refused: the change that
// asks for it (Reconfigure) comes after an Update, which makes the first again.
func (b *Backend) liveInstance(ctx context.Context, id backend.ProviderID) (*region, *ec2types.Instance, error) {
	r, f, err := b.liveProxy(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if f.standIn != nil {
		return nil, nil, backend.Permanent(instanceObject(id.Target, id.Name), "its first instance is gone: apply again; the update makes it again before the rules change")
	}
	return r, f.first, nil
}

// liveProxy is liveInstance for a proxy of several that may have lost its first instance (findProxy): the
// proxy found through its first instance, or through the member standing in for it.
func (b *Backend) liveProxy(ctx context.Context, id backend.ProviderID) (*region, foundProxy, error) {
	if err := checkID(id); err != nil {
		return nil, foundProxy{}, err
	}
	r, err := b.clients(ctx, id.Target)
	if err != nil {
		return nil, foundProxy{}, err
	}
	f, err := b.findProxy(ctx, r, id.Name)
	if err != nil {
		return nil, foundProxy{}, err
	}
	in := f.ref()
	if in == nil {
		return nil, foundProxy{}, backend.NotFound(instanceObject(id.Target, id.Name), "no instance of this name is pending, running or stopped")
	}
	// An id says where a proxy is, not whose: another owner's proxy of the same name is not this one.
	if tags := tagMap(in.Tags); managed(tags) {
		if err := backend.OwnershipOf(ctx).Reading().Check(instanceObject(id.Target, id.Name), tags[backend.LabelOwner], tags[backend.LabelUID]); err != nil {
			return nil, foundProxy{}, err
		}
	}
	return r, f, nil
}

// Get reads the proxy back from its instance and its settings parameter; a proxy of several whose first
// instance is gone, through a member (findProxy).
func (b *Backend) Get(ctx context.Context, id backend.ProviderID) (backend.Instance, error) {
	r, f, err := b.liveProxy(ctx, id)
	if err != nil {
		return backend.Instance{}, err
	}
	return b.readFound(ctx, r, f)
}

// Update changes the tags in place, on the instance and everything made for it: every member's instance and
// root volume, and for a proxy of several its load balancer and target group (retagLoadBalancer). A member of
// a proxy of several that is Gone (its instance ended: ha.go) is then made again with spec's rules and labels,
// as a retried Create would make it, and registered with the target group (restoreMembers); the others are
// left as they are. A new image for a proxy of several is rolled over its members one at a time (rollImage).
// A proxy of several whose first instance is gone has it made again first, the same way (findProxy).
func (b *Backend) Update(ctx context.Context, id backend.ProviderID, spec backend.Spec) (backend.Instance, error) {
	r, f, err := b.liveProxy(ctx, id)
	if err != nil {
		return backend.Instance{}, err
	}
	in := f.ref()
	obj := instanceObject(id.Target, id.Name)
	tags := tagMap(in.Tags)
	// liveInstance read it as a read does (the owner alone): a change checks the UID too.
	if managed(tags) {
		if err := backend.OwnershipOf(ctx).Check(obj, tags[backend.LabelOwner], tags[backend.LabelUID]); err != nil {
			return backend.Instance{}, err
		}
	}
	if spec.UID != "" && tags[backend.LabelUID] != spec.UID {
		return backend.Instance{}, backend.Permanent(obj, "belongs to proxy %q, not %q", tags[backend.LabelUID], spec.UID)
	}
	spec.UID, spec.Owner = tags[backend.LabelUID], tags[backend.LabelOwner]
	want := objectTags(spec)
	// Every member of a proxy of several instances, and each one's root volume.
	members, err := b.findMembers(ctx, r, id.Name)
	if err != nil {
		return backend.Instance{}, err
	}
	err = b.retagInstances(ctx, r, obj, append([]*ec2types.Instance{f.first}, slices.Collect(maps.Values(members))...), want)
	if err != nil {
		return backend.Instance{}, err
	}
	if _, several := tags[TagInstances]; several || len(members) > 0 {
		if err := b.retagLoadBalancer(ctx, r, spec); err != nil {
			return backend.Instance{}, err
		}
	}
	n, _ := strconv.Atoi(tags[TagInstances])
	if f.standIn != nil && n > 1 {
		// The first instance is gone: made again before the rest, which goes on from it as for a whole proxy.
		if in, err = b.remakeFirst(ctx, r, spec, f, members, n); err != nil {
			return backend.Instance{}, err
		}
	}
	if n > 1 {
		// Fewer instances first removes those above the count, more records it (ha_ops.go); then every member
		// up to it that is missing is made, the new ones of a larger count among them.
		target := planCount(spec, n)
		if err := b.resizeMembers(ctx, r, spec, in, members, n, target); err != nil {
			return backend.Instance{}, err
		}
		if err := b.restoreMembers(ctx, r, spec, in, withFirst(members, in), target); err != nil {
			return backend.Instance{}, err
		}
		if err := b.rollImage(ctx, r, spec, in, target); err != nil {
			return backend.Instance{}, err
		}
	}
	in, err = b.findInstance(ctx, r, id.Name)
	if err != nil {
		return backend.Instance{}, err
	}
	if in == nil {
		return backend.Instance{}, backend.NotFound(obj, "gone while its tags were changed")
	}
	return b.readBackRegistered(ctx, r, spec, in)
}

// retagInstances sets the tags want on the live instances among instances (nil or shutting down ones are left
// out) and their root volumes, and removes the user's labels that want no longer has from them.
func (b *Backend) retagInstances(ctx context.Context, r *region, obj string, instances []*ec2types.Instance, want map[string]string) error {
	// What goes is the user's labels that are no longer wanted, on any of the instances (droppedLabels).
	held := map[string]string{}
	var resources []string
	for _, m := range instances {
		if m == nil || memberGone(m) {
			continue // shutting down: made again below, with the tags wanted
		}
		memberTags := tagMap(m.Tags)
		maps.Copy(held, memberTags)
		resources = append(resources, awssdk.ToString(m.InstanceId))
		if _, rolled := memberTags[TagImage]; rolled {
			continue // its root volume, made again by an image roll, does not carry the tags the policy asks (replaceRoot)
		}
		for _, bd := range m.BlockDeviceMappings {
			if bd.Ebs != nil && bd.Ebs.VolumeId != nil {
				resources = append(resources, *bd.Ebs.VolumeId)
			}
		}
	}
	stale := droppedLabels(held, want)
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		if len(stale) > 0 {
			keys := make([]ec2types.Tag, len(stale))
			for i, k := range stale {
				keys[i] = ec2types.Tag{Key: awssdk.String(k)}
			}
			if _, err := r.ec2.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: resources, Tags: keys}); err != nil {
				return classify(obj, err)
			}
		}
		_, err := r.ec2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: resources, Tags: ec2Tags(want)})
		return classify(obj, err)
	})
}

// remakeFirst makes again the first instance of the proxy of n instances f found through a member standing in
// for it (findProxy), as restoreMembers makes any member again, and returns it.
func (b *Backend) remakeFirst(ctx context.Context, r *region, spec backend.Spec, f foundProxy, members map[int]*ec2types.Instance, n int) (*ec2types.Instance, error) {
	if err := b.restoreMembers(ctx, r, spec, f.standIn, withFirst(members, f.first), n); err != nil {
		return nil, err
	}
	in, err := b.findInstance(ctx, r, spec.Name)
	if err != nil {
		return nil, err
	}
	if in == nil || memberGone(in) {
		return nil, backend.Transient(instanceObject(r.name, spec.Name), "its first instance, launched again, is not listed yet")
	}
	return in, nil
}

// withFirst is members (findMembers') with first as member 0, as restoreMembers takes them.
func withFirst(members map[int]*ec2types.Instance, first *ec2types.Instance) map[int]*ec2types.Instance {
	out := maps.Clone(members)
	out[0] = first
	return out
}
