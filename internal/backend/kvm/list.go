package kvm

import (
	"context"
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// ListByTag reports, on every configured host at once, the proxies of sel.Owner: their domains, and the
// seed volumes left in the host's pool by proxies whose domain is gone (state Failed; Delete with the
// reported id removes them). A host that cannot be read is a failed scope; the others are still reported.
func (b *Backend) ListByTag(ctx context.Context, sel backend.Selector) ([]backend.Instance, error) {
	return backend.ListEach(ctx, b.Hosts(), func(ctx context.Context, host string) backend.Listed {
		// A listing cut short by a dropped connection is read again: it changes nothing, and a host
		// reported as failed for a blip would hide its proxies from the orphan list.
		var found []backend.Instance
		err := backend.Retry(ctx, backend.DefaultBackoff, func(ctx context.Context) (err error) {
			found, err = b.listHost(ctx, host, sel.Owner)
			return err
		})
		if err != nil {
			return backend.Listed{Failed: []backend.ScopeError{{Backend: Kind, Scope: host, Err: err}}}
		}
		return backend.Listed{Found: found}
	})
}

// listHost costs one call for every domain's state, one metadata read per domain (libvirt has no call that
// returns metadata for many domains), two calls for the pool's volume list, and one download per seed volume
// without a domain.
func (b *Backend) listHost(ctx context.Context, host, owner string) ([]backend.Instance, error) {
	c := b.conns[host]
	h := b.hosts[host]
	var found []listed
	err := c.do(ctx, func(l api) error {
		stats, err := l.ConnectGetAllDomainStats(nil, uint32(libvirt.DomainStatsState), 0)
		if err != nil {
			return err
		}
		domains := make(map[string]bool, len(stats))
		for _, s := range stats {
			domains[s.Dom.Name] = true
			m, err := readMetadata(l, s.Dom)
			if err != nil {
				if cls := backend.ClassOf(classify("", err)); cls == backend.ClassNotFound || cls == backend.ClassPermanent {
					continue // undefined meanwhile, or not ours
				}
				return err
			}
			if m.managedBy(owner) {
				found = append(found, listed{m: m, state: stateFromStats(s.Params), domain: true})
			}
		}
		leftovers, err := leftoverSeeds(l, h.Pool, domains, owner)
		found = append(found, leftovers...)
		return err
	})
	if err != nil {
		return nil, classify("kvm host "+host, err) // found is fn's, which may still run: see Get
	}
	return groupListed(host, found), nil
}

// listed is a domain, or a seed volume without its domain, that ListByTag found, with its state.
type listed struct {
	m      metadata
	state  backend.State
	domain bool
}

// groupListed reports what listHost found: each proxy of one as before; a proxy of several instances as one
// instance with its members (each healthy when its domain runs: a list asks no guest), under its own id, from
// instance 0's metadata or, when instance 0's domain is gone, from its lowest-numbered instance whose domain is
// there (Get reads such a proxy so, and Update makes instance 0 again); an instance of a group none of whose
// domains is left (only seed volumes) by its own id, for Delete to remove.
func groupListed(host string, found []listed) []backend.Instance {
	primaries := map[string]listed{}
	for _, f := range found {
		if f.m.HA == nil || !f.domain || f.m.HA.Index >= len(f.m.HA.Members) || f.m.HA.Members[f.m.HA.Index].Name != f.m.Name {
			continue
		}
		if p, ok := primaries[f.m.HA.Proxy]; !ok || f.m.HA.Index < p.m.HA.Index {
			primaries[f.m.HA.Proxy] = f
		}
	}
	groups := map[string][]listed{}
	for _, f := range found {
		if f.m.HA == nil {
			continue
		}
		if _, ok := primaries[f.m.HA.Proxy]; ok {
			groups[f.m.HA.Proxy] = append(groups[f.m.HA.Proxy], f)
		}
	}
	var out []backend.Instance
	for _, f := range found {
		switch p, grouped := primaries[haProxy(f.m)]; {
		case f.m.HA == nil || !grouped:
			out = append(out, f.m.instance(host, f.state))
		case f.domain && f.m.Name == p.m.Name:
			p.m = p.m.asInstanceZero()
			out = append(out, groupInstance(host, p, groups[f.m.HA.Proxy]))
		}
	}
	return out
}

// haProxy is the proxy whose instance m is, "" for a proxy of one.
func haProxy(m metadata) string {
	if m.HA == nil {
		return ""
	}
	return m.HA.Proxy
}

// groupInstance is ListByTag's report of a proxy of several instances from its instances found.
func groupInstance(host string, primary listed, found []listed) backend.Instance {
	inst := primary.m.instance(host, primary.state)
	ha := primary.m.HA
	inst.InternalAddress, inst.IngressAddress = ha.Virtual, ha.Virtual
	if o, ok := inst.Placement.Options.(*Options); ok {
		o.IP = ""
	}
	for _, mm := range ha.Members {
		member := backend.Member{Name: mm.Name, Scope: host, InternalAddress: mm.IP, Reason: "its domain is gone"}
		for _, f := range found {
			if f.m.Name != mm.Name {
				continue
			}
			switch {
			case !f.domain:
				member.Reason = "only its seed volume is left"
			case f.state == backend.StateRunning:
				member.Healthy, member.Reason = true, ""
			default:
				member.Reason = "its domain is " + string(f.state)
			}
			if f.domain {
				break
			}
		}
		inst.Members = append(inst.Members, member)
	}
	inst.State = backend.DegradedState(inst.Members)
	return inst
}

// stateFromStats reads state.state and state.reason from a domain's stats record.
func stateFromStats(params []libvirt.TypedParam) backend.State {
	var state, reason int32 = -1, 0
	for _, p := range params {
		v, ok := p.Value.I.(int32)
		if !ok {
			continue
		}
		switch p.Field {
		case libvirt.DomainStatsStateState:
			state = v
		case libvirt.DomainStatsStateReason:
			reason = v
		}
	}
	if state < 0 {
		return backend.StateUnknown
	}
	return stateOf(state, reason)
}

// leftoverSeeds finds seed volumes in pool whose proxy has no domain, and reads whose they are.
func leftoverSeeds(l api, poolName string, domains map[string]bool, owner string) ([]listed, error) {
	pool, err := l.StoragePoolLookupByName(poolName)
	if err != nil {
		return nil, err
	}
	vols, _, err := l.StoragePoolListAllVolumes(pool, 1, 0)
	if err != nil {
		return nil, err
	}
	var found []listed
	for _, v := range vols {
		name, ok := strings.CutSuffix(v.Name, seedVolumeName(""))
		if !ok || domains[name] {
			continue
		}
		m, err := readSeedIdentity(l, v)
		if err != nil {
			if backend.ClassOf(classify("", err)) == backend.ClassTransient {
				return found, err
			}
			continue // not a seed this provider made
		}
		if m.managedBy(owner) && m.Name == name {
			found = append(found, listed{m: m, state: backend.StateFailed})
		}
	}
	return found, nil
}
