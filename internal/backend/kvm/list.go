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
	var found []backend.Instance
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
				found = append(found, m.instance(host, stateFromStats(s.Params)))
			}
		}
		leftovers, err := leftoverSeeds(l, h.Pool, domains, owner, host)
		found = append(found, leftovers...)
		return err
	})
	if err != nil {
		return nil, classify("kvm host "+host, err) // found is fn's, which may still run: see Get
	}
	return found, nil
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
func leftoverSeeds(l api, poolName string, domains map[string]bool, owner, host string) ([]backend.Instance, error) {
	pool, err := l.StoragePoolLookupByName(poolName)
	if err != nil {
		return nil, err
	}
	vols, _, err := l.StoragePoolListAllVolumes(pool, 1, 0)
	if err != nil {
		return nil, err
	}
	var found []backend.Instance
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
			found = append(found, m.instance(host, backend.StateFailed))
		}
	}
	return found, nil
}
