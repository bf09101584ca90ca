package gcp

// Reading a proxy of several VMs (ha.go): its members, its forwarding rule and their health.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/proto"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// listMembers lists the VMs that serve the proxy id, with one aggregatedList, sorted by name.
func (b *Backend) listMembers(ctx context.Context, p *project, id backend.ProviderID) ([]*computepb.Instance, error) {
	var out []*computepb.Instance
	filter := fmt.Sprintf(`(labels.%s = "%s") AND (labels.%s = "%s")`, backend.LabelManagedBy, backend.ManagedByValue, backend.LabelName, id.Name)
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		out = nil
		it := p.instances.AggregatedList(ctx, &computepb.AggregatedListInstancesRequest{Project: p.id, Filter: proto.String(filter), MaxResults: proto.Uint32(listPageSize)})
		for {
			if err := ctx.Err(); err != nil {
				return classify("gcp instances in project "+p.id, err)
			}
			pair, err := it.Next()
			if errors.Is(err, iterator.Done) {
				return nil
			}
			if err != nil {
				return classify("gcp instances in project "+p.id, err)
			}
			if w := pair.Value.GetWarning(); w != nil && w.GetCode() != "NO_RESULTS_ON_PAGE" {
				// A zone that cannot be listed may hold a member: not knowing it is no answer.
				return backend.Transient("gcp zone "+p.id+"/"+strings.TrimPrefix(pair.Key, "zones/"), "%s: %s", w.GetCode(), w.GetMessage())
			}
			for _, in := range pair.Value.GetInstances() {
				if zone, name, _, ok := memberOf(in); ok && zone == id.Scope && name == id.Name {
					out = append(out, in)
				}
			}
		}
	})
	slices.SortFunc(out, func(a, c *computepb.Instance) int { return strings.Compare(a.GetName(), c.GetName()) })
	return out, err
}

// memberOf reads a member VM's proxy from its metadata.
func memberOf(in *computepb.Instance) (zone, name string, count int, ok bool) {
	v, found := metadataValue(in, metadataMemberOf)
	if !found {
		return "", "", 0, false
	}
	parts := strings.Split(v, "/")
	if len(parts) != 3 {
		return "", "", 0, false
	}
	n, err := strconv.Atoi(parts[2])
	return parts[0], parts[1], n, err == nil && n > 1
}

// getForwardingRule reads the proxy's forwarding rule, nil when there is none.
func (b *Backend) getForwardingRule(ctx context.Context, p *project, region, name string) (*computepb.ForwardingRule, error) {
	var fr *computepb.ForwardingRule
	obj := haObject("forwarding rule", p.id, region, name)
	err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
		var err error
		fr, err = p.forwardingRules.Get(ctx, &computepb.GetForwardingRuleRequest{Project: p.id, Region: region, ForwardingRule: name})
		return classify(obj, err)
	})
	if backend.IsNotFound(err) {
		return nil, nil
	}
	return fr, err
}

// getHA reads a proxy of several VMs: its members, its forwarding rule, and each member's health as the
// backend service reports it. NotFound when neither a member nor the forwarding rule exists.
func (b *Backend) getHA(ctx context.Context, p *project, id backend.ProviderID) (backend.Instance, error) {
	region := regionOf(id.Scope)
	vms, err := b.listMembers(ctx, p, id)
	if err != nil {
		return backend.Instance{}, err
	}
	fr, err := b.getForwardingRule(ctx, p, region, id.Name)
	if err != nil {
		return backend.Instance{}, err
	}
	if len(vms) == 0 && fr == nil {
		return backend.Instance{}, backend.NewError(backend.ClassNotFound, instanceObject(p.id, id.Scope, id.Name), errors.New("not found"))
	}
	reading := backend.OwnershipOf(ctx).Reading()
	if fr != nil {
		if err := haOwned(reading, haObject("forwarding rule", p.id, region, id.Name), fr.GetDescription(), id.Scope, id.Name); err != nil {
			return backend.Instance{}, err
		}
	}
	for _, in := range vms {
		if err := ownedBy(reading, instanceObject(p.id, lastSegment(in.GetZone()), in.GetName()), in.GetLabels()); err != nil {
			return backend.Instance{}, err
		}
	}
	health, err := b.memberHealth(ctx, p, region, id.Name, vms)
	if err != nil {
		return backend.Instance{}, err
	}
	return haInstance(p.id, id, vms, fr, health), nil
}

