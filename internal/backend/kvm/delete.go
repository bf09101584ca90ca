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
// the seed volume (last, since it is what makes leftovers attributable). It works from whatever is left:
// a whole proxy, a domain that never started, or volumes without a domain. A domain of that name that this
// provider did not make is refused, never removed.
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
		switch {
		case err == nil:
			pool, network, mac = m.Placement.Pool, m.Placement.Network, m.Placement.MAC
			if m.Placement.IP == "" {
				network = "" // nothing was reserved
			}
			if err := removeDomain(l, dom); err != nil {
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
		return deleteVolume(l, pool, seedVolumeName(id.Name))
	})
	return classify(domainObject(id.Target, id.Name), err)
}

// removeDomain stops the domain at once (the proxy holds no state worth a graceful shutdown) and undefines it.
func removeDomain(l api, dom libvirt.Domain) error {
	err := l.DomainDestroyFlags(dom, libvirt.DomainDestroyDefault)
	if err != nil && !isCode(err, libvirt.ErrOperationInvalid) && !isCode(err, libvirt.ErrNoDomain) {
		return err // ErrOperationInvalid: it was not running
	}
	err = l.DomainUndefineFlags(dom, undefineFlags)
	if isCode(err, libvirt.ErrInvalidArg) || isCode(err, libvirt.ErrNoSupport) {
		err = l.DomainUndefineFlags(dom, 0) // drivers that know none of these extras refuse the flags
	}
	if isCode(err, libvirt.ErrNoDomain) {
		return nil
	}
	return err
}
