package kvm

import (
	"context"
	"fmt"
	"net/http"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Backend is the kvm implementation of backend.Backend and backend.Checker.
type Backend struct {
	hosts map[string]HostConfig
	conns map[string]*conn
	// now stamps CreatedAt; pollInterval spaces state and address polls. Tests shorten both.
	now          func() time.Time
	pollInterval time.Duration
	// imageStall is how long an image volume another process uploads may stop growing (see imagevol.go).
	imageStall time.Duration
	// httpClient downloads images by URL; downloadIdle is how long such a download may receive nothing
	// (see image_download.go).
	httpClient   *http.Client
	downloadIdle time.Duration
	// readiness checks the proxy answers (see ready.go); tests point it elsewhere.
	readiness readiness
	// networks remembers what each libvirt network does to its guests' source address (see network_mode.go).
	networks networkEgresses
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Checker = (*Backend)(nil)
)

// New validates cfg and returns a backend. It dials nothing: each host is connected on its first use.
func New(cfg Config) (*Backend, error) {
	return newBackend(cfg, dialLibvirt)
}

func newBackend(cfg Config, dial dialFunc) (*Backend, error) {
	hosts, err := cfg.hosts()
	if err != nil {
		return nil, backend.NewError(backend.ClassPermanent, "kvm backend configuration", err)
	}
	b := &Backend{
		hosts: hosts, conns: map[string]*conn{}, now: time.Now, pollInterval: time.Second,
		imageStall: defaultImageStall, readiness: defaultReadiness(),
		httpClient: newImageHTTPClient(), downloadIdle: defaultDownloadIdle,
	}
	for name, h := range hosts {
		b.conns[name] = newConn(name, h, dial)
	}
	return b, nil
}

// Close ends every open connection. The backend dials again if used afterwards. The provider's tests close
// the backends they build; the provider itself leaves its connections to end with the plugin process.
func (b *Backend) Close() error {
	for _, c := range b.conns {
		c.close()
	}
	return nil
}

// Hosts lists the configured host names.
func (b *Backend) Hosts() []string { return sortedNames(b.hosts) }

// connFor returns the connection of id's host, or a Permanent error for an id this backend cannot serve.
func (b *Backend) connFor(id backend.ProviderID) (*conn, error) {
	if id.Backend != Kind {
		return nil, backend.Permanent(id.String(), "not a kvm id (%s)", IDForm)
	}
	c, ok := b.conns[id.Target]
	if !ok {
		return nil, backend.Permanent(id.String(), "kvm host %q is not configured on this provider (configured: %v)", id.Target, b.Hosts())
	}
	return c, nil
}

func domainObject(host, name string) string {
	return fmt.Sprintf("kvm domain %s on host %s", name, host)
}

// Get reads the proxy back from its domain: state from libvirt, everything else from the domain's metadata.
func (b *Backend) Get(ctx context.Context, id backend.ProviderID) (backend.Instance, error) {
	c, err := b.connFor(id)
	if err != nil {
		return backend.Instance{}, err
	}
	var inst backend.Instance
	var group *metadata
	err = c.do(ctx, func(l api) error {
		dom, m, err := lookupManaged(l, id.Name)
		if isCode(err, libvirt.ErrNoDomain) {
			// A proxy of several instances whose instance 0 alone is gone is read from the others, Degraded
			// with instance 0 Gone: an Update makes it again.
			orphaned, oerr := orphanedGroup(l, id.Name, backend.OwnershipOf(ctx).Reading())
			if oerr != nil {
				return oerr
			}
			if orphaned == nil {
				return err
			}
			inst, group = orphaned.instance(id.Target, backend.StateRunning), orphaned
			return nil
		}
		if err != nil {
			return err
		}
		if err := backend.OwnershipOf(ctx).Reading().Check("", m.Owner, m.UID); err != nil {
			return err
		}
		st, reason, err := l.DomainGetState(dom, 0)
		if err != nil {
			return err
		}
		inst = m.instance(id.Target, stateOf(st, reason))
		if m.HA != nil && m.HA.Index == 0 {
			group = &m // the proxy of several instances: read below, with its members
			return nil
		}
		if inst.State == backend.StateRunning {
			addressFromHost(l, dom, m, &inst)
			inst.Reconfigurable = reconfigurable(l, dom)
		}
		// Not best effort like the address: a network that cannot be read would turn a known egress address
		// into null, a change the next plan would show and an update's apply would report as inconsistent.
		inst.EgressAddress, err = b.egressAddress(l, id.Target, m.Placement, inst.InternalAddress)
		return err
	})
	if err != nil {
		// inst is fn's, which may still run when c.do gave up on it (see conn.do): only a nil error says it ended.
		return backend.Instance{}, classify(domainObject(id.Target, id.Name), err)
	}
	if group != nil {
		return b.getGroup(ctx, c, id, *group, inst.State)
	}
	return inst, nil
}

// lookupManaged finds the domain and reads its metadata. A domain of that name without the provider's
// metadata is someone else's: Permanent, never NotFound, so Terraform does not try to create over it.
func lookupManaged(l api, name string) (libvirt.Domain, metadata, error) {
	dom, err := l.DomainLookupByName(name)
	if err != nil {
		return dom, metadata{}, err
	}
	m, err := readMetadata(l, dom)
	return dom, m, err
}

func readMetadata(l api, dom libvirt.Domain) (metadata, error) {
	s, err := l.DomainGetMetadata(dom, int32(libvirt.DomainMetadataElement), libvirt.OptString{Namespace}, libvirt.DomainAffectCurrent)
	if isCode(err, libvirt.ErrNoDomainMetadata) {
		return metadata{}, backend.Permanent("", "domain %s exists but was not made by this provider (no %s metadata)", dom.Name, Namespace)
	}
	if err != nil {
		return metadata{}, err
	}
	m, err := parseMetadata(s)
	if err != nil {
		return metadata{}, backend.NewError(backend.ClassPermanent, "", err)
	}
	return m, nil
}

// writeMetadata replaces the domain's metadata element, on the running domain too when it runs.
func writeMetadata(l api, dom libvirt.Domain, m metadata) error {
	s, err := m.marshal()
	if err != nil {
		return err
	}
	flags := libvirt.DomainAffectConfig
	if st, _, err := l.DomainGetState(dom, 0); err == nil && libvirt.DomainState(st) != libvirt.DomainShutoff {
		flags |= libvirt.DomainAffectLive
	}
	return l.DomainSetMetadata(dom, int32(libvirt.DomainMetadataElement), libvirt.OptString{s},
		libvirt.OptString{metadataPrefix}, libvirt.OptString{Namespace}, flags)
}

// Update changes what changes in place besides the rules: the labels, which live in the domain's metadata,
// and the access log's syslog target, which the guest's rsyslog takes through the guest agent
// (applySyslogTarget) before the seed and the metadata record it, as Reconfigure records rules.
//
// A proxy of several instances is updated one instance after the other, instance 0 first; an instance whose
// domain is gone (Member.Gone) is then made again as Create makes it, and a new image is rolled over the
// instances one at a time (rollImage).
func (b *Backend) Update(ctx context.Context, id backend.ProviderID, spec backend.Spec) (backend.Instance, error) {
	first, err := b.updateDomain(ctx, id, spec)
	gone := false
	if backend.IsNotFound(err) {
		// Instance 0 of a proxy of several instances gone, the others there: made again below.
		want := backend.OwnershipOf(ctx)
		if spec.UID != "" {
			want.UID = spec.UID
		}
		c, cerr := b.connFor(id)
		if cerr != nil {
			return backend.Instance{}, cerr
		}
		orphaned, oerr := orphanedGroupOf(ctx, c, id, want)
		if oerr != nil {
			return backend.Instance{}, oerr
		}
		if orphaned != nil {
			first, gone, err = orphaned, true, nil
		}
	}
	if err != nil {
		return backend.Instance{}, err
	}
	ha := first.HA
	if ha == nil || ha.Index != 0 {
		return b.Get(ctx, id)
	}
	for i := 1; i < len(ha.Members); i++ {
		_, err := b.updateDomain(ctx, memberID(id, ha, i), spec)
		switch {
		case backend.IsNotFound(err):
			gone = true
		case err != nil:
			return backend.Instance{}, err
		}
	}
	// The Spec comes from the state, where the proxy's mac and ip are instance 0's (Get reports them): each
	// member takes its own from the group, as at its first Create.
	opts, err := backend.OptionsOf[Options](spec.Placement)
	if err != nil {
		return backend.Instance{}, err
	}
	if opts != nil {
		o := *opts
		o.MAC, o.IP = "", ""
		if o.ImageFile != "" || o.ImageURL != "" {
			o.BaseVolume = "" // the volume the image became, which the state holds beside it
		}
		spec.Placement.Options = &o
	}
	if gone {
		// A member deleted behind Terraform's back: made again as a retried Create makes what is missing
		// (with the Spec's labels, rules and image), the others adopted as they are.
		p, err := resolvePlacement(spec, b.hosts)
		if err != nil {
			return backend.Instance{}, err
		}
		p.created = first.createdAt() // the proxy's, which the instance made again records too
		if _, err := b.createGroup(ctx, spec, p); err != nil {
			return backend.Instance{}, err
		}
	}
	c, err := b.connFor(id)
	if err != nil {
		return backend.Instance{}, err
	}
	notes, err := b.rollImage(ctx, c, id, ha, spec)
	if err != nil {
		return backend.Instance{}, err
	}
	inst, err := b.Get(ctx, id)
	inst.Notes = append(inst.Notes, notes...)
	return inst, err
}

// updateDomain is Update of one domain. It returns the domain's metadata.
func (b *Backend) updateDomain(ctx context.Context, id backend.ProviderID, spec backend.Spec) (*metadata, error) {
	c, err := b.connFor(id)
	if err != nil {
		return nil, err
	}
	object := domainObject(id.Target, id.Name)
	opts, err := backend.OptionsOf[Options](spec.Placement)
	if err != nil {
		return nil, err
	}
	target := ""
	if opts != nil {
		target = opts.SyslogTarget
	}
	if err := ValidateSyslogTarget(target); err != nil {
		return nil, backend.NewError(backend.ClassPermanent, object, err)
	}
	var dom libvirt.Domain
	var m metadata
	lookup := func(l api) error {
		var err error
		if dom, m, err = lookupManaged(l, id.Name); err != nil {
			return err
		}
		want := backend.OwnershipOf(ctx)
		if spec.UID != "" {
			want.UID = spec.UID
		}
		return want.Check("", m.Owner, m.UID)
	}
	// The labels alone: one lookup and one write, as before the syslog target existed.
	targetChanged := false
	err = c.do(ctx, func(l api) error {
		if err := lookup(l); err != nil {
			return err
		}
		if targetChanged = target != m.Placement.SyslogTarget; targetChanged {
			return nil
		}
		m.Labels = labelsToMeta(spec.Labels)
		return writeMetadata(l, dom, m)
	})
	if err != nil {
		return nil, classify(object, err)
	}
	if targetChanged {
		err := backend.Retry(ctx, agentBackoff, func(ctx context.Context) error {
			return classify(object, applySyslogTarget(ctx, c, dom, target))
		})
		if err != nil {
			return nil, err
		}
		err = c.do(ctx, func(l api) error {
			if err := lookup(l); err != nil {
				return err
			}
			m.Labels = labelsToMeta(spec.Labels)
			m.Placement.SyslogTarget = target
			if err := b.recordSyslogTarget(l, m, spec); err != nil {
				return err
			}
			return writeMetadata(l, dom, m)
		})
		if err != nil {
			return nil, classify(object, err)
		}
	}
	return &m, nil
}
