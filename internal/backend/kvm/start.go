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
// Permanent error; unless the connection was lost in between, or libvirt says the daemon killed it. The
// connection goes when libvirtd dies, and a libvirtd that comes back kills the QEMU of a start it had not
// finished recording (libvirt 9.0 was seen doing so under random connection cuts). Such a domain is started
// again, at most maxRestarts times.
func (b *Backend) start(ctx context.Context, c *conn, dom libvirt.Domain, fresh bool, inst *backend.Instance) error {
	progress := startProgress{askFirst: !fresh}
	return backend.Poll(ctx, b.pollInterval, func(ctx context.Context) (bool, error) {
		// The attempt works on a copy that counts only once its calls have returned: c.do gives up on
		// calls that outlive ctx or their connection, and those may still be running.
		attempt := progress
		returned := make(chan struct{})
		err := c.do(ctx, func(l api) error {
			defer close(returned)
			return attempt.step(l, dom)
		})
		select {
		case <-returned:
			progress = attempt
			if progress.read {
				inst.State = stateOf(int32(progress.state), progress.reason)
			}
		default:
		}
		if progress.started && isTransportError(err) {
			progress.interrupted = true
		}
		if err != nil {
			return false, classify("", err)
		}
		if !progress.done && progress.started {
			// Kept as the last error: a start that never completes is reported with the state it hung in.
			e := &backend.Error{Class: backend.ClassTransient, Err: fmt.Errorf("domain %s is %s, not running yet", dom.Name, describeState(progress.state, progress.reason))}
			if progress.state == libvirt.DomainPaused && libvirt.DomainPausedReason(progress.reason) == libvirt.DomainPausedStartingUp {
				e.Advice = fmt.Sprintf(wedgedStartAdvice, dom.Name)
			}
			return false, e
		}
		return progress.done, nil
	})
}

// startProgress is what start's attempts have established so far.
type startProgress struct {
	askFirst    bool // the domain may already run: read its state before starting it
	started     bool // libvirt answered a start, or the domain was found running
	interrupted bool // the connection was lost after started was set
	restarts    int
	done        bool // the domain runs
	read        bool // state and reason were read
	state       libvirt.DomainState
	reason      int32
}

// step makes one attempt: start the domain unless started, then read its state.
func (p *startProgress) step(l api, dom libvirt.Domain) error {
	p.done = false
	readState := func() error {
		st, reason, err := l.DomainGetState(dom, 0)
		if err != nil {
			return err
		}
		p.read, p.state, p.reason = true, libvirt.DomainState(st), reason
		return nil
	}
	off := func() bool { return p.state == libvirt.DomainShutoff || p.state == libvirt.DomainCrashed }
	if !p.started {
		if p.askFirst {
			if err := readState(); err != nil {
				return err
			}
			if !off() {
				p.started = true
				p.done = stateOf(int32(p.state), p.reason) == backend.StateRunning
				return nil
			}
		}
		p.askFirst = true
		// "Already running" is what a repeated start whose first answer was lost gets: it ran.
		if err := l.DomainCreate(dom); err != nil && !isCode(err, libvirt.ErrOperationInvalid) {
			return err
		}
		p.started = true
	}
	if err := readState(); err != nil {
		return err
	}
	if off() {
		// libvirt's own reason says the daemon killed it, which only a restarting daemon does: the lost
		// connection that goes with it may have fallen between two attempts, where no call saw it.
		killedByDaemon := p.state == libvirt.DomainShutoff && libvirt.DomainShutoffReason(p.reason) == libvirt.DomainShutoffDaemon
		if (p.interrupted || killedByDaemon) && p.restarts < maxRestarts {
			p.restarts++
			p.started, p.interrupted = false, false
			return nil
		}
		return backend.Permanent("", "domain %s stopped right after starting (state %s, reason %s): see the host's QEMU log",
			dom.Name, stateOf(int32(p.state), p.reason), shutoffReason(p.state, p.reason))
	}
	p.done = stateOf(int32(p.state), p.reason) == backend.StateRunning
	return nil
}

// wedgedStartAdvice is for a domain that stays paused (starting up). libvirtd 9.0, when it dies in the middle
// of a start before QEMU ran, saves the domain's status with pid 0 and its start job; every later daemon
// holds that job for ever, and refuses even destroy with "cannot acquire state change lock".
const wedgedStartAdvice = "libvirt has not finished starting domain %[1]s. If libvirtd restarted during the start " +
	"(its log says so) and destroying the domain fails with \"cannot acquire state change lock\", libvirt lost " +
	"the start: stop libvirtd, remove the domain's status file (/run/libvirt/qemu/%[1]s.xml, which says pid='0'), " +
	"start libvirtd and apply again. Otherwise raise the create timeout."

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
		found := *inst // fn may still run when c.do gave up on it: see Get
		err := c.do(ctx, func(l api) error {
			addressFromHost(l, dom, m, &found)
			return nil
		})
		if err != nil {
			return false, classify("", err)
		}
		*inst = found
		return inst.InternalAddress != "", nil
	})
}

// describeState names a domain state and libvirt's reason for it, for diagnostics.
func describeState(state libvirt.DomainState, reason int32) string {
	switch state {
	case libvirt.DomainShutoff, libvirt.DomainCrashed:
		return "shut off (" + shutoffReason(state, reason) + ")"
	case libvirt.DomainPaused:
		names := map[libvirt.DomainPausedReason]string{
			libvirt.DomainPausedUnknown: "unknown", libvirt.DomainPausedUser: "by a user",
			libvirt.DomainPausedMigration: "migrating", libvirt.DomainPausedSave: "saving",
			libvirt.DomainPausedDump: "dumping", libvirt.DomainPausedIoerror: "I/O error",
			libvirt.DomainPausedWatchdog: "watchdog", libvirt.DomainPausedFromSnapshot: "from a snapshot",
			libvirt.DomainPausedShuttingDown: "shutting down", libvirt.DomainPausedSnapshot: "snapshot",
			libvirt.DomainPausedCrashed: "crashed", libvirt.DomainPausedStartingUp: "starting up",
			libvirt.DomainPausedPostcopy: "post-copy", libvirt.DomainPausedPostcopyFailed: "post-copy failed",
		}
		if n, ok := names[libvirt.DomainPausedReason(reason)]; ok {
			return "paused (" + n + ")"
		}
		return fmt.Sprintf("paused (reason %d)", reason)
	case libvirt.DomainShutdown:
		return "shutting down"
	case libvirt.DomainPmsuspended:
		return "suspended by the guest"
	case libvirt.DomainNostate:
		return "in no state"
	}
	return fmt.Sprintf("in state %d", state)
}
