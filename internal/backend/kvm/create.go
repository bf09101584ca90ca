package kvm

import (
	"context"
	"errors"
	"fmt"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/iso9660"
)

// Create makes the proxy's domain, or adopts the one an earlier attempt made (same name, same UID), then
// starts it and waits until it runs and, when asked, until it has an address. Order matters for crash safety:
// seed volume first (it carries the proxy's identity, so a leftover is attributable), root overlay, DHCP
// reservation, domain definition last. A retry after a crash at any point finds either the domain (adopt) or
// attributable leftovers (clean up, then make afresh).
func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Instance, error) {
	object := domainObject(spec.Placement.Target, spec.Name)
	if err := backend.ValidateName(spec.Name); err != nil {
		return backend.Instance{}, backend.NewError(backend.ClassPermanent, object, err)
	}
	if spec.UID == "" {
		return backend.Instance{}, backend.Permanent(object, "a proxy needs a UID")
	}
	p, err := resolvePlacement(spec, b.hosts)
	if err != nil {
		return backend.Instance{}, err
	}
	if p.Instances > 1 {
		return b.createGroup(ctx, spec, p)
	}
	c := b.conns[p.Host]
	dom, m, fresh, err := b.adoptOrDefine(ctx, c, spec, p)
	if err != nil {
		return backend.Instance{}, err
	}

	// From here on the domain exists: every error comes with the instance, so the caller records its id.
	inst := m.instance(p.Host, backend.StatePending)
	if err := b.startOrUndefine(ctx, c, dom, fresh, &inst); err != nil {
		return inst, classify(object, err)
	}
	if err := b.waitUntilReady(ctx, c, dom, m, &inst); err != nil {
		return inst, classify(object, err)
	}
	b.reportAsGet(ctx, c, dom, p.Host, m, &inst)
	return inst, nil
}

// adoptOrDefine returns the proxy's domain: the one an earlier attempt made, adopted when it is this proxy's,
// or one defined now, once its image is in the pool. fresh says it was defined now, so is known to be shut
// off. Its errors are classified.
func (b *Backend) adoptOrDefine(ctx context.Context, c *conn, spec backend.Spec, p placement) (dom libvirt.Domain, m metadata, fresh bool, err error) {
	object := domainObject(spec.Placement.Target, spec.Name)
	missing := false
	err = c.do(ctx, func(l api) error {
		var err error
		dom, m, err = lookupManaged(l, spec.Name)
		switch {
		case err == nil:
			// Adopted only when both owner and UID are this proxy's: a UID is written on every object and is
			// no secret, so a domain another owner made under it is still not this configuration's.
			if err := backend.OwnershipOfSpec(spec).Check("", m.Owner, m.UID); err != nil {
				return err
			}
			return nil // ours from an earlier attempt: adopt it
		case !isCode(err, libvirt.ErrNoDomain):
			return err
		}
		missing = true
		return nil
	})
	if err != nil || !missing {
		return dom, m, false, classify(object, err)
	}
	// Only a proxy still to be made needs its image: an adopted one keeps what its metadata says.
	// Outside define's single round: the upload or download may take minutes and waits on other uploaders.
	switch {
	case p.ImageFile != "":
		if p, err = b.placeImageFile(ctx, c, p); err != nil {
			return dom, m, false, err
		}
	case p.ImageURL != "":
		if p, err = b.placeImageURL(ctx, c, p); err != nil {
			return dom, m, false, err
		}
	}
	err = c.do(ctx, func(l api) error {
		var err error
		dom, m, err = b.define(l, c, spec, p)
		fresh = err == nil
		return err
	})
	return dom, m, fresh, classify(object, err)
}

// startOrUndefine starts the domain (see start). A domain whose volume went after it was defined is
// undefined again, and the create is tried again from the start.
func (b *Backend) startOrUndefine(ctx context.Context, c *conn, dom libvirt.Domain, fresh bool, inst *backend.Instance) error {
	err := b.start(ctx, c, dom, fresh, inst)
	if !isCode(err, libvirt.ErrNoStorageVol) {
		return err
	}
	// A volume the domain needs went after it was defined (see define): the domain never ran, so nothing is
	// lost by undefining it, and the next attempt makes it afresh with its volumes.
	if uerr := c.do(ctx, func(l api) error { return undefineDomain(l, dom) }); uerr != nil {
		return uerr
	}
	return backend.Transient("", "a volume of the domain was gone when it was started, so the create starts again: %v", err)
}

