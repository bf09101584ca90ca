package gcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"sync"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// A proxy of several VMs (Options.Instances above one) is an internal passthrough Network Load Balancer
// ("Internal passthrough Network Load Balancer overview"): its VMs, named after the proxy with "-1", "-2", ...
// and spread over the zones of the placement's region, round-robin from the placement's zone in the order
// the API lists the region's zones; an unmanaged instance group of the proxy's name in each zone used; a
// regional health check of the proxy's name on the health port (proxyconf.DefaultHealthPort, HTTP GET
// proxyconf.HealthPath); a regional backend service of that name (INTERNAL, TCP) over the groups; and a
// forwarding rule of that name whose internal address is the proxy's (InternalAddress) on the proxy's port.
// With a passthrough load balancer a VM receives the clients' packets addressed to the forwarding rule's
// address with the clients' own source: Squid listens on every address (the guest environment routes the
// rule's address to the VM), and the client ranges it admits are the clients', as with one VM.
//
// Each VM keeps its own ephemeral egress address (Member.EgressAddress). The proxy's id is the one a proxy of
// one VM has (the placement's zone, the proxy's name): no VM bears the proxy's own name, which tells the two
// apart. The VMs carry the proxy's labels and, in metadataMemberOf, the proxy they serve and how many VMs it
// has. The health check, the backend service and the groups take no labels: their description carries the
// proxy's identity and ownership (haDescription), and an object without it is never adopted nor deleted.
// The forwarding rule has both. Objects are made VMs first and deleted VMs last, so that while anything of
// the proxy is left a VM of it is too, and ListByTag (which lists VMs and forwarding rules) reports it.

// metadataMemberOf is the metadata key of a member VM: "ZONE/NAME/COUNT", the proxy's id scope and name and
// its number of instances.
const metadataMemberOf = "egress-member-of"

// memberOfValue is metadataMemberOf's value for a member of the proxy zone/name of count VMs (memberOf reads it).
func memberOfValue(zone, name string, count int) string {
	return fmt.Sprintf("%s/%s/%d", zone, name, count)
}

// groupLink is the relative link of the proxy name's instance group in zone.
func groupLink(project, zone, name string) string {
	return fmt.Sprintf("projects/%s/zones/%s/instanceGroups/%s", project, zone, name)
}

// instanceLink is the relative link of VM name in zone, as a group's addInstances takes it.
func instanceLink(project, zone, name string) string {
	return fmt.Sprintf("projects/%s/zones/%s/instances/%s", project, zone, name)
}

// haMember marks a VM createVM makes as a member of a proxy of several; the zero value makes a proxy's own VM.
type haMember struct {
	of     string
	labels map[string]string
}

func (m haMember) apply(in *computepb.Instance) {
	if m.of == "" {
		return
	}
	in.Labels = maps.Clone(m.labels)
	in.Disks[0].InitializeParams.Labels = maps.Clone(m.labels)
	in.Metadata.Items = append(in.Metadata.Items, &computepb.Items{Key: proto.String(metadataMemberOf), Value: proto.String(m.of)})
}

// memberName is the name of a proxy's i-th VM, from 1.
func memberName(proxy string, i int) string { return proxy + "-" + strconv.Itoa(i) }

// ValidateInstances accepts Options.Instances from 1 (0 is 1) to MaxInstances; a proxy of several VMs has
// an ephemeral egress address per VM, so the static address options are for a proxy of one.
func ValidateInstances(g Options) error {
	switch n := g.Instances; {
	case n < 0 || n > MaxInstances:
		return fmt.Errorf("instances must be from 1 to %d, not %d", MaxInstances, n)
	case n > 1 && (g.StaticEgressIP || g.EgressAddressName != ""):
		return fmt.Errorf("a proxy of %d instances gives each VM an egress address of its own: static_egress_ip and egress_address_name are for a proxy of one instance", n)
	}
	return nil
}

// ErrHAMetrics refuses metrics on a proxy of several VMs: each VM serves its own on its own address, which the
// proxy's one metrics_url cannot name, and the forwarding rule forwards the proxy's port alone.
var ErrHAMetrics = errors.New("metrics are not served by a proxy of several instances yet: each VM would serve its own on its own address, and the load balancer forwards the proxy's port alone")

// ValidateHAName accepts the name of a proxy of instances VMs: each VM is named after it with "-N", within
// Compute Engine's limit.
func ValidateHAName(name string, instances int) error {
	if instances <= 1 {
		return nil
	}
	if m := memberName(name, instances); len(m) > maxResourceName {
		return fmt.Errorf("the proxy's VMs would be named up to %q, %d characters, and Compute Engine accepts at most %d: use a name of at most %d characters",
			m, len(m), maxResourceName, maxResourceName-len(m)+len(name))
	}
	return nil
}

