package kvm

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/guest"
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
	// One creation time for every instance: Get reports it, from whichever instance it reads the proxy from.
	if p.created.IsZero() {
		p.created = b.now()
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
	o, _ := inst.Placement.Options.(*Options)
	if o != nil {
		// The proxy has no address of its own but the virtual one: each instance's is its member's.
		o.IP = ""
	}
	n := len(ha.Members)
	members := make([]backend.Member, n)
	doms := make([]libvirt.Domain, n)
	running := make([]bool, n)
	agents := make([]bool, n)
	var otherBases []string
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
			if i > 0 {
				mine, err := readMetadata(l, dom)
				if err != nil {
					return err
				}
				if base := mine.Placement.BaseVolume; base != m.Placement.BaseVolume && !slices.Contains(otherBases, base) {
					otherBases = append(otherBases, base)
				}
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
	if o != nil && len(otherBases) > 0 {
		o.BaseVolume = mixedBaseVolume(o.BaseVolume, otherBases)
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
// reservation on network (the proxy's) before instance 0, whose metadata records the group, goes last. A
// Delete of instance i > 0 while instance 0 is there is refused: the proxy's id is instance 0's.
func (b *Backend) deleteGroup(ctx context.Context, c *conn, id backend.ProviderID, ha *metaHA, network string) error {
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
			err := c.do(ctx, func(l api) error { return unreserve(l, network, virtualReservationName(ha.Proxy), ha.VirtualMAC) })
			if err != nil {
				return classify(domainObject(id.Target, ha.Proxy), err)
			}
		}
		if _, _, err := b.deleteDomain(ctx, c, id.Target, ha.Members[i].Name, false); err != nil {
			return err
		}
	}
	return nil
}

// rollImage moves every member of a proxy of several instances that runs another image than the placement of
// spec names (spec's MAC and IP cleared, as each member has its own) onto that image, one member at a time:
// the highest-numbered first and instance 0, whose metadata Get reports the proxy from, last, so that the proxy
// reads as on its old image until the roll is done. The others serve meanwhile. For each member (rollMember):
//
//  1. when its Squid serves, it is retired (guest.Retire): new connections held, those in progress drained,
//     keepalived stopped, so the virtual address moves to a peer with no connection reset;
//  2. its domain is stopped and its root disk made again over the new image (the seed, which the guest's
//     files come from on a first boot, stays: Reconfigure keeps it current);
//  3. it boots, and is waited for (when the placement waits for the proxy, as Create does) until its Squid
//     answers and its keepalived runs, so it can take the address when the next member is retired;
//  4. its metadata records the new image last: an Update cut anywhere before finds the member still on the
//     old image and rolls it again.
//
// An image that only moved to another path (image_file) of the same content is recorded without a reboot. A
// member whose metadata already names the image is left alone, so an Update that is run again after a cut
// goes on from where it stopped. It returns notes of what it could not do cleanly.
func (b *Backend) rollImage(ctx context.Context, c *conn, id backend.ProviderID, ha *metaHA, spec backend.Spec) ([]string, error) {
	object := domainObject(id.Target, id.Name)
	p, err := resolvePlacement(spec, b.hosts)
	if err != nil {
		return nil, err
	}
	doms := make([]libvirt.Domain, len(ha.Members))
	metas := make([]metadata, len(ha.Members))
	stale := make([]bool, len(ha.Members))
	rolling := false
	err = c.do(ctx, func(l api) error {
		for i, mm := range ha.Members {
			dom, m, err := lookupManaged(l, mm.Name)
			if err != nil {
				return err
			}
			doms[i], metas[i], stale[i] = dom, m, otherImage(m.Placement, p)
			rolling = rolling || stale[i]
		}
		return nil
	})
	if err != nil || !rolling {
		return nil, classify(object, err)
	}
	// Outside any round of calls: an upload or a download may take minutes.
	switch {
	case p.ImageFile != "":
		p, err = b.placeImageFile(ctx, c, p)
	case p.ImageURL != "":
		p, err = b.placeImageURL(ctx, c, p)
	}
	if err != nil {
		return nil, err
	}
	// What would refuse a member's new disk refuses the roll before any member is stopped.
	var base baseVolume
	err = c.do(ctx, func(l api) error {
		pool, err := activePool(l, p.Pool)
		if err != nil {
			return err
		}
		if base, err = lookupBase(l, pool.pool, p.BaseVolume); err != nil {
			return err
		}
		for i, m := range metas {
			if _, err := rootCapacity(m.Placement.DiskGiB, base, p.BaseVolume); stale[i] && err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, classify(object, err)
	}
	var notes []string
	for i := len(ha.Members) - 1; i >= 0; i-- {
		if !stale[i] {
			continue
		}
		n, err := b.rollMember(ctx, c, id.Target, ha.Members[i], doms[i], metas[i], p, base)
		notes = append(notes, n...)
		if err != nil {
			return notes, err
		}
	}
	return notes, nil
}

// otherImage says whether a member whose metadata records m runs another image than p names: another
// image_file path, an image_url volume of another SHA-256, or another base volume.
func otherImage(m metaPlacement, p placement) bool {
	switch {
	case p.ImageFile != "":
		return m.ImageFile != p.ImageFile
	case p.ImageURL != "":
		return m.ImageFile != "" || !IsURLImageVolume(m.BaseVolume, p.ImageSHA256)
	default:
		return m.ImageFile != "" || m.BaseVolume != p.BaseVolume
	}
}

// rootCapacity is the size of a root disk of diskGiB (the base's own size when 0) over base, named baseName.
func rootCapacity(diskGiB int, base baseVolume, baseName string) (uint64, error) {
	capacity := uint64(diskGiB) * gib
	switch {
	case diskGiB == 0:
		return base.capacity, nil
	case capacity < base.capacity:
		return 0, backend.Permanent("", "disk of %d GiB is smaller than base volume %q (%d bytes)", diskGiB, baseName, base.capacity)
	}
	return capacity, nil
}

// rollMember is one member's part of rollImage: member, whose domain rollImage found as dom and whose metadata
// read m then, onto the image of p, whose volume is base.
func (b *Backend) rollMember(ctx context.Context, c *conn, host string, member metaMember, dom libvirt.Domain, m metadata, p placement, base baseVolume) ([]string, error) {
	object := domainObject(host, member.Name)
	running := false
	err := c.do(ctx, func(l api) error {
		st, reason, err := l.DomainGetState(dom, 0)
		running = stateOf(st, reason) == backend.StateRunning
		return err
	})
	if err != nil {
		return nil, classify(object, err)
	}
	var notes []string
	if m.Placement.BaseVolume != p.BaseVolume {
		if running {
			if serving, _ := b.memberHealth(ctx, c, dom, member.IP, m.Proxy.Port); serving {
				notes = append(notes, b.retire(ctx, c, dom, m.Proxy.Port)...)
			}
		}
		err := c.do(ctx, func(l api) error {
			if err := stopDomain(l, dom); err != nil {
				return err
			}
			pool, err := activePool(l, m.Placement.Pool)
			if err != nil {
				return err
			}
			capacity, err := rootCapacity(m.Placement.DiskGiB, base, p.BaseVolume)
			if err != nil {
				return err
			}
			if err := deleteVolume(l, pool.pool.Name, m.Volumes.Root); err != nil {
				return err
			}
			return createRoot(l, pool.pool, m.Volumes.Root, base, capacity)
		})
		if err != nil {
			return notes, classify(object, err)
		}
		inst := m.instance(host, backend.StatePending)
		if err := b.start(ctx, c, dom, false, &inst); err != nil {
			return notes, classify(object, err)
		}
		if m.Placement.WaitForAddress && m.Placement.WaitForProxy {
			if err := b.waitServing(ctx, c, dom, member.IP, m.Proxy.Port); err != nil {
				return notes, classify(object, err)
			}
		}
	}
	err = c.do(ctx, func(l api) error {
		// Read again: the labels and the syslog target may have changed since rollImage read it.
		now, err := readMetadata(l, dom)
		if err != nil {
			return err
		}
		now.Placement.BaseVolume, now.Placement.ImageFile = p.BaseVolume, p.ImageFile
		return writeMetadata(l, dom, now)
	})
	return notes, classify(object, err)
}

// retire hands the virtual address over from the member dom before it is stopped (guest.Retire). Each step
// that fails is a note and the next runs: the member is stopped next whatever happens, and its peers take the
// address within seconds of its last advertisement anyway.
func (b *Backend) retire(ctx context.Context, c *conn, dom libvirt.Domain, port int) []string {
	var notes []string
	for _, argv := range guest.Retire(port) {
		res, err := guestExec(ctx, c, dom, argv[0], argv[1:]...)
		switch {
		case err != nil:
			notes = append(notes, fmt.Sprintf("%s: %q before its new disk did not run (%v): connections to it may have been reset", dom.Name, strings.Join(argv, " "), err))
		case res.exitCode != 0:
			notes = append(notes, fmt.Sprintf("%s: %q before its new disk exited with status %d: connections to it may have been reset", dom.Name, strings.Join(argv, " "), res.exitCode))
		}
	}
	return notes
}

// waitServing waits until the member dom, booted again, serves: its Squid answers (memberHealth: from here, or
// through the guest agent where its network is not this machine's) and its keepalived runs, which starts once
// Squid answers. Not waitForProxy's wait, which takes a member whose address the network's DHCP server still
// remembers from its last boot for one whose network is up, and an address silent while the guest boots for
// one this machine cannot reach. Until keepalived runs, the member could not take the virtual address from
// the next member retired.
func (b *Backend) waitServing(ctx context.Context, c *conn, dom libvirt.Domain, addr string, port int) error {
	return backend.Poll(ctx, b.pollInterval, func(ctx context.Context) (bool, error) {
		if serving, reason := b.memberHealth(ctx, c, dom, addr, port); !serving {
			return false, backend.Transient("", "the new boot of %s does not serve yet: %s", dom.Name, reason)
		}
		res, err := guestExec(ctx, c, dom, "/bin/systemctl", "is-active", "--quiet", "keepalived.service")
		if err != nil {
			return false, backend.NewError(backend.ClassTransient, "", fmt.Errorf("asking whether keepalived runs in the new boot of %s: %w", dom.Name, err))
		}
		if res.exitCode != 0 {
			return false, backend.Transient("", "keepalived does not run yet in the new boot of %s", dom.Name)
		}
		return true, nil
	})
}

// orphanedGroup reads, when the proxy name's own domain (instance 0) is gone, the group from the metadata of
// another of its instances (<name>-2 on, the first found), its ownership checked as want says: nil when none
// is there. The metadata returned is
// instance 0's as Create wrote it (every instance records the same proxy, rules and group; its name, index,
// address and volumes are instance 0's), so Get, Update and Delete work from it as from instance 0's own.
// Each lookup of an instance that is not there, or is not one of this proxy's, costs a call: only a proxy read
// as gone pays them.
func orphanedGroup(l api, name string, want backend.Ownership) (*metadata, error) {
	for i := 1; i < MaxInstances; i++ {
		_, m, err := lookupManaged(l, memberName(name, i))
		switch {
		case isCode(err, libvirt.ErrNoDomain) || backend.ClassOf(err) == backend.ClassPermanent:
			continue // not there, or not the provider's
		case err != nil:
			return nil, err
		case m.HA == nil || m.HA.Proxy != name || m.HA.Index != i || len(m.HA.Members) <= i:
			continue // a proxy of that name of its own
		}
		if err := want.Check("", m.Owner, m.UID); err != nil {
			return nil, err
		}
		m = m.asInstanceZero()
		return &m, nil
	}
	return nil, nil
}

// asInstanceZero is the metadata of instance 0 of the group whose instance m is: the same proxy, rules and
// group, with instance 0's name, index, address and volumes.
func (m metadata) asInstanceZero() metadata {
	ha := *m.HA
	ha.Index, ha.Members = 0, slices.Clone(m.HA.Members)
	m.HA, m.Name = &ha, ha.Proxy
	m.Placement.MAC, m.Placement.IP = ha.Members[0].MAC, ha.Members[0].IP
	m.Volumes = metaVolumeNames{Root: rootVolumeName(ha.Proxy), Seed: seedVolumeName(ha.Proxy)}
	return m
}

// orphanedGroupOf is orphanedGroup over c, with the proxy's ownership checked as want says.
func orphanedGroupOf(ctx context.Context, c *conn, id backend.ProviderID, want backend.Ownership) (*metadata, error) {
	var m *metadata
	err := c.do(ctx, func(l api) error {
		var err error
		m, err = orphanedGroup(l, id.Name, want)
		return err
	})
	if err != nil {
		return nil, classify(domainObject(id.Target, id.Name), err)
	}
	return m, nil
}
