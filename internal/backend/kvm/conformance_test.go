package kvm

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/backendtest"
)

// TestConformance runs the contract's suite against the fake host: host "h" serves the proxies, host "down"
// answers until FailScope makes its domain listing refused.
func TestConformance(t *testing.T) {
	t.Parallel()
	backendtest.Run(t, backendtest.Harness{New: newConformanceWorld, Spec: conformanceSpec, IDForm: IDForm})
}

func conformanceSpec(name string) backend.Spec {
	return backend.Spec{
		Name:      name,
		Placement: backend.Placement{Backend: Kind, Target: "h", Options: &Options{MemoryMiB: 256, DiskGiB: 2}},
		Proxy:     proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"example.com"}},
	}
}

func newConformanceWorld(t *testing.T) backendtest.World {
	f, down := newFakeHost(), &refusingList{api: newFakeHost()}
	host := HostConfig{Pool: "pool", Network: "net", BaseVolume: "base.qcow2", DomainType: DomainTypeQEMU}
	h, d := host, host
	h.URI, d.URI = "test:///fake", "test:///down"
	b, err := newBackend(Config{Hosts: map[string]HostConfig{"h": h, "down": d}}, func(_ context.Context, hc HostConfig, _ target) (*libvirtconn.Session, error) {
		var l api = f
		if hc.URI == d.URI {
			l = down
		}
		return &libvirtconn.Session{API: l, Lost: make(chan struct{}), Close: func() {}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b.pollInterval = time.Millisecond
	t.Cleanup(func() { _ = b.Close() })
	locked := func(change func()) {
		f.mu.Lock()
		defer f.mu.Unlock()
		change()
	}
	// armed checks at the end of the subtest that the fault it armed fired: a rule checked without its
	// fault would pass for nothing.
	armed := func(t *testing.T, what string, left func() int) {
		t.Cleanup(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if n := left(); n != 0 {
				t.Errorf("the fake never %s", what)
			}
		})
	}
	return backendtest.World{
		Backend: b,
		// The domain starts and the connection drops before its answer comes back.
		LoseNextAnswer: func(t *testing.T) {
			locked(func() { f.startsLostAfter = 1 })
			armed(t, "lost a start's answer", func() int { return f.startsLostAfter })
		},
		FailScope: func(*testing.T) { down.refuse.Store(true) },
		// A domain without the provider's metadata, as one defined by hand.
		Foreign: func(_ *testing.T, name string) {
			locked(func() {
				f.domains[name] = &fakeDomain{dom: libvirt.Domain{Name: name}, state: int32(libvirt.DomainRunning)}
			})
		},
		RemoveForeign: func(_ *testing.T, name string) {
			locked(func() { delete(f.domains, name) })
		},
		// libvirtd dies in the middle of the start and leaves the domain paused, starting up, for good.
		NeverReady: func(t *testing.T) {
			locked(func() { f.startsWedged = 1 })
			armed(t, "wedged a start", func() int { return f.startsWedged })
		},
	}
}

// refusingList is a host whose domain listing is refused once refuse is set, as for a user who lost the
// right to read the host.
type refusingList struct {
	api
	refuse atomic.Bool
}

func (r *refusingList) ConnectGetAllDomainStats(doms []libvirt.Domain, stats uint32, flags uint32) ([]libvirt.DomainStatsRecord, error) {
	if r.refuse.Load() {
		return nil, lvErr(libvirt.ErrAccessDenied, "access denied: 'connect_get_all_domains_stats' denied")
	}
	return r.api.ConnectGetAllDomainStats(doms, stats, flags)
}
