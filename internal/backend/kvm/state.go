package kvm

import (
	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// stateOf maps a libvirt domain state and its reason (virDomainGetState) onto the contract's states.
func stateOf(state, reason int32) backend.State {
	switch libvirt.DomainState(state) {
	case libvirt.DomainRunning, libvirt.DomainBlocked:
		// blocked is a running guest waiting on a resource (idle on I/O): still serving.
		return backend.StateRunning
	case libvirt.DomainPaused:
		if libvirt.DomainPausedReason(reason) == libvirt.DomainPausedStartingUp {
			return backend.StatePending
		}
		if r := libvirt.DomainPausedReason(reason); r == libvirt.DomainPausedIoerror || r == libvirt.DomainPausedCrashed {
			return backend.StateFailed
		}
		return backend.StateStopped
	case libvirt.DomainShutdown, libvirt.DomainPmsuspended:
		return backend.StateStopped
	case libvirt.DomainShutoff:
		if r := libvirt.DomainShutoffReason(reason); r == libvirt.DomainShutoffCrashed || r == libvirt.DomainShutoffFailed {
			return backend.StateFailed
		}
		return backend.StateStopped
	case libvirt.DomainCrashed:
		return backend.StateFailed
	}
	return backend.StateUnknown
}
