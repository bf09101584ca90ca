package gcp

// Deleting, reconfiguring and relabelling a proxy of several VMs (ha.go).

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// deleteHA deletes what a proxy of several VMs has, in the order the API allows (forwarding rule, backend
// service, health check and groups, then the VMs), each step treating NotFound as done. When neither a member
// nor the forwarding rule is left, nothing of such a proxy is (they are made first and deleted last).
func (b *Backend) deleteHA(ctx context.Context, p *project, id backend.ProviderID) error {
	region, own := regionOf(id.Scope), backend.OwnershipOf(ctx)
	vms, err := b.listMembers(ctx, p, id)
	if err != nil {
		return err
	}
	fr, err := b.getForwardingRule(ctx, p, region, id.Name)
	if err != nil {
		return err
	}
	if len(vms) == 0 && fr == nil {
		return nil
	}
	for _, in := range vms {
		if err := ownedBy(own, instanceObject(p.id, lastSegment(in.GetZone()), in.GetName()), in.GetLabels()); err != nil {
			return err
		}
	}
	steps := []haStep{
		{"forwarding rule", region, func(ctx context.Context) (string, error) {
			cur, err := p.forwardingRules.Get(ctx, &computepb.GetForwardingRuleRequest{Project: p.id, Region: region, ForwardingRule: id.Name})
			return cur.GetDescription(), err
		}, func(ctx context.Context) (*compute.Operation, error) {
			return p.forwardingRules.Delete(ctx, &computepb.DeleteForwardingRuleRequest{Project: p.id, Region: region, ForwardingRule: id.Name})
		}},
		{"backend service", region, func(ctx context.Context) (string, error) {
			cur, err := p.backendServices.Get(ctx, &computepb.GetRegionBackendServiceRequest{Project: p.id, Region: region, BackendService: id.Name})
			return cur.GetDescription(), err
		}, func(ctx context.Context) (*compute.Operation, error) {
			return p.backendServices.Delete(ctx, &computepb.DeleteRegionBackendServiceRequest{Project: p.id, Region: region, BackendService: id.Name})
		}},
		{"health check", region, func(ctx context.Context) (string, error) {
			cur, err := p.healthChecks.Get(ctx, &computepb.GetRegionHealthCheckRequest{Project: p.id, Region: region, HealthCheck: id.Name})
			return cur.GetDescription(), err
		}, func(ctx context.Context) (*compute.Operation, error) {
			return p.healthChecks.Delete(ctx, &computepb.DeleteRegionHealthCheckRequest{Project: p.id, Region: region, HealthCheck: id.Name})
		}},
	}
	zones, err := b.regionZones(ctx, p, region, id.Scope)
	if err != nil {
		return err
	}
	for _, z := range zones {
		steps = append(steps, haStep{"instance group", z, func(ctx context.Context) (string, error) {
			cur, err := p.groups.Get(ctx, &computepb.GetInstanceGroupRequest{Project: p.id, Zone: z, InstanceGroup: id.Name})
			return cur.GetDescription(), err
		}, func(ctx context.Context) (*compute.Operation, error) {
			return p.groups.Delete(ctx, &computepb.DeleteInstanceGroupRequest{Project: p.id, Zone: z, InstanceGroup: id.Name})
		}})
	}
	for _, s := range steps {
		if err := b.haDeleteStep(ctx, p, id, own, s); err != nil {
			return err
		}
	}
	errs := make([]error, len(vms))
	var wg sync.WaitGroup
	for i, in := range vms {
		wg.Go(func() {
			errs[i] = b.delete(ctx, backend.ProviderID{Backend: Kind, Target: p.id, Scope: lastSegment(in.GetZone()), Name: in.GetName()}, false)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// reconfigureHA reaches the members one at a time: each confirms through its guest that Squid runs the new
// config (reconfigureVM waits for it) before the next is changed, so a config a guest refuses stops the change
// with the other members still on the last good one.
func (b *Backend) reconfigureHA(ctx context.Context, p *project, id backend.ProviderID, settings proxyconf.Settings) (backend.Instance, error) {
	vms, err := b.listMembers(ctx, p, id)
	if err != nil {
		return backend.Instance{}, err
	}
	if len(vms) == 0 {
		return backend.Instance{}, backend.NewError(backend.ClassNotFound, instanceObject(p.id, id.Scope, id.Name), errors.New("no VM of the proxy is left"))
	}
	for _, in := range vms {
		if err := b.reconfigureVM(ctx, p, backend.ProviderID{Backend: Kind, Target: p.id, Scope: lastSegment(in.GetZone()), Name: in.GetName()}, settings); err != nil {
			return backend.Instance{}, err
		}
	}
	return b.getHA(ctx, p, id)
}

// updateHA changes the labels of every member and of the forwarding rule, and the members' Cloud Logging,
// brings the proxy to the number of VMs opts asks (resize) and makes again the members whose VM is gone
// (restoreGone).
func (b *Backend) updateHA(ctx context.Context, p *project, id backend.ProviderID, spec backend.Spec, opts *Options) (backend.Instance, error) {
	vms, err := b.listMembers(ctx, p, id)
	if err != nil {
		return backend.Instance{}, err
	}
	if len(vms) == 0 {
		return backend.Instance{}, backend.NewError(backend.ClassNotFound, instanceObject(p.id, id.Scope, id.Name), errors.New("no VM of the proxy is left"))
	}
	for _, in := range vms {
		mid := backend.ProviderID{Backend: Kind, Target: p.id, Scope: lastSegment(in.GetZone()), Name: in.GetName()}
		if err := b.updateVM(ctx, p, mid, spec, opts); err != nil {
			return backend.Instance{}, err
		}
	}
	target := 0
	if opts != nil && opts.Instances > 1 {
		target = opts.Instances
		if err := ValidateHAName(id.Name, target); err != nil {
			return backend.Instance{}, backend.NewError(backend.ClassPermanent, instanceObject(p.id, id.Scope, id.Name), err)
		}
	}
	// The members up to the count first, then the ones above it go: a proxy whose first VMs are gone keeps a VM
	// all along, and restoreGone reads the proxy's options from one that is there.
	made, err := b.restoreGone(ctx, p, id, spec, opts, vms, target)
	if err != nil {
		return backend.Instance{}, err
	}
	if target > 0 {
		if err := b.shrinkHA(ctx, p, id, vms, target); err != nil {
			return backend.Instance{}, err
		}
		if err := b.growHA(ctx, p, id, vms, target, made); err != nil {
			return backend.Instance{}, err
		}
		if err := b.rollImage(ctx, p, id, spec, opts, vms, target); err != nil {
			return backend.Instance{}, err
		}
	}
	region := regionOf(id.Scope)
	obj := haObject("forwarding rule", p.id, region, id.Name)
	err = backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		fr, err := p.forwardingRules.Get(ctx, &computepb.GetForwardingRuleRequest{Project: p.id, Region: region, ForwardingRule: id.Name})
		if err != nil {
			return classify(obj, err)
		}
		want := backend.ManagedLabels(withIdentity(spec, fr.GetLabels()))
		if equalMaps(fr.GetLabels(), want) {
			return nil
		}
		op, err := p.forwardingRules.SetLabels(ctx, &computepb.SetLabelsForwardingRuleRequest{Project: p.id, Region: region, Resource: id.Name,
			RegionSetLabelsRequestResource: &computepb.RegionSetLabelsRequest{Labels: want, LabelFingerprint: fr.LabelFingerprint}})
		if err != nil {
			return classify(obj, err)
		}
		return b.wait(ctx, op, obj)
	})
	if err != nil && !backend.IsNotFound(err) {
		return backend.Instance{}, err
	}
	inst, err := b.getHA(ctx, p, id)
	if err != nil {
		return inst, err
	}
	return b.rejoinGroups(ctx, p, id, inst)
}

// rejoinGroups adds to its zone's group every running member that inst, the proxy as Get read it, finds
// outside the load balancer, and reads the proxy again. Such a member is one whose VM restoreGone or a larger
// count made on an Update cut before the VM joined its group: the next Update finds the VM present and makes
// nothing, so without this step it would stay outside for good. Get's read of the members' health already
// tells, so a proxy whose members are all backends costs no request more.
func (b *Backend) rejoinGroups(ctx context.Context, p *project, id backend.ProviderID, inst backend.Instance) (backend.Instance, error) {
	var outside []backend.Member
	for _, m := range inst.Members {
		if m.Reason == reasonNotABackend {
			outside = append(outside, m)
		}
	}
	if len(outside) == 0 {
		return inst, nil
	}
	g, _ := inst.Placement.Options.(*Options)
	if g == nil {
		g = &Options{}
	}
	desc := haDescription(id.Scope, id.Name, inst.UID, inst.Owner)
	for _, m := range outside {
		if err := b.ensureGroup(ctx, p, m.Scope, id.Scope, id.Name, desc, g, []string{instanceLink(p.id, m.Scope, m.Name)}, backend.OwnershipOf(ctx)); err != nil {
			return backend.Instance{}, err
		}
	}
	return b.getHA(ctx, p, id)
}

// haStep is one of the load balancer's objects to delete: read its description, delete it.
type haStep struct {
	kind, scope string
	get         func(context.Context) (string, error)
	del         func(context.Context) (*compute.Operation, error)
}

// haDeleteStep deletes one object of the proxy's load balancer when its description names the proxy and an
// owner own allows; NotFound is done.
func (b *Backend) haDeleteStep(ctx context.Context, p *project, id backend.ProviderID, own backend.Ownership, s haStep) error {
	obj := haObject(s.kind, p.id, s.scope, id.Name)
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		desc, err := s.get(ctx)
		if err != nil {
			return classify(obj, err)
		}
		if err := haOwned(own, obj, desc, id.Scope, id.Name); err != nil {
			return err
		}
		op, err := s.del(ctx)
		if err != nil {
			return classify(obj, err)
		}
		return b.wait(ctx, op, obj)
	})
	if backend.IsNotFound(err) {
		return nil
	}
	return err
}

