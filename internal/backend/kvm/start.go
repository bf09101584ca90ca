package kvm

import (
	"context"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// start boots the domain unless it already runs (an adopted domain may), then waits until libvirt reports it
// running. DomainCreate returns once QEMU has started, so the wait is normally one state read. A fresh
// domain, defined just now, is known to be shut off and is booted without asking first.
func (b *Backend) start(ctx context.Context, c *conn, dom libvirt.Domain, fresh bool, inst *backend.Instance) error {
	booted := false
	return backend.Poll(ctx, b.pollInterval, func(ctx context.Context) (bool, error) {
		var done bool
		err := c.do(ctx, func(l api) error {
			if !booted && !fresh {
				st, reason, err := l.DomainGetState(dom, 0)
				if err != nil {
					return err
				}
				inst.State = stateOf(st, reason)
				if s := libvirt.DomainState(st); s != libvirt.DomainShutoff && s != libvirt.DomainCrashed {
					done = inst.State == backend.StateRunning
					return nil
				}
			}
			if !booted {
				booted = true
				if err := l.DomainCreate(dom); err != nil {
					return err
				}
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
