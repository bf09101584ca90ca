package aws

import (
	"context"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Reconfigure writes the new configuration to the proxy's parameters and its client ranges to its security
// group, then waits until the guest reports it applied. The guest checks a configuration with Squid before
// swapping it in and keeps the last good one otherwise; the settings were validated when rendered here.
func (b *Backend) Reconfigure(ctx context.Context, id backend.ProviderID, settings proxyconf.Settings) (backend.Instance, error) {
	r, in, err := b.liveInstance(ctx, id)
	if err != nil {
		return backend.Instance{}, err
	}
	obj := instanceObject(id.Target, id.Name)
	// liveInstance read it as a read does (the owner alone): a change checks the UID too.
	if tags := tagMap(in.Tags); managed(tags) {
		if err := backend.OwnershipOf(ctx).Check(obj, tags[backend.LabelOwner], tags[backend.LabelUID]); err != nil {
			return backend.Instance{}, err
		}
	}
	current, err := b.readBack(ctx, r, in)
	if err != nil {
		return backend.Instance{}, err
	}
	st, ok, _, err := b.readStoredSpec(ctx, r, id.Name)
	if err != nil {
		return backend.Instance{}, err
	}
	if !ok || !current.Reconfigurable {
		return backend.Instance{}, backend.Permanent(obj, "its settings parameter is gone, so its rules cannot be changed in place: replace the proxy")
	}
	opts, _ := current.Placement.Options.(*Options)
	// In the format the instance's guest reads, which it was launched with: a proxy an earlier provider
	// launched keeps its whole config in one parameter, as long as the rules fit it (guest.FormatWhole).
	// Nothing is written unless all of it fits.
	if st.ConfigFormat > guest.FormatLatest {
		return backend.Instance{}, backend.Permanent(obj, "its guest reads configs in a format (%d) of a later version of this provider: use that version", st.ConfigFormat)
	}
	if st.ConfigFormat < guest.FormatClientCA && settings.TLS != nil && (settings.TLS.ClientCAPEM != "" || settings.TLS.ClientCRLPEM != "") {
		return backend.Instance{}, oldGuestClientCA(obj)
	}
	if !takesLogFormat(st.ConfigFormat, settings) {
		return backend.Instance{}, oldGuestJSONLog(obj)
	}
	if !takesMetrics(st.ConfigFormat, settings) {
		return backend.Instance{}, oldGuestMetrics(obj)
	}
	rendered, err := renderParameters(id.Name, settings, st.ConfigFormat)
	if err == nil {
		err = checkSizes(id.Name, settings, *opts, rendered)
	}
	if err != nil {
		return backend.Instance{}, backend.NewError(backend.ClassPermanent, obj, err)
	}
	if rendered.format == guest.FormatWhole && len(rendered.config) > maxAdvancedParameter {
		return backend.Instance{}, oldFormatTooLarge(obj, len(rendered.config))
	}
	// The config's parts are bound to the instance as they are written: one it had no part of that number
	// before must be readable by its role at once.
	arn, err := b.instanceARN(ctx, r, awssdk.ToString(in.InstanceId))
	if err != nil {
		return backend.Instance{}, err
	}
	spec := backend.Spec{Name: id.Name, UID: current.UID, Owner: current.Owner, Labels: current.Labels, Proxy: settings}
	// Clients that cannot all be admitted change nothing: the proxy keeps its rules and its config.
	health := 0
	if opts.instances() > 1 {
		health = len(opts.SubnetIDs)
	}
	if err := b.checkClientRules(ctx, r, "aws security group "+securityGroupName(id.Name)+" in region "+r.name, settings, health); err != nil {
		return backend.Instance{}, err
	}
	// Written even when the config id is the one stored: Reconfigure also puts back a config that drifted
	// (configDrift), and each write has a new key.
	if err := b.putParameters(ctx, r, spec, newStoredSpec(settings, *opts, rendered), rendered, arn); err != nil {
		return backend.Instance{}, err
	}
	if err := b.reconfigureGroup(ctx, r, id.Name, awssdk.ToString(in.VpcId), *opts, settings); err != nil {
		return backend.Instance{}, err
	}
	if err := b.waitApplied(ctx, r, id.Name, rendered); err != nil {
		return backend.Instance{}, err
	}
	if opts.instances() > 1 {
		if err := b.reconfigureMembers(ctx, r, spec, *opts, settings, current); err != nil {
			return backend.Instance{}, err
		}
	}
	return b.Get(ctx, id)
}

// reconfigureGroup sets the proxy's security group's rules to settings' (and, for several instances, keeps
// admitting the load balancer's health checks from the subnets).
func (b *Backend) reconfigureGroup(ctx context.Context, r *region, name, vpcID string, o Options, settings proxyconf.Settings) error {
	group, err := b.findSecurityGroup(ctx, r, securityGroupName(name), vpcID)
	if err != nil || group == nil {
		return err
	}
	var health []string
	if o.instances() > 1 {
		place, err := b.placementOf(ctx, r, o)
		if err != nil {
			return err
		}
		health = place.healthRanges()
	}
	return b.setIngress(ctx, r, "aws security group "+securityGroupName(name)+" in region "+r.name, group, settings, health, false)
}

// reconfigureMembers brings members 1 to n-1 of a proxy of several instances to the new settings, one at a
// time: member 0 has applied them (Reconfigure), and each next member's parameters are written only once the
// one before has applied its own and its target is healthy again, so that the load balancer always has
// members serving. The listener's port is the one the proxy was made with: a new port is a replacement.
func (b *Backend) reconfigureMembers(ctx context.Context, r *region, spec backend.Spec, o Options, settings proxyconf.Settings, current backend.Instance) error {
	obj := instanceObject(r.name, spec.Name)
	if current.Proxy != nil && settings.Port != current.Proxy.Port {
		return backend.Permanent(obj, "the port of a proxy of several instances is its load balancer's listener's: changing it (%d to %d) replaces the proxy", current.Proxy.Port, settings.Port)
	}
	if err := b.waitHealthy(ctx, r, spec.Name, current.Members, 0); err != nil {
		return err
	}
	members, err := b.findMembers(ctx, r, spec.Name)
	if err != nil {
		return err
	}
	for k := 1; k < o.instances(); k++ {
		in := members[k]
		if in == nil {
			return backend.Permanent(memberObject(r.name, spec.Name, k), "is gone: replace the proxy to make it again")
		}
		ms := memberSpec(spec, k)
		rendered, err := renderParameters(ms.Name, settings, guest.FormatLatest)
		if err != nil {
			return backend.NewError(backend.ClassPermanent, obj, err)
		}
		arn, err := b.instanceARN(ctx, r, awssdk.ToString(in.InstanceId))
		if err != nil {
			return err
		}
		if err := b.putParameters(ctx, r, ms, newStoredSpec(settings, o, rendered), rendered, arn); err != nil {
			return err
		}
		if err := b.waitApplied(ctx, r, ms.Name, rendered); err != nil {
			return err
		}
		if err := b.waitHealthy(ctx, r, spec.Name, current.Members, k); err != nil {
			return err
		}
	}
	return nil
}

// waitHealthy waits until member k's target is healthy in the load balancer's target group; members lists
// the proxy's members as read, for member k's instance id.
func (b *Backend) waitHealthy(ctx context.Context, r *region, proxy string, members []backend.Member, k int) error {
	if k >= len(members) {
		return nil
	}
	return b.waitTargetHealthy(ctx, r, proxy, memberObject(r.name, proxy, k), members[k].Name)
}

// waitTargetHealthy waits until the instance id's target is healthy in the proxy's target group.
func (b *Backend) waitTargetHealthy(ctx context.Context, r *region, proxy, obj, id string) error {
	return b.pollUntil(ctx, obj, "its load balancer health check to pass", func(ctx context.Context) (bool, error) {
		l, _, _, err := b.findLoadBalancer(ctx, r, proxy)
		if err != nil {
			return false, err
		}
		health, err := b.targetHealth(ctx, r, proxy, l.targetGroup)
		if err != nil {
			return false, err
		}
		return health[id].State == elbtypes.TargetHealthStateEnumHealthy, nil
	})
}
