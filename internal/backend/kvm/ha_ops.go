package kvm

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// The operations of a proxy of several instances (see ha.go): what Create, Get, Delete, Update, Reconfigure
// and ListByTag do with the group that instance 0's metadata records.

// createGroup reserves the group's addresses, defines the instances one after the other (instance 0 first),
// then starts them and waits for each side by side. Once instance 0 is defined every error comes with the
// instance, so the caller records the proxy's id and a Delete removes every instance.
func (b *Backend) createGroup(ctx context.Context, spec backend.Spec, p placement) (backend.Instance, error) {
	object := domainObject(p.Host, spec.Name)
	id := backend.ProviderID{Backend: Kind, Target: p.Host, Name: spec.Name}
	c := b.conns[p.Host]
	ha, err := b.groupFor(ctx, c, spec, p)
	if err != nil {
		return backend.Instance{}, classify(object, err)
	}
	doms := make([]libvirt.Domain, len(ha.Members))
	metas := make([]metadata, len(ha.Members))
	fresh := make([]bool, len(ha.Members))
	for i, mm := range ha.Members {
		ms := spec
		ms.Name = mm.Name
		doms[i], metas[i], fresh[i], err = b.adoptOrDefine(ctx, c, ms, memberPlacement(p, ha, i))
		if err != nil && i == 0 && (backend.ClassOf(err) == backend.ClassPermanent || backend.ClassOf(err) == backend.ClassQuota) {
			// Refused: nothing of the proxy's but its reservations, given back as a refused create gives back
			// what it made. After any other error the domain may have been made, and keeps them.
			cctx, cancel := backend.CleanupContext(ctx)
			backend.BestEffort(cctx, Kind, "releasing the addresses reserved for "+spec.Name, c.do(cctx, func(l api) error {
				return releaseGroup(l, p.Network, ha)
			}))
			cancel()
			return backend.Instance{}, err
		}
		if err != nil {
			return groupPlaceholder(id, spec, ha), err
		}
	}
	errs := make([]error, len(ha.Members))
	var wg sync.WaitGroup
	for i := range ha.Members {
		wg.Go(func() {
			inst := metas[i].instance(p.Host, backend.StatePending)
			if err := b.startOrUndefine(ctx, c, doms[i], fresh[i], &inst); err != nil {
				errs[i] = classify(domainObject(p.Host, ha.Members[i].Name), err)
				return
			}
			if err := b.waitUntilReady(ctx, c, doms[i], metas[i], &inst); err != nil {
				errs[i] = classify(domainObject(p.Host, ha.Members[i].Name), err)
			}
		})
	}
	wg.Wait()
	if err := firstError(errs); err != nil {
		return groupPlaceholder(id, spec, ha), err
	}
	note, err := b.waitForVirtual(ctx, p, ha, spec.Proxy.Port)
	if err != nil {
		return groupPlaceholder(id, spec, ha), classify(object, err)
	}
	inst, err := b.Get(ctx, id)
	if err != nil {
		return groupPlaceholder(id, spec, ha), err
	}
	if note != "" {
		inst.Notes = append(inst.Notes, note)
	}
	return inst, nil
}

// waitForVirtual waits, when the placement asks Create to wait for the proxy, until the proxy answers at its
// virtual address, where its clients connect: each instance's keepalived starts after its Squid answers, and
// takes the address a few seconds later. An address on no network of this machine is not probed (a note says
// so), as waitForProxy does.
func (b *Backend) waitForVirtual(ctx context.Context, p placement, ha metaHA, port int) (string, error) {
	if !p.WaitForAddress || !p.WaitForProxy {
		return "", nil
	}
	rd := b.readiness
	if ip := net.ParseIP(ha.Virtual); rd.attached != nil && ip != nil && !rd.attached(ip) {
		return fmt.Sprintf("readiness at the virtual address %s not verified: it is on no network this machine is attached to", ha.Virtual), nil
	}
	err := backend.Poll(ctx, b.pollInterval, func(ctx context.Context) (bool, error) {
		res, err := rd.probeProxy(ctx, ha.Virtual, port)
		if res == probeReady {
			return true, nil
		}
		return false, backend.NewError(backend.ClassTransient, "", err)
	})
	if err != nil {
		return "", fmt.Errorf("waiting for the proxy to answer at its virtual address %s: %w", ha.Virtual, err)
	}
	return "", nil
}

