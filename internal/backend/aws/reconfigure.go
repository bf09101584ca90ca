package aws

import (
	"context"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"

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
	if err := b.checkClientRules(ctx, r, "aws security group "+securityGroupName(id.Name)+" in region "+r.name, settings); err != nil {
		return backend.Instance{}, err
	}
	// Written even when the config id is the one stored: Reconfigure also puts back a config that drifted
	// (configDrift), and each write has a new key.
	if err := b.putParameters(ctx, r, spec, newStoredSpec(settings, *opts, rendered), rendered, arn); err != nil {
		return backend.Instance{}, err
	}
	group, err := b.findSecurityGroup(ctx, r, securityGroupName(id.Name), awssdk.ToString(in.VpcId))
	if err != nil {
		return backend.Instance{}, err
	}
	if group != nil {
		if err := b.setIngress(ctx, r, "aws security group "+securityGroupName(id.Name)+" in region "+r.name, group, settings, false); err != nil {
			return backend.Instance{}, err
		}
	}
	if err := b.waitApplied(ctx, r, id.Name, rendered); err != nil {
		return backend.Instance{}, err
	}
	return b.Get(ctx, id)
}