// haDescription is the description of the load balancer's objects: the proxy's identity and ownership.
func haDescription(zone, name, uid, owner string) string {
	return fmt.Sprintf("egress proxy %s in %s, uid %s, owner %s, managed by %s", name, zone, uid, owner, backend.ManagedByValue)
}

var haDescriptionRE = regexp.MustCompile(`^egress proxy ([a-z0-9-]+) in ([a-z0-9-]+), uid (\S*), owner (\S*), managed by (\S+)$`)

// haOwned checks an object found under the proxy's name: made by this provider for this proxy (its zone and
// name, since proxies of one region share the names of regional objects), and of the ownership o allows.
func haOwned(o backend.Ownership, object, description, zone, name string) error {
	m := haDescriptionRE.FindStringSubmatch(description)
	if m == nil || m[5] != backend.ManagedByValue {
		return backend.Permanent(object, "exists but was not made by this provider: not touching it")
	}
	if m[1] != name || m[2] != zone {
		return backend.Permanent(object, "belongs to the egress proxy %s in zone %s, not to %s in zone %s: proxies of several instances in one region need distinct names",
			m[1], m[2], name, zone)
	}
	return o.Check(object, m[4], m[3])
}

func haObject(kind, project, scope, name string) string {
	return fmt.Sprintf("gcp %s %s in project %s, %s", kind, name, project, scope)
}

// haSlot is where one member VM goes.
type haSlot struct{ name, zone string }