// groupFor is the group of the proxy spec: an earlier attempt's, read from instance 0's metadata and its
// reservations made again, or a new one with its addresses reserved on the network.
func (b *Backend) groupFor(ctx context.Context, c *conn, spec backend.Spec, p placement) (metaHA, error) {
	var ha metaHA
	err := c.do(ctx, func(l api) error {
		_, m, err := lookupManaged(l, spec.Name)
		switch {
		case err == nil:
			if err := backend.OwnershipOfSpec(spec).Check("", m.Owner, m.UID); err != nil {
				return err
			}
			if m.HA == nil || m.HA.Index != 0 || len(m.HA.Members) != p.Instances {
				return backend.Permanent("", "domain %s exists with another number of instances than %d: delete it or choose another name", spec.Name, p.Instances)
			}
			ha = *m.HA // an earlier attempt's group, whose addresses its reservations keep
		case !isCode(err, libvirt.ErrNoDomain):
			return err
		}
		network, err := lookupNetwork(l, p.Network)
		if err != nil {
			return err
		}
		if ha.Proxy == "" {
			ha, err = reserveGroup(l, network, spec, p.Instances)
			return err
		}
		// An adopted group's reservations again (each a no-op when it is there): an attempt whose define's
		// answer was lost gave them back although its domain was made.
		if err := reserve(l, network, virtualReservationName(spec.Name), ha.VirtualMAC, ha.Virtual); err != nil {
			return err
		}
		for _, mm := range ha.Members {
			if err := reserve(l, network, mm.Name, mm.MAC, mm.IP); err != nil {
				return err
			}
		}
		return nil
	})
	return ha, err
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// groupPlaceholder is what a failed createGroup returns beside its error: enough for the caller to record
// the proxy's id.
func groupPlaceholder(id backend.ProviderID, spec backend.Spec, ha metaHA) backend.Instance {
	return backend.Instance{ID: id, Name: spec.Name, UID: spec.UID, Owner: spec.Owner, State: backend.StatePending,
		Port: spec.Proxy.Port, InternalAddress: ha.Virtual, IngressAddress: ha.Virtual}
}

// releaseGroup removes the group's reservations from network: the virtual address's and each instance's.
func releaseGroup(l api, network string, ha metaHA) error {
	return removeHosts(l, network, func(h libvirtxml.NetworkDHCPHost) bool {
		if strings.EqualFold(h.MAC, ha.VirtualMAC) {
			return true
		}
		for _, m := range ha.Members {
			if strings.EqualFold(h.MAC, m.MAC) {
				return true
			}
		}
		return false
	})
}

// groupOf reads the group id names when it is instance 0 of a proxy of several instances; nil otherwise.
func (b *Backend) groupOf(ctx context.Context, c *conn, id backend.ProviderID) (*metaHA, error) {
	var ha *metaHA
	err := c.do(ctx, func(l api) error {
		_, m, err := lookupManaged(l, id.Name)
		if err != nil {
			return err
		}
		if err := backend.OwnershipOf(ctx).Reading().Check("", m.Owner, m.UID); err != nil {
			return err
		}
		if m.HA != nil && m.HA.Index == 0 {
			ha = m.HA
		}
		return nil
	})
	return ha, classify(domainObject(id.Target, id.Name), err)
}

// memberID is the id of instance i's domain.
func memberID(id backend.ProviderID, ha *metaHA, i int) backend.ProviderID {
	return backend.ProviderID{Backend: Kind, Target: id.Target, Name: ha.Members[i].Name}
}

// getGroup is Get of instance 0 of a proxy of several instances (read as m, in state): the proxy at its
// virtual address, with one Member per instance, healthy when its domain runs and its Squid answers its
// health endpoint (asked from here when the address is on a network this machine is on, else through the
// guest agent), and the State those make (backend.DegradedState).
func (b *Backend) getGroup(ctx context.Context, c *conn, id backend.ProviderID, m metadata, state backend.State) (backend.Instance, error) {
	ha := m.HA
	inst := m.instance(id.Target, state)
	inst.InternalAddress, inst.IngressAddress = ha.Virtual, ha.Virtual
	if o, ok := inst.Placement.Options.(*Options); ok {
		// The proxy has no address of its own but the virtual one: each instance's is its member's.
		o.IP = ""
	}
	n := len(ha.Members)
	members := make([]backend.Member, n)
	doms := make([]libvirt.Domain, n)
	running := make([]bool, n)
	agents := make([]bool, n)
	err := c.do(ctx, func(l api) error {
		for i, mm := range ha.Members {
			members[i] = backend.Member{Name: mm.Name, Scope: id.Target, InternalAddress: mm.IP}
			dom, err := l.DomainLookupByName(mm.Name)
			if isCode(err, libvirt.ErrNoDomain) {
				members[i].Reason, members[i].Gone = "its domain is gone", true
				continue
			}
			if err != nil {
				return err
			}
			st, reason, err := l.DomainGetState(dom, 0)
			if err != nil {
				return err
			}
			doms[i] = dom
			if s := stateOf(st, reason); s != backend.StateRunning {
				members[i].Reason = fmt.Sprintf("its domain is %s (libvirt state %d)", s, st)
				continue
			}
			running[i] = true
			agents[i] = reconfigurable(l, dom)
			if members[i].EgressAddress, err = b.egressAddress(l, id.Target, m.Placement, mm.IP); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return backend.Instance{}, classify(domainObject(id.Target, id.Name), err)
	}
	var wg sync.WaitGroup
	for i := range members {
		if !running[i] {
			continue
		}
		wg.Go(func() {
			members[i].Healthy, members[i].Reason = b.memberHealth(ctx, c, doms[i], members[i].InternalAddress, m.Proxy.Port)
		})
	}
	wg.Wait()
	inst.Members = members
	// A gone member does not count: Update makes it again, with the rules of the Spec, before a Reconfigure.
	inst.Reconfigurable = true
	for i := range members {
		inst.Reconfigurable = inst.Reconfigurable && (members[i].Gone || running[i] && agents[i])
	}
	if state == backend.StateRunning || state == backend.StateStopped || state == backend.StateFailed {
		inst.State = backend.DegradedState(members)
	}
	return inst, nil
}

// memberHealth asks instance's Squid whether it serves: its health endpoint from here, when its address is
// on a network of this machine, else `systemctl is-active squid` through the guest agent.
func (b *Backend) memberHealth(ctx context.Context, c *conn, dom libvirt.Domain, addr string, port int) (bool, string) {
	rd := b.readiness
	if ip := net.ParseIP(addr); rd.attached == nil || (ip != nil && rd.attached(ip)) {
		actx, cancel := context.WithTimeout(ctx, rd.attemptTimeout)
		defer cancel()
		res, err := rd.probeProxy(actx, addr, port)
		if res == probeReady {
			return true, ""
		}
		return false, fmt.Sprintf("Squid does not answer at %s: %v", addr, err)
	}
	actx, cancel := context.WithTimeout(ctx, 2*rd.attemptTimeout)
	defer cancel()
	res, err := guestExec(actx, c, dom, "/bin/systemctl", "is-active", "--quiet", "squid.service")
	switch {
	case err != nil:
		return false, fmt.Sprintf("the guest agent did not say whether Squid runs: %v", err)
	case res.exitCode != 0:
		return false, "squid.service is not active in the guest"
	}
	return true, ""
}

// deleteGroup deletes the instances of the group from the last to the first, the virtual address's
// reservation before instance 0, whose metadata records the group, goes last. A Delete of instance i > 0 while
// instance 0 is there is refused: the proxy's id is instance 0's.
func (b *Backend) deleteGroup(ctx context.Context, c *conn, id backend.ProviderID, ha *metaHA) error {
	h := b.hosts[id.Target]
	if ha.Index != 0 {
		primary := false
		err := c.do(ctx, func(l api) error {
			_, err := l.DomainLookupByName(ha.Proxy)
			primary = err == nil
			if isCode(err, libvirt.ErrNoDomain) {
				return nil
			}
			return err
		})
		if err != nil {
			return classify(domainObject(id.Target, id.Name), err)
		}
		if primary {
			return backend.Permanent(domainObject(id.Target, id.Name), "it is instance %d of proxy %s: delete kvm/%s/%s, which removes every instance",
				ha.Index+1, ha.Proxy, id.Target, ha.Proxy)
		}
	}
	for i := len(ha.Members) - 1; i >= 0; i-- {
		if i == 0 {
			var network string
			err := c.do(ctx, func(l api) error {
				_, m, err := lookupManaged(l, ha.Members[0].Name)
				if isCode(err, libvirt.ErrNoDomain) {
					network = h.Network
					return nil
				}
				network = m.Placement.Network
				return err
			})
			if err == nil {
				err = c.do(ctx, func(l api) error { return unreserve(l, network, virtualReservationName(ha.Proxy), ha.VirtualMAC) })
			}
			if err != nil {
				return classify(domainObject(id.Target, ha.Proxy), err)
			}
		}
		if _, err := b.deleteDomain(ctx, c, id.Target, ha.Members[i].Name, false); err != nil {
			return err
		}
	}
	return nil
}