// restoreGone makes again, as createHA made them, the members of the proxy whose VM no longer exists (a VM
// deleted behind Terraform's back, which Get reports Gone): each under its own name in its own zone (haSlots
// over the region's zones, as at the create), with the proxy's metadata and the Spec's labels and rules, and
// added to its zone's group. The other VMs, the health check, the backend service and the forwarding rule are
// left as they are. Nothing is made when no member is gone. With a target above one (the count Update asks
// for), the members up to it are the ones the proxy should have, the new ones of a larger count among them;
// without, the count the members record. It reports whether it made a VM.
func (b *Backend) restoreGone(ctx context.Context, p *project, id backend.ProviderID, spec backend.Spec, opts *Options, vms []*computepb.Instance, target int) (bool, error) {
	count := len(vms)
	present := map[string]bool{}
	for _, in := range vms {
		present[in.GetName()] = true
		if _, _, n, ok := memberOf(in); ok {
			count = max(count, n)
		}
	}
	if target > 1 {
		count = target
	}
	missing := false
	for i := 1; i <= count; i++ {
		missing = missing || !present[memberName(id.Name, i)]
	}
	if !missing {
		return false, nil
	}
	// updateVM checked that the members are this proxy's; the Spec may leave its identity to them.
	spec = withIdentity(spec, vms[0].GetLabels())
	// The VM as a retried Create would make it: the Spec's options with the backend's defaults (resolve), in
	// the proxy's zone; the options read back from a member where the Spec has none.
	pl := spec.Placement
	pl.Target, pl.Scope = p.id, id.Scope
	if opts == nil {
		if read, err := toInstance(p.id, vms[0]); err == nil {
			pl.Options = read.Placement.Options
		}
	}
	_, resolved, err := b.resolve(pl)
	if err != nil {
		return false, err
	}
	g := *resolved
	g.Instances = count
	zones, err := b.regionZones(ctx, p, regionOf(id.Scope), id.Scope)
	if err != nil {
		return false, err
	}
	spec.Name = id.Name
	member := haMember{of: memberOfValue(id.Scope, id.Name, count), labels: backend.ManagedLabels(spec)}
	desc := haDescription(id.Scope, id.Name, spec.UID, spec.Owner)
	for _, s := range haSlots(id.Name, zones, count) {
		if present[s.name] {
			continue
		}
		ms, mg := spec, g
		ms.Name = s.name
		mpl := backend.Placement{Backend: Kind, Target: p.id, Scope: s.zone, Options: &mg}
		if _, err := b.createVM(ctx, ms, mpl, &mg, member); err != nil {
			return false, err
		}
		if err := b.ensureGroup(ctx, p, s.zone, id.Scope, id.Name, desc, &mg, []string{instanceLink(p.id, s.zone, s.name)}, backend.OwnershipOfSpec(spec)); err != nil {
			return false, err
		}
	}
	return true, nil
}