// regionZones lists the region's zones as the API lists them, rotated to start with first.
func (b *Backend) regionZones(ctx context.Context, p *project, region, first string) ([]string, error) {
	var zones []string
	obj := "gcp region " + region + " in project " + p.id
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		r, err := p.regions.Get(ctx, &computepb.GetRegionRequest{Project: p.id, Region: region})
		if err != nil {
			return classify(obj, err)
		}
		zones = nil
		for _, z := range r.GetZones() {
			zones = append(zones, lastSegment(z))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	i := slices.Index(zones, first)
	if i < 0 {
		return nil, backend.Permanent(obj, "does not list zone %s (its zones: %v)", first, zones)
	}
	return append(zones[i:], zones[:i]...), nil
}

// haSlots spreads n VMs round-robin over zones.
func haSlots(name string, zones []string, n int) []haSlot {
	out := make([]haSlot, n)
	for i := range out {
		out[i] = haSlot{memberName(name, i+1), zones[i%len(zones)]}
	}
	return out
}

// createHA makes the proxy's VMs side by side, then its groups, health check, backend service and forwarding
// rule. Each step adopts what an earlier attempt made (its description or labels name this proxy), so a retry
// after a crash or a lost answer finishes the work; on failure what exists is returned with the error, for the
// provider to record and replace.
func (b *Backend) createHA(ctx context.Context, spec backend.Spec, pl backend.Placement, g *Options) (backend.Instance, error) {
	project, zone, region := pl.Target, pl.Scope, regionOf(pl.Scope)
	id := backend.ProviderID{Backend: Kind, Target: project, Scope: zone, Name: spec.Name}
	if err := ValidateHAName(spec.Name, g.Instances); err != nil {
		return backend.Instance{}, backend.NewError(backend.ClassPermanent, "gcp project "+project, err)
	}
	if spec.Proxy.Metrics != nil {
		return backend.Instance{}, backend.NewError(backend.ClassPermanent, "gcp project "+project, ErrHAMetrics)
	}
	p, err := b.clients(ctx, project)
	if err != nil {
		return backend.Instance{}, err
	}
	// The proxy's id names a VM of the proxy's name when there is one: that name must stay free.
	switch in, err := b.getInstance(ctx, p, zone, spec.Name); {
	case err == nil && in.GetLabels()[backend.LabelManagedBy] != backend.ManagedByValue:
		return backend.Instance{}, backend.Permanent(instanceObject(project, zone, spec.Name), "exists but was not made by this provider: a proxy of several instances needs its name free in its zone")
	case err == nil:
		return backend.Instance{}, backend.Permanent(instanceObject(project, zone, spec.Name), "is a proxy of one instance: a proxy of several instances needs its name free in its zone")
	case !backend.IsNotFound(err):
		return backend.Instance{}, err
	}
	// VMs of this proxy's id that another proxy made (a create of the name killed before the CLI recorded
	// it) are refused before anything is made: a VM made beside them would mix the two proxies under one
	// id, which haPartial would record and no delete could then remove whole. Refused, they stay what the
	// orphan list shows.
	vms, err := b.listMembers(ctx, p, id)
	if err != nil {
		return backend.Instance{}, err
	}
	for _, in := range vms {
		if err := ownedBy(backend.OwnershipOfSpec(spec), instanceObject(project, lastSegment(in.GetZone()), in.GetName()), in.GetLabels()); err != nil {
			return backend.Instance{}, err
		}
	}
	zones, err := b.regionZones(ctx, p, region, zone)
	if err != nil {
		return backend.Instance{}, err
	}
	slots := haSlots(spec.Name, zones, g.Instances)
	member := haMember{of: memberOfValue(zone, spec.Name, g.Instances), labels: backend.ManagedLabels(spec)}
	errs := make([]error, len(slots))
	var wg sync.WaitGroup
	for i, s := range slots {
		wg.Go(func() {
			ms, mpl, mg := spec, pl, *g
			ms.Name, mpl.Scope = s.name, s.zone
			mpl.Options = &mg
			_, errs[i] = b.createVM(ctx, ms, mpl, &mg, member)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return b.haPartial(ctx, p, id, spec, err)
		}
	}
	if err := b.createLoadBalancer(ctx, p, spec, zone, zones, slots, g); err != nil {
		return b.haPartial(ctx, p, id, spec, err)
	}
	inst, err := b.getHA(ctx, p, id)
	if err != nil {
		return b.haPartial(ctx, p, id, spec, err)
	}
	return inst, nil
}

// createLoadBalancer makes (or adopts) the groups of the zones used, the health check, the backend service and
// the forwarding rule, in that order.
func (b *Backend) createLoadBalancer(ctx context.Context, p *project, spec backend.Spec, zone string, zones []string, slots []haSlot, g *Options) error {
	project, region := p.id, regionOf(zone)
	desc := haDescription(zone, spec.Name, spec.UID, spec.Owner)
	own := backend.OwnershipOfSpec(spec)
	var groups []string
	for _, z := range zones[:min(len(zones), len(slots))] {
		var in []string
		for _, s := range slots {
			if s.zone == z {
				in = append(in, instanceLink(project, z, s.name))
			}
		}
		if err := b.ensureGroup(ctx, p, z, zone, spec.Name, desc, g, in, own); err != nil {
			return err
		}
		groups = append(groups, groupLink(project, z, spec.Name))
	}
	hc := &computepb.HealthCheck{
		Name: proto.String(spec.Name), Description: proto.String(desc), Type: proto.String("HTTP"),
		HttpHealthCheck:  &computepb.HTTPHealthCheck{Port: proto.Int32(proxyconf.DefaultHealthPort), RequestPath: proto.String(proxyconf.HealthPath)},
		CheckIntervalSec: proto.Int32(5), TimeoutSec: proto.Int32(5), HealthyThreshold: proto.Int32(2), UnhealthyThreshold: proto.Int32(2),
	}
	hcObj := haObject("health check", project, region, spec.Name)
	err := b.ensure(ctx, hcObj, zone, spec.Name, own, func(ctx context.Context) (*compute.Operation, error) {
		return p.healthChecks.Insert(ctx, &computepb.InsertRegionHealthCheckRequest{Project: project, Region: region, HealthCheckResource: hc})
	}, func(ctx context.Context) (string, error) {
		cur, err := p.healthChecks.Get(ctx, &computepb.GetRegionHealthCheckRequest{Project: project, Region: region, HealthCheck: spec.Name})
		return cur.GetDescription(), err
	})
	if err != nil {
		return err
	}
	bs := &computepb.BackendService{
		Name: proto.String(spec.Name), Description: proto.String(desc), LoadBalancingScheme: proto.String("INTERNAL"), Protocol: proto.String("TCP"),
		HealthChecks: []string{fmt.Sprintf("projects/%s/regions/%s/healthChecks/%s", project, region, spec.Name)},
	}
	for _, gl := range groups {
		bs.Backends = append(bs.Backends, &computepb.Backend{Group: proto.String(gl), BalancingMode: proto.String("CONNECTION")})
	}
	err = b.ensure(ctx, haObject("backend service", project, region, spec.Name), zone, spec.Name, own, func(ctx context.Context) (*compute.Operation, error) {
		return p.backendServices.Insert(ctx, &computepb.InsertRegionBackendServiceRequest{Project: project, Region: region, BackendServiceResource: bs})
	}, func(ctx context.Context) (string, error) {
		cur, err := p.backendServices.Get(ctx, &computepb.GetRegionBackendServiceRequest{Project: project, Region: region, BackendService: spec.Name})
		return cur.GetDescription(), err
	})
	if err != nil {
		return err
	}
	port := spec.Proxy.Port
	if port == 0 {
		port = proxyconf.DefaultPort
	}
	fr := &computepb.ForwardingRule{
		Name: proto.String(spec.Name), Description: proto.String(desc), Labels: backend.ManagedLabels(spec),
		LoadBalancingScheme: proto.String("INTERNAL"), IPProtocol: proto.String("TCP"), Ports: []string{strconv.Itoa(port)},
		BackendService: proto.String(fmt.Sprintf("projects/%s/regions/%s/backendServices/%s", project, region, spec.Name)),
	}
	if g.Network != "" {
		fr.Network = proto.String(g.Network)
	}
	if g.Subnetwork != "" {
		fr.Subnetwork = proto.String(g.Subnetwork)
	}
	err = b.ensure(ctx, haObject("forwarding rule", project, region, spec.Name), zone, spec.Name, own, func(ctx context.Context) (*compute.Operation, error) {
		return p.forwardingRules.Insert(ctx, &computepb.InsertForwardingRuleRequest{Project: project, Region: region, ForwardingRuleResource: fr})
	}, func(ctx context.Context) (string, error) {
		cur, err := p.forwardingRules.Get(ctx, &computepb.GetForwardingRuleRequest{Project: project, Region: region, ForwardingRule: spec.Name})
		return cur.GetDescription(), err
	})
	if err != nil {
		return err
	}
	return nil
}

// ensure inserts one of the load balancer's objects and waits for it; when it exists already (409), it is
// adopted if its description names this proxy and an owner own allows.
func (b *Backend) ensure(ctx context.Context, object, zone, name string, own backend.Ownership,
	insert func(context.Context) (*compute.Operation, error), description func(context.Context) (string, error)) error {
	return backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		op, err := insert(ctx)
		if isConflict(err) {
			desc, err := description(ctx)
			if err != nil {
				return classify(object, err)
			}
			return haOwned(own, object, desc, zone, name)
		}
		if err != nil {
			return classify(object, err)
		}
		return b.wait(ctx, op, object)
	})
}