// memberHealth asks the backend service, once per zone its members run in, how each member fares: a VM's self
// link to HEALTHY or UNHEALTHY. Without the backend service no member is in the load balancer: an empty map.
func (b *Backend) memberHealth(ctx context.Context, p *project, region, name string, vms []*computepb.Instance) (map[string]string, error) {
	out := map[string]string{}
	obj := haObject("backend service", p.id, region, name)
	var zones []string
	for _, in := range vms {
		if z := lastSegment(in.GetZone()); !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	for _, z := range zones {
		var h *computepb.BackendServiceGroupHealth
		err := backend.Retry(ctx, b.retry, func(ctx context.Context) error {
			var err error
			h, err = p.backendServices.GetHealth(ctx, &computepb.GetHealthRegionBackendServiceRequest{Project: p.id, Region: region, BackendService: name,
				ResourceGroupReferenceResource: &computepb.ResourceGroupReference{Group: proto.String(groupLink(p.id, z, name))}})
			return classify(obj, err)
		})
		if backend.IsNotFound(err) {
			return out, nil
		}
		if err != nil && backend.ClassOf(err) != backend.ClassPermanent {
			return nil, err
		}
		// Permanent: the zone's group is no backend of the service (a half-made proxy); its members are not in it.
		for _, st := range h.GetHealthStatus() {
			out[lastSegment(st.GetInstance())+"@"+z] = st.GetHealthState()
		}
	}
	return out, nil
}

// membersImage is the boot image the members were made from: first's, which each records in its stored spec,
// or, while they differ (a change of image cut before every VM was made again, rollImage), both named, which
// no configuration equals: the next plan asks for the Update that finishes the change.
func membersImage(vms []*computepb.Instance, first string) string {
	for _, in := range vms {
		if st, ok := readStoredSpec(in); ok && st.Image != first {
			return fmt.Sprintf("%s (and %s on some of its VMs)", first, st.Image)
		}
	}
	return first
}

// reasonNotABackend is the Reason of a running member its zone's group does not hold (or whose group the
// backend service lacks); updateHA reads it to finish a change cut before the member joined (rejoinGroups).
const reasonNotABackend = "not a backend of the load balancer"

// haInstance maps a proxy of several VMs onto the contract: the first member's settings, the forwarding rule's
// address, and a Member per VM the proxy should have, in name order. A VM missing from the members listMembers
// found (an aggregated list of every zone, which fails rather than skip one) no longer exists: that member is
// Gone, which updateHA makes again, and does not make the proxy non-reconfigurable since Update comes before
// Reconfigure. A VM that exists but is stopped (TERMINATED) or failing its health check is unhealthy, not Gone.
func haInstance(projectID string, id backend.ProviderID, vms []*computepb.Instance, fr *computepb.ForwardingRule, health map[string]string) backend.Instance {
	out := backend.Instance{ID: id, Name: id.Name, State: backend.StateFailed, Port: proxyconf.DefaultPort}
	count := len(vms)
	present := map[string]*computepb.Instance{}
	for _, in := range vms {
		present[in.GetName()] = in
		if _, _, n, ok := memberOf(in); ok {
			count = max(count, n)
		}
	}
	if len(vms) > 0 {
		if first, err := toInstance(projectID, vms[0]); err == nil {
			out = first
			out.ID, out.Name, out.EgressAddress, out.IngressAddress, out.InternalAddress = id, id.Name, "", "", ""
			if o, ok := first.Placement.Options.(*Options); ok {
				opts := *o
				opts.Instances = count
				opts.Image = membersImage(vms, opts.Image)
				out.Placement = backend.Placement{Backend: Kind, Target: projectID, Scope: id.Scope, Options: &opts}
			}
		}
	}
	if fr != nil {
		out.InternalAddress = fr.GetIPAddress()
		l := fr.GetLabels()
		out.UID, out.Owner, out.Labels = l[backend.LabelUID], l[backend.LabelOwner], backend.UserLabels(l)
		// The forwarding rule's: it lasts as long as the proxy, where a VM may be made again (a gone member, a
		// new image) and read first.
		if t, err := time.Parse(time.RFC3339, fr.GetCreationTimestamp()); err == nil {
			out.CreatedAt = t
		}
	}
	reconfigurable := true
	running := false
	for i := 1; i <= count; i++ {
		name := memberName(id.Name, i)
		in, ok := present[name]
		if !ok {
			out.Members = append(out.Members, backend.Member{Name: name, Reason: "the VM is missing", Gone: true})
			continue
		}
		inst, err := toInstance(projectID, in)
		if err != nil {
			continue
		}
		reconfigurable = reconfigurable && inst.Reconfigurable
		running = running || inst.State == backend.StateRunning
		m := backend.Member{Name: name, Scope: inst.ID.Scope, InternalAddress: inst.InternalAddress, EgressAddress: inst.EgressAddress}
		switch st := health[name+"@"+inst.ID.Scope]; {
		case in.GetStatus() != "RUNNING":
			m.Reason = "the VM is " + in.GetStatus()
		case fr == nil:
			m.Reason = "the load balancer's forwarding rule is missing"
		case st == "HEALTHY":
			m.Healthy = true
		case st == "":
			m.Reason = reasonNotABackend
		default:
			m.Reason = fmt.Sprintf("the load balancer's health check (HTTP on port %d) reports %s", proxyconf.DefaultHealthPort, st)
		}
		out.Members = append(out.Members, m)
	}
	out.Reconfigurable = reconfigurable
	switch {
	case running:
		out.State = backend.DegradedState(out.Members)
	case len(vms) == 0:
		out.State = backend.StateFailed
		out.Notes = append(out.Notes, fmt.Sprintf("the load balancer of proxy %s is left without its VMs: delete it (the egress_proxy_gc action does)", id.Name))
	}
	return out
}
