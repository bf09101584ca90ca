package kvm

import (
	"context"
	"sync"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// undefineFlags also drop what a domain may have gathered outside its XML, so undefine cannot be refused
// for it: a managed save image, snapshot and checkpoint metadata, NVRAM.
const undefineFlags = libvirt.DomainUndefineManagedSave | libvirt.DomainUndefineSnapshotsMetadata |
	libvirt.DomainUndefineNvram | libvirt.DomainUndefineCheckpointsMetadata

// Delete removes the domain and everything Create made for it: the DHCP reservation, the root overlay and
// the seed volume. It works from whatever is left: a whole proxy, a domain that never started, or volumes
// without a domain. A domain of that name that this provider did not make is refused, never removed.
//
// Every step is safe to repeat when its answer was lost (a retry finds the thing gone, which is success),
// and the domain is undefined last: its metadata says which pool, network and MAC the rest is in, so a
// retry after a cut at any step still knows where to look, even for a proxy off the host's defaults.
//
// Steps that do not depend on each other run side by side (see steps): a destroy waits until QEMU has
// exited, seconds on a busy host, and the reservation's removal, a network update the daemon makes one at
// a time per network, need not wait for it; the volumes wait for it (a volume in use may not be deletable,
// depending on the pool), but not for each other.
func (b *Backend) Delete(ctx context.Context, id backend.ProviderID) error {
	c, err := b.connFor(id)
	if err != nil {
		return err
	}
	group, found, err := b.deleteDomain(ctx, c, id.Target, id.Name, true)
	if err == nil && !found {
		// No domain of that name (its leftovers removed): a proxy of several instances whose instance 0 alone
		// is gone still has the others.
		group, err = orphanedGroupOf(ctx, c, id, backend.OwnershipOf(ctx))
	}
	if err != nil || group == nil {
		return err
	}
	// A proxy of several instances (ha.go): every instance goes, and the virtual address's reservation.
	return b.deleteGroup(ctx, c, id, group.HA, group.Placement.Network)
}

// deleteDomain is Delete of one domain and what Create made for it. With group set, a domain whose metadata
// records a proxy of several instances is left as it is and its metadata returned, for deleteGroup. found
// says the domain was there.
func (b *Backend) deleteDomain(ctx context.Context, c *conn, host, name string, group bool) (grouped *metadata, found bool, err error) {
	h := b.hosts[host]
	err = c.do(ctx, func(l api) error {
		// Without metadata (the domain is gone) the host's defaults say where leftovers would be.
		pool, network, mac := h.Pool, h.Network, ""
		dom, m, err := lookupManaged(l, name)
		found = err == nil
		switch {
		case found:
			if err := backend.OwnershipOf(ctx).Check("", m.Owner, m.UID); err != nil {
				return err
			}
			if group && m.HA != nil {
				grouped = &m
				return nil
			}
			pool, network, mac = m.Placement.Pool, m.Placement.Network, m.Placement.MAC
			if m.Placement.IP == "" {
				network = "" // nothing was reserved
			}
		case !isCode(err, libvirt.ErrNoDomain):
			return err
		}
		unreserved := func() error {
			if network == "" {
				return nil
			}
			return unreserve(l, network, name, mac)
		}
		root := func() error { return deleteVolume(l, pool, rootVolumeName(name)) }
		// Without a domain the seed was just read (readSeedIdentity below), and a download holds the volume a
		// moment after its last byte: deleteVolumeAfterStream waits that out.
		seed := func() error { return deleteVolumeAfterStream(l, pool, seedVolumeName(name)) }
		if !found {
			// Leftovers are found by name: the seed says whose they are. Another owner's, or another proxy's,
			// are none of this proxy's, and stay (its owner's garbage collection lists them).
			if sm, err := readSeedIdentity(l, volRef(pool, seedVolumeName(name))); err == nil &&
				!backend.OwnershipOf(ctx).Allows(sm.Owner, sm.UID) {
				return nil
			}
			// Without a domain, the seed goes last: it is what makes a leftover attributable.
			if err := steps(unreserved, root); err != nil {
				return err
			}
			return seed()
		}
		if err := steps(func() error { return stopDomain(l, dom) }, unreserved); err != nil {
			return err
		}
		if err := steps(root, seed); err != nil {
			return err
		}
		return undefineDomain(l, dom)
	})
	if err != nil {
		return nil, found, classify(domainObject(host, name), err)
	}
	return grouped, found, nil
}

// steps runs fns side by side over the operation's connection (go-libvirt matches answers to calls, and the
// daemon serves several calls of one client at once) and returns the first of their errors once all have
// ended: a step still running when another failed may have changed the host, and the retry must find it
// done or not begun, never running.
func steps(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// stopDomain stops the domain at once (the proxy holds no state worth a graceful shutdown). A domain that
// does not run, or no longer exists, is stopped.
func stopDomain(l api, dom libvirt.Domain) error {
	err := l.DomainDestroyFlags(dom, libvirt.DomainDestroyDefault)
	if err != nil && !isCode(err, libvirt.ErrOperationInvalid) && !isCode(err, libvirt.ErrNoDomain) {
		return err // ErrOperationInvalid: it was not running
	}
	return nil
}

// undefineDomain removes the stopped domain's definition; one already gone is undefined.
func undefineDomain(l api, dom libvirt.Domain) error {
	err := l.DomainUndefineFlags(dom, undefineFlags)
	if isCode(err, libvirt.ErrInvalidArg) || isCode(err, libvirt.ErrNoSupport) {
		err = l.DomainUndefineFlags(dom, 0) // drivers that know none of these extras refuse the flags
	}
	if isCode(err, libvirt.ErrNoDomain) {
		return nil
	}
	return err
}