// memberIndex is i of a member VM named NAME-i, 0 for another name.
func memberIndex(proxy, vm string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(vm, proxy+"-"))
	if err != nil || !strings.HasPrefix(vm, proxy+"-") || i < 1 {
		return 0
	}
	return i
}

// shrinkHA removes the members above target (a smaller instances), the highest first: each leaves its zone's
// group, so the load balancer sends it no new connection, before its VM is deleted. A zone's group left empty
// stays a backend of the service, ready for a larger count again; Delete removes it with the rest.
func (b *Backend) shrinkHA(ctx context.Context, p *project, id backend.ProviderID, vms []*computepb.Instance, target int) error {
	var extra []*computepb.Instance
	for _, in := range vms {
		if memberIndex(id.Name, in.GetName()) > target {
			extra = append(extra, in)
		}
	}
	slices.SortFunc(extra, func(a, c *computepb.Instance) int {
		return memberIndex(id.Name, c.GetName()) - memberIndex(id.Name, a.GetName())
	})
	for _, in := range extra {
		if err := b.removeMember(ctx, p, id, in); err != nil {
			return err
		}
	}
	return nil
}

// rollImage brings the members of a proxy of target VMs whose boot image is not the one opts asks for to it,
// one VM at a time, the proxy serving throughout: first a surge member (target+1, in the next zone of the round
// robin) with the new image joins the load balancer and is waited for until its health check passes; then each
// old member, the highest-numbered first, leaves its group and is deleted, is made again under its name with the
// new image (restoreGone) and is waited for until it serves; last the surge member goes (shrinkHA). So a VM of
// the new image serves before any old one goes, and the proxy never has fewer than target serving but for the
// largest count, which has no room for a surge and swaps its members one by one. vms are the members before
// the Update: one it made meanwhile has the new image already, and with none old nothing is read or written.
// A change cut in between leaves the surge member, which makes Get read target+1, or members of two images,
// which Get reports (haInstance): either way the next plan asks for an Update, which goes on.
func (b *Backend) rollImage(ctx context.Context, p *project, id backend.ProviderID, spec backend.Spec, opts *Options, vms []*computepb.Instance, target int) error {
	if opts == nil {
		return nil
	}
	pl := spec.Placement
	pl.Target, pl.Scope = p.id, id.Scope
	_, resolved, err := b.resolve(pl)
	if err != nil {
		return err
	}
	want := resolved.Image
	old := func(in *computepb.Instance) bool {
		st, ok := readStoredSpec(in)
		i := memberIndex(id.Name, in.GetName())
		return ok && i >= 1 && i <= target && st.Image != want
	}
	if !slices.ContainsFunc(vms, old) {
		return nil
	}
	cur, err := b.listMembers(ctx, p, id)
	if err != nil {
		return err
	}
	if target < MaxInstances {
		if _, err := b.restoreGone(ctx, p, id, spec, opts, cur, target+1); err != nil {
			return err
		}
		if err := b.ensureBackends(ctx, p, id, target+1); err != nil {
			return err
		}
		if err := b.waitServing(ctx, p, id, memberName(id.Name, target+1)); err != nil {
			return err
		}
	}
	var stale []*computepb.Instance
	for _, in := range cur {
		if old(in) {
			stale = append(stale, in)
		}
	}
	slices.SortFunc(stale, func(a, c *computepb.Instance) int {
		return memberIndex(id.Name, c.GetName()) - memberIndex(id.Name, a.GetName())
	})
	for _, in := range stale {
		if err := b.removeMember(ctx, p, id, in); err != nil {
			return err
		}
		rest := slices.DeleteFunc(slices.Clone(cur), func(c *computepb.Instance) bool { return c.GetName() == in.GetName() })
		if _, err := b.restoreGone(ctx, p, id, spec, opts, rest, target); err != nil {
			return err
		}
		if err := b.waitServing(ctx, p, id, in.GetName()); err != nil {
			return err
		}
	}
	if target >= MaxInstances {
		return nil
	}
	now, err := b.listMembers(ctx, p, id)
	if err != nil {
		return err
	}
	return b.shrinkHA(ctx, p, id, now, target)
}

