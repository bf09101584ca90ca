package kvm

import (
	"context"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// start boots the domain unless it already runs (an adopted domain may), then waits until libvirt reports it
// running. DomainCreate returns once QEMU has started, so the wait is normally one state read. A fresh
// domain, defined just now, is known to be shut off and is booted without asking first.
//
// A start counts as issued only once libvirt answered it. When the answer is lost (the connection dropped
// during the call), the start may or may not have happened: the retry reads the state first and starts
// the domain again only if it is still shut off.
func (b *Backend) start(ctx context.Context, c *conn, dom libvirt.Domain, fresh bool, inst *backend.Instance) error {
	started, askFirst := false, !fresh
	return backend.Poll(ctx, b.pollInterval, func(ctx context.Context) (bool, error) {
		var done bool
		err := c.do(ctx, func(l api) error {
			if !started {
				if askFirst {
					st, reason, err := l.DomainGetState(dom, 0)
					if err != nil {
						return err
					}
					inst.State = stateOf(st, reason)
					if s := libvirt.DomainState(st); s != libvirt.DomainShutoff && s != libvirt.DomainCrashed {
						started = true
						done = inst.State == backend.StateRunning
						return nil
					}
				}
				askFirst = true
				// "Already running" is what a repeated start whose first answer was lost gets: it ran.
				if err := l.DomainCreate(dom); err != nil && !isCode(err, libvirt.ErrOperationInvalid) {
					return err
				}
				started = true
			}
			st, reason, err := l.DomainGetState(dom, 0)
			if err != nil {
				return err
			}
			inst.State = stateOf(st, reason)
			if s := libvirt.DomainState(st); s == libvirt.DomainShutoff || s == libvirt.DomainCrashed {
				return backend.Permanent("", "domain %s stopped right after starting (state %s): see the host's QEMU log", dom.Name, inst.State)
			}
			done = inst.State == backend.StateRunning
			return nil
		})
		return done, classify("", err)
	})
}

// waitForAddress polls the host until the proxy has an address or ctx ends.
func (b *Backend) waitForAddress(ctx context.Context, c *conn, dom libvirt.Domain, m metadata, inst *backend.Instance) error {
	return backend.Poll(ctx, b.pollInterval, func(ctx context.Context) (bool, error) {
		err := c.do(ctx, func(l api) error {
			addressFromHost(l, dom, m, inst)
			return nil
		})
		return inst.InternalAddress != "", classify("", err)
	})
}
