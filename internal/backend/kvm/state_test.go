package kvm

import (
	"testing"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

func TestStateOf(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		state  libvirt.DomainState
		reason int32
		want   backend.State
	}{
		"running":          {libvirt.DomainRunning, int32(libvirt.DomainRunningBooted), backend.StateRunning},
		"blocked":          {libvirt.DomainBlocked, 0, backend.StateRunning},
		"paused by user":   {libvirt.DomainPaused, int32(libvirt.DomainPausedUser), backend.StateStopped},
		"paused starting":  {libvirt.DomainPaused, int32(libvirt.DomainPausedStartingUp), backend.StatePending},
		"paused I/O error": {libvirt.DomainPaused, int32(libvirt.DomainPausedIoerror), backend.StateFailed},
		"shutting down":    {libvirt.DomainShutdown, 0, backend.StateStopped},
		"shut off":         {libvirt.DomainShutoff, int32(libvirt.DomainShutoffShutdown), backend.StateStopped},
		"destroyed":        {libvirt.DomainShutoff, int32(libvirt.DomainShutoffDestroyed), backend.StateStopped},
		"shutoff crashed":  {libvirt.DomainShutoff, int32(libvirt.DomainShutoffCrashed), backend.StateFailed},
		"failed to start":  {libvirt.DomainShutoff, int32(libvirt.DomainShutoffFailed), backend.StateFailed},
		"crashed":          {libvirt.DomainCrashed, 0, backend.StateFailed},
		"pmsuspended":      {libvirt.DomainPmsuspended, 0, backend.StateStopped},
		"nostate":          {libvirt.DomainNostate, 0, backend.StateUnknown},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := stateOf(int32(tc.state), tc.reason); got != tc.want {
				t.Errorf("stateOf(%d, %d) = %s, want %s", tc.state, tc.reason, got, tc.want)
			}
		})
	}
}

func TestStateFromStats(t *testing.T) {
	t.Parallel()
	params := []libvirt.TypedParam{
		{Field: "state.state", Value: *libvirt.NewTypedParamValueInt(int32(libvirt.DomainShutoff))},
		{Field: "state.reason", Value: *libvirt.NewTypedParamValueInt(int32(libvirt.DomainShutoffCrashed))},
	}
	if got := stateFromStats(params); got != backend.StateFailed {
		t.Errorf("stateFromStats = %s, want Failed", got)
	}
	if got := stateFromStats(nil); got != backend.StateUnknown {
		t.Errorf("stateFromStats(nil) = %s, want Unknown", got)
	}
}