// waitUntilReady waits, as the placement asks, for the proxy's address and then for the proxy to answer at
// it. A note of what the proxy was probed at goes into inst.
func (b *Backend) waitUntilReady(ctx context.Context, c *conn, dom libvirt.Domain, m metadata, inst *backend.Instance) error {
	if m.Placement.WaitForAddress && inst.InternalAddress == "" {
		if err := b.waitForAddress(ctx, c, dom, m, inst); err != nil {
			return fmt.Errorf("waiting for the proxy's address: %w", err)
		}
	}
	// The proxy is probed at its address: without waiting for one there is nothing to probe.
	if m.Placement.WaitForProxy && m.Placement.WaitForAddress {
		note, err := b.waitForProxy(ctx, c, dom, m, inst)
		if note != "" {
			inst.Notes = append(inst.Notes, note)
		}
		return err
	}
	return nil
}

// reportAsGet sets what Get reports of a running proxy beyond its metadata (agent.go, network_mode.go):
// the state Create returns is what the next plan decides from. Best effort: false and no egress address
// until the next read. Copied only when fn ended: see Get.
func (b *Backend) reportAsGet(ctx context.Context, c *conn, dom libvirt.Domain, host string, m metadata, inst *backend.Instance) {
	var can bool
	var egress string
	guest := inst.InternalAddress
	if err := c.do(ctx, func(l api) error {
		can = reconfigurable(l, dom)
		egress, _ = b.egressAddress(l, host, m.Placement, guest)
		return nil
	}); err == nil {
		inst.Reconfigurable, inst.EgressAddress = can, egress
	}
}

// placeImageFile hashes the placement's image file (once per process: the hash is cached), makes sure its
// volume is in the pool, and makes that volume the proxy's base.
func (b *Backend) placeImageFile(ctx context.Context, c *conn, p placement) (placement, error) {
	object := fmt.Sprintf("image file %s", p.ImageFile)
	img, err := inspectImage(ctx, p.ImageFile)
	if err != nil {
		if isCtxErr(err) {
			return p, classify(object, err)
		}
		return p, backend.NewError(backend.ClassPermanent, object, err)
	}
	p.BaseVolume = img.volumeName()
	base, err := b.ensureImage(ctx, c, p.Pool, img)
	if err != nil {
		return p, classify(fmt.Sprintf("%s (volume %s in pool %s on host %s)", object, p.BaseVolume, p.Pool, p.Host), err)
	}
	p.base = &base
	return p, nil
}

// define checks the host can take the proxy, clears attributable leftovers, makes the volumes and the
// reservation, and defines the domain.
func (b *Backend) define(l api, c *conn, spec backend.Spec, p placement) (libvirt.Domain, metadata, error) {
	var dom libvirt.Domain
	domainType, err := c.domainType(l, p.DomainType)
	if err != nil {
		return dom, metadata{}, err
	}
	p.DomainType = domainType
	if err := checkMemory(l, p.MemoryMiB); err != nil {
		return dom, metadata{}, err
	}
	pool, err := activePool(l, p.Pool)
	if err != nil {
		return dom, metadata{}, err
	}
	var base baseVolume
	if p.base != nil {
		base = *p.base
	} else if base, err = lookupBase(l, pool.pool, p.BaseVolume); err != nil {
		return dom, metadata{}, err
	}
	capacity, err := rootCapacity(p.DiskGiB, base, p.BaseVolume)
	if err != nil {
		return dom, metadata{}, err
	}
	if capacity > pool.available {
		return dom, metadata{}, backend.Quota("", "pool %q has %d bytes available, the proxy's disk may grow to %d", p.Pool, pool.available, capacity)
	}
	// The network is the host's, like the pool: one that is missing is refused here, before anything is made,
	// instead of when the domain first starts, with its volumes made and the proxy left to replace.
	var network libvirt.Network
	if p.Network != "" {
		if network, err = lookupNetwork(l, p.Network); err != nil {
			return dom, metadata{}, err
		}
	}

	created := p.created
	if created.IsZero() {
		created = b.now()
	}
	m := newMetadata(spec, p, created)
	img, err := seedImage(spec, m, b.now())
	if err != nil {
		return dom, metadata{}, backend.NewError(backend.ClassPermanent, "", err)
	}
	clearLeftovers := func() error { return clearLeftoverSeed(l, pool.pool.Name, spec) }
	if err := createSeed(l, pool.pool, seedVolumeName(spec.Name), img, clearLeftovers); err != nil {
		return dom, metadata{}, err
	}
	if err := createRoot(l, pool.pool, rootVolumeName(spec.Name), base, capacity); err != nil {
		return dom, metadata{}, err
	}
	if p.IP != "" {
		if err := reserve(l, network, spec.Name, p.MAC, p.IP); err != nil {
			return dom, metadata{}, err
		}
	}
	meta, err := m.marshal()
	if err != nil {
		return dom, metadata{}, err
	}
	p.slirp = p.UserNet && c.noPasst()
	x, err := domainXML(spec.Name, p, domainType, spec.Proxy.Port, meta)
	if err != nil {
		return dom, metadata{}, err
	}
	dom, err = l.DomainDefineXMLFlags(x, libvirt.DomainDefineValidate)
	if p.UserNet && !p.slirp && isPasstRefused(err) {
		c.setNoPasst()
		p.slirp = true
		if x, err = domainXML(spec.Name, p, domainType, spec.Proxy.Port, meta); err != nil {
			return dom, metadata{}, err
		}
		dom, err = l.DomainDefineXMLFlags(x, libvirt.DomainDefineValidate)
	}
	if isCode(err, libvirt.ErrNoStorageVol) {
		// The volumes were made just above, and the base was found: one of them went in between. A delete
		// sent by an attempt whose connection was cut can reach the daemon after this attempt made the volume
		// again. Not a proxy deleted outside Terraform: the create is tried again from the start.
		return dom, m, backend.Transient("", "a volume of domain %s was gone when it was defined, so the create starts again: %v", spec.Name, err)
	}
	return dom, m, err
}