// waitServing waits until the backend service reports member VM name healthy: it serves behind the load
// balancer. The members are listed once, for the VM's zone; each poll reads the VM alone and its zone's health.
func (b *Backend) waitServing(ctx context.Context, p *project, id backend.ProviderID, name string) error {
	vms, err := b.listMembers(ctx, p, id)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(vms, func(in *computepb.Instance) bool { return in.GetName() == name })
	if i < 0 {
		return backend.Permanent(instanceObject(p.id, id.Scope, name), "is gone while the proxy's VMs were replaced for a new image")
	}
	zone := lastSegment(vms[i].GetZone())
	return b.pollUntil(ctx, func(ctx context.Context) (bool, error) {
		in, err := b.getInstance(ctx, p, zone, name)
		if backend.IsNotFound(err) {
			return false, backend.Permanent(instanceObject(p.id, zone, name), "is gone while the proxy's VMs were replaced for a new image")
		}
		if err != nil {
			return false, err
		}
		health, err := b.memberHealth(ctx, p, regionOf(id.Scope), id.Name, []*computepb.Instance{in})
		if err != nil {
			return false, err
		}
		return health[name+"@"+zone] == "HEALTHY", nil
	})
}

// removeMember takes member VM in out of its zone's group, so the load balancer sends it no new connection,
// then deletes it.
func (b *Backend) removeMember(ctx context.Context, p *project, id backend.ProviderID, in *computepb.Instance) error {
	zone := lastSegment(in.GetZone())
	obj := haObject("instance group", p.id, zone, id.Name)
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		op, err := p.groups.RemoveInstances(ctx, &computepb.RemoveInstancesInstanceGroupRequest{Project: p.id, Zone: zone, InstanceGroup: id.Name,
			InstanceGroupsRemoveInstancesRequestResource: &computepb.InstanceGroupsRemoveInstancesRequest{
				Instances: []*computepb.InstanceReference{{Instance: proto.String(in.GetSelfLink())}}}})
		if hasReason(err, "memberNotFound") {
			return nil // an earlier attempt removed it
		}
		if err != nil {
			return classify(obj, err)
		}
		return b.wait(ctx, op, obj)
	})
	if err != nil && !backend.IsNotFound(err) { // no group: nothing to leave
		return err
	}
	return b.delete(ctx, backend.ProviderID{Backend: Kind, Target: p.id, Scope: zone, Name: in.GetName()}, false)
}

