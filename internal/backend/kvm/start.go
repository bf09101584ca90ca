package kvm

import (
	"context"
	"fmt"

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
//
// A domain found shut off after a start that libvirt confirmed is a QEMU that stopped at once, and a
// Permanent error; unless the connection was lost in between. The connection goes when libvirtd dies, and a
// libvirtd that comes back kills the QEMU of a start it had not finished recording (libvirt 9.0 was seen doing
// so under random connection cuts). Such a domain is started again, at most maxRestarts times.
func (b *Backend) start(ctx context.Context, c *conn, dom libvirt.Domain, fresh bool, inst *backend.Instance) error {
	started, askFirst := false, !fresh
	interrupted, restarts := false, 0
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
				if interrupted && restarts < maxRestarts {
					restarts++
					started, interrupted = false, false
					return nil
				}
				return backend.Permanent("", "domain %s stopped right after starting (state %s, reason %s): see the host's QEMU log", dom.Name, inst.State, shutoffReason(s, reason))
			}
			done = inst.State == backend.StateRunning
			return nil
		})
		if started && isTransportError(err) {
			interrupted = true
		}
		return done, classify("", err)
	})
}

// maxRestarts bounds how often a start is issued again after the domain was found shut off behind a lost
// connection: a daemon that kills every start is a fault to report, not to wait out.
const maxRestarts = 3

// shutoffReason names why libvirt says a domain is off, for the diagnostic.
func shutoffReason(state libvirt.DomainState, reason int32) string {
	if state != libvirt.DomainShutoff {
		return "crashed"
	}
	names := map[libvirt.DomainShutoffReason]string{
		libvirt.DomainShutoffUnknown: "unknown", libvirt.DomainShutoffShutdown: "shut down by the guest",
		libvirt.DomainShutoffDestroyed: "destroyed", libvirt.DomainShutoffCrashed: "crashed",
		libvirt.DomainShutoffFailed: "failed to start", libvirt.DomainShutoffDaemon: "killed by libvirtd",
	}
	if n, ok := names[libvirt.DomainShutoffReason(reason)]; ok {
		return n
	}
	return fmt.Sprintf("%d", reason)
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