// noPasst reports whether this host's daemon was found to lack the passt backend (see slirpCommandline).
func (c *conn) noPasst() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.withoutPasst
}

func (c *conn) setNoPasst() {
	c.mu.Lock()
	c.withoutPasst = true
	c.mu.Unlock()
}

// clearLeftoverSeed removes the seed volume an earlier, crashed attempt left without a domain. Only the
// proxy's own (same UID) or its owner's are removed; another owner's are refused.
func clearLeftoverSeed(l api, pool string, spec backend.Spec) error {
	seedName := seedVolumeName(spec.Name)
	m, err := readSeedIdentity(l, volRef(pool, seedName))
	switch {
	case errors.Is(err, iso9660.ErrNotISO):
		// An upload that never reached the ISO's descriptors: this proxy's own interrupted attempt.
		m = metadata{ManagedBy: backend.ManagedByValue, Owner: spec.Owner, UID: spec.UID}
	case err != nil && backend.ClassOf(classify("", err)) == backend.ClassTransient:
		return err
	case err != nil:
		return backend.Permanent("", "volume %s exists in pool %s and is not a seed this provider made (%v): remove it or choose another name", seedName, pool, err)
	}
	if m.ManagedBy != backend.ManagedByValue && m.UID != spec.UID {
		return backend.Permanent("", "volume %s exists in pool %s and was not made by this provider: remove it or choose another name", seedName, pool)
	}
	// The owner's leftover of another proxy of this name is the owner's garbage, which garbage collection
	// would remove too; another owner's is refused.
	if err := (backend.Ownership{Owner: spec.Owner}).Check("volume "+seedName+" in pool "+pool, m.Owner, m.UID); err != nil {
		return err
	}
	return deleteVolumeAfterStream(l, pool, seedName) // readSeedIdentity's download has just held it
}

// checkMemory refuses, before anything is made, a proxy that needs more memory than the host has at all.
// Free memory is not the limit: QEMU allocates guest memory lazily, and the page cache counts as used.
func checkMemory(l api, memoryMiB int) error {
	_, totalKiB, _, _, _, _, _, _, err := l.NodeGetInfo()
	if err != nil {
		return err
	}
	if uint64(memoryMiB)*1024 > totalKiB {
		return backend.Quota("", "memory of %d MiB is more than the host's %d MiB", memoryMiB, totalKiB/1024)
	}
	return nil
}

// domainType resolves "auto" from the host's capabilities once per connection: kvm when the host offers
// it for x86_64 guests, qemu otherwise.
func (c *conn) domainType(l api, want string) (string, error) {
	if want != DomainTypeAuto {
		return want, nil
	}
	c.mu.Lock()
	cached := c.autoType
	c.mu.Unlock()
	if cached != "" {
		return cached, nil
	}
	s, err := l.ConnectGetCapabilities()
	if err != nil {
		return "", err
	}
	var caps libvirtxml.Caps
	if err := caps.Unmarshal(s); err != nil {
		return "", fmt.Errorf("reading the host's capabilities: %w", err)
	}
	t := DomainTypeQEMU
	for _, g := range caps.Guests {
		if g.Arch.Name != "x86_64" || g.OSType != "hvm" {
			continue
		}
		for _, d := range g.Arch.Domains {
			if d.Type == DomainTypeKVM {
				t = DomainTypeKVM
			}
		}
	}
	c.mu.Lock()
	c.autoType = t
	c.mu.Unlock()
	return t, nil
}