// growHA finishes a change of the number of VMs to target once restoreGone made the members up to it (made:
// whether it made any) and shrinkHA removed those above: the backend service gets the group of every zone the
// members use that it lacks (a larger count reaching zones the smaller did not), and every member of vms (the
// members before the change) up to target that records another count records target (metadataMemberOf),
// which Get reads the members the proxy should have from; the ones restoreGone made record it already. With
// nothing made and every member on target (an Update that changes no count) it reads and writes nothing. The
// service is brought up to date before any count is written, so a change cut in between is finished by the
// next Update, which finds a member on the old count.
func (b *Backend) growHA(ctx context.Context, p *project, id backend.ProviderID, vms []*computepb.Instance, target int, made bool) error {
	want := memberOfValue(id.Scope, id.Name, target)
	var stale []*computepb.Instance
	for _, in := range vms {
		if v, _ := metadataValue(in, metadataMemberOf); v != want && memberIndex(id.Name, in.GetName()) <= target {
			stale = append(stale, in)
		}
	}
	if !made && len(stale) == 0 {
		return nil
	}
	if err := b.ensureBackends(ctx, p, id, target); err != nil {
		return err
	}
	for _, in := range stale {
		if err := b.setMemberOf(ctx, p, lastSegment(in.GetZone()), in.GetName(), want); err != nil {
			return err
		}
	}
	return nil
}