// ensureGroup makes the proxy's group in zone (or adopts it) and adds the instances it does not hold yet.
func (b *Backend) ensureGroup(ctx context.Context, p *project, zone, proxyZone, name, desc string, g *Options, instances []string, own backend.Ownership) error {
	obj := haObject("instance group", p.id, zone, name)
	ig := &computepb.InstanceGroup{Name: proto.String(name), Description: proto.String(desc)}
	if g.Network != "" {
		ig.Network = proto.String(g.Network)
	}
	err := b.ensure(ctx, obj, proxyZone, name, own, func(ctx context.Context) (*compute.Operation, error) {
		return p.groups.Insert(ctx, &computepb.InsertInstanceGroupRequest{Project: p.id, Zone: zone, InstanceGroupResource: ig})
	}, func(ctx context.Context) (string, error) {
		cur, err := p.groups.Get(ctx, &computepb.GetInstanceGroupRequest{Project: p.id, Zone: zone, InstanceGroup: name})
		return cur.GetDescription(), err
	})
	if err != nil {
		return err
	}
	// One instance a call: an instance the group holds already (an earlier attempt added it) is refused
	// memberAlreadyExists, which is what this step wants. The group is not listed first: the Go client sends
	// listInstances' whole request as its body, which the API's schema does not have.
	for _, in := range instances {
		err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
			op, err := p.groups.AddInstances(ctx, &computepb.AddInstancesInstanceGroupRequest{Project: p.id, Zone: zone, InstanceGroup: name,
				InstanceGroupsAddInstancesRequestResource: &computepb.InstanceGroupsAddInstancesRequest{
					Instances: []*computepb.InstanceReference{{Instance: proto.String(in)}}}})
			if hasReason(err, "memberAlreadyExists") {
				return nil
			}
			if err != nil {
				return classify(obj, err)
			}
			return b.wait(ctx, op, obj)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// hasReason reports whether err is an API error with that reason.
func hasReason(err error, reason string) bool {
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		return false
	}
	for _, item := range ge.Errors {
		if item.Reason == reason {
			return true
		}
	}
	return false
}

// haPartial returns, with err, what exists of the proxy, so that the provider records it and replaces it.
func (b *Backend) haPartial(ctx context.Context, p *project, id backend.ProviderID, spec backend.Spec, err error) (backend.Instance, error) {
	cctx, cancel := backend.CleanupContext(ctx)
	defer cancel()
	inst, gerr := b.getHA(cctx, p, id)
	if gerr != nil {
		if backend.IsNotFound(gerr) {
			return backend.Instance{}, err
		}
		inst = backend.Instance{ID: id, Name: spec.Name, UID: spec.UID, Owner: spec.Owner, State: backend.StateFailed}
	}
	return inst, err
}
