package kvm

import (
	"context"

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
func (b *Backend) Delete(ctx context.Context, id backend.ProviderID) error {
	c, err := b.connFor(id)
	if err != nil {
		return err
	}
	h := b.hosts[id.Target]
	err = c.do(ctx, func(l api) error {
		// Without metadata (the domain is gone) the host's defaults say where leftovers would be.
		pool, network, mac := h.Pool, h.Network, ""
		dom, m, err := lookupManaged(l, id.Name)
		found := err == nil
		switch {
		case found:
			pool, network, mac = m.Placement.Pool, m.Placement.Network, m.Placement.MAC
			if m.Placement.IP == "" {
				network = "" // nothing was reserved
			}
			if err := stopDomain(l, dom); err != nil {
				return err
			}
		case !isCode(err, libvirt.ErrNoDomain):
			return err
		}
		if network != "" {
			if err := unreserve(l, network, id.Name, mac); err != nil {
				return err
			}
		}
		if err := deleteVolume(l, pool, rootVolumeName(id.Name)); err != nil {
			return err
		}
		// Without a domain, the seed goes last: it is what makes a leftover attributable.
		if err := deleteVolume(l, pool, seedVolumeName(id.Name)); err != nil || !found {
			return err
		}
		return undefineDomain(l, dom)
	})
	return classify(domainObject(id.Target, id.Name), err)
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