// ensureBackends gives the backend service the group of every zone the first n members use (haSlots' round
// robin over the region's zones) that it lacks, in one patch with the service's fingerprint.
func (b *Backend) ensureBackends(ctx context.Context, p *project, id backend.ProviderID, n int) error {
	region := regionOf(id.Scope)
	zones, err := b.regionZones(ctx, p, region, id.Scope)
	if err != nil {
		return err
	}
	obj := haObject("backend service", p.id, region, id.Name)
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		bs, err := p.backendServices.Get(ctx, &computepb.GetRegionBackendServiceRequest{Project: p.id, Region: region, BackendService: id.Name})
		if err != nil {
			return classify(obj, err)
		}
		if err := haOwned(backend.OwnershipOf(ctx), obj, bs.GetDescription(), id.Scope, id.Name); err != nil {
			return err
		}
		backends := slices.Clone(bs.GetBackends())
		for _, z := range zones[:min(len(zones), n)] {
			link := groupLink(p.id, z, id.Name)
			if !slices.ContainsFunc(backends, func(be *computepb.Backend) bool { return strings.HasSuffix(be.GetGroup(), link) }) {
				backends = append(backends, &computepb.Backend{Group: proto.String(link), BalancingMode: proto.String("CONNECTION")})
			}
		}
		if len(backends) == len(bs.GetBackends()) {
			return nil
		}
		op, err := p.backendServices.Patch(ctx, &computepb.PatchRegionBackendServiceRequest{Project: p.id, Region: region, BackendService: id.Name,
			BackendServiceResource: &computepb.BackendService{Fingerprint: bs.Fingerprint, Backends: backends}})
		if err != nil {
			return classify(obj, err) // 412: changed meanwhile; read again and retry
		}
		return b.wait(ctx, op, obj)
	})
}

// setMemberOf writes value as a member VM's metadataMemberOf, with the metadata's current fingerprint.
func (b *Backend) setMemberOf(ctx context.Context, p *project, zone, name, value string) error {
	obj := instanceObject(p.id, zone, name)
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		in, err := b.getInstance(ctx, p, zone, name)
		if err != nil {
			return err
		}
		items := slices.Clone(in.GetMetadata().GetItems())
		for i, it := range items {
			if it.GetKey() == metadataMemberOf {
				items[i] = &computepb.Items{Key: proto.String(metadataMemberOf), Value: proto.String(value)}
			}
		}
		op, err := p.instances.SetMetadata(ctx, &computepb.SetMetadataInstanceRequest{
			Project: p.id, Zone: zone, Instance: name,
			MetadataResource: &computepb.Metadata{Fingerprint: in.GetMetadata().Fingerprint, Items: items},
		})
		if err != nil {
			return classify(obj, err) // 412: the metadata changed meanwhile; read again and retry
		}
		return b.wait(ctx, op, obj)
	})
}
