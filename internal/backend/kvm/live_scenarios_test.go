package kvm

import (
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

func TestLiveAdoptAndRefuseForeignUID(t *testing.T) {
	b := liveBackend(t)
	spec := liveSpec(testOwner())
	cleanupProxy(t, b, spec.Name)
	first, err := b.Create(ctxFor(t, 2*time.Minute), spec)
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.Create(ctxFor(t, 2*time.Minute), spec)
	if err != nil || again.ID != first.ID || !again.CreatedAt.Equal(first.CreatedAt) || again.State != backend.StateRunning {
		t.Fatalf("second Create = %+v, %v; want the first proxy adopted", again, err)
	}
	if vols := volumesOf(t, b, spec.Name); len(vols) != 2 {
		t.Errorf("volumes after two creates: %v", vols)
	}
	other := spec
	other.UID = "another-uid"
	_, err = b.Create(ctxFor(t, time.Minute), other)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), spec.UID) {
		t.Fatalf("Create with a foreign UID = %v, want Permanent naming the owner", err)
	}
}

// TestLiveHalfFinishedCreates: the states a crash leaves behind are listed for their owner, and adopted
// or cleaned up.
func TestLiveHalfFinishedCreates(t *testing.T) {
	b := liveBackend(t)
	owner := testOwner()
	c := b.conns[liveHost]
	defineOnly := func(spec backend.Spec) {
		t.Helper()
		p, err := resolvePlacement(spec, b.hosts)
		if err != nil {
			t.Fatal(err)
		}
		inspect(t, b, func(l api) error { _, _, err := b.define(l, c, spec, p); return err })
	}
	listed := func() map[string]backend.Instance {
		t.Helper()
		list, err := b.ListByTag(ctxFor(t, time.Minute), backend.Selector{Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]backend.Instance{}
		for _, in := range list {
			out[in.Name] = in
		}
		return out
	}

	// Defined, never started: listed as Stopped, adopted and started by the retried Create.
	notStarted := liveSpec(owner)
	cleanupProxy(t, b, notStarted.Name)
	defineOnly(notStarted)
	// Volumes without a domain: listed as Failed, removed by Delete with the listed id.
	noDomain := liveSpec(owner)
	cleanupProxy(t, b, noDomain.Name)
	defineOnly(noDomain)
	inspect(t, b, func(l api) error {
		dom, err := l.DomainLookupByName(noDomain.Name)
		if err != nil {
			return err
		}
		return l.DomainUndefineFlags(dom, 0)
	})
	// Volumes without a domain, retried: the Create clears them and makes the proxy afresh.
	retried := liveSpec(owner)
	cleanupProxy(t, b, retried.Name)
	defineOnly(retried)
	inspect(t, b, func(l api) error {
		dom, err := l.DomainLookupByName(retried.Name)
		if err != nil {
			return err
		}
		return l.DomainUndefineFlags(dom, 0)
	})

	got := listed()
	if in := got[notStarted.Name]; in.State != backend.StateStopped || in.UID != notStarted.UID {
		t.Errorf("defined-only proxy listed as %+v, want Stopped with its UID", in)
	}
	if in := got[noDomain.Name]; in.State != backend.StateFailed || in.UID != noDomain.UID || in.ID.String() != "kvm/local/"+noDomain.Name {
		t.Errorf("domainless volumes listed as %+v, want Failed with UID and id", in)
	}
	if other, err := b.ListByTag(ctxFor(t, time.Minute), backend.Selector{Owner: "someone-else"}); err != nil || len(other) != 0 {
		for _, in := range other {
			if in.Owner != "someone-else" {
				t.Errorf("another owner's list shows %+v (%v)", in, err)
			}
		}
	}

	inst, err := b.Create(ctxFor(t, 2*time.Minute), notStarted)
	if err != nil || inst.State != backend.StateRunning {
		t.Fatalf("Create of the defined-only proxy = %+v, %v", inst, err)
	}
	if st, _ := domainState(t, b, notStarted.Name); st != libvirt.DomainRunning {
		t.Errorf("adopted domain state = %v, want running", st)
	}

	if err := b.Delete(ctxFor(t, time.Minute), got[noDomain.Name].ID); err != nil {
		t.Fatal(err)
	}
	if vols := volumesOf(t, b, noDomain.Name); len(vols) != 0 {
		t.Errorf("Delete left %v", vols)
	}

	inst, err = b.Create(ctxFor(t, 2*time.Minute), retried)
	if err != nil || inst.State != backend.StateRunning || len(volumesOf(t, b, retried.Name)) != 2 {
		t.Fatalf("Create over leftovers = %+v, %v", inst, err)
	}

	// Destroyed behind the provider's back: Get says Stopped, Create starts it again.
	inspect(t, b, func(l api) error {
		dom, err := l.DomainLookupByName(retried.Name)
		if err != nil {
			return err
		}
		return l.DomainDestroyFlags(dom, 0)
	})
	if in, err := b.Get(ctxFor(t, time.Minute), inst.ID); err != nil || in.State != backend.StateStopped {
		t.Errorf("Get of a destroyed domain = %+v, %v; want Stopped", in, err)
	}
	if in, err := b.Create(ctxFor(t, 2*time.Minute), retried); err != nil || in.State != backend.StateRunning {
		t.Errorf("Create of a destroyed domain = %+v, %v; want it running again", in, err)
	}

	after := listed()
	if len(after) != 2 || after[notStarted.Name].State != backend.StateRunning || after[retried.Name].State != backend.StateRunning {
		t.Errorf("ListByTag at the end = %+v", after)
	}
}

func TestLiveMemoryBeyondHostIsQuota(t *testing.T) {
	b := liveBackend(t)
	spec := liveSpec(testOwner())
	cleanupProxy(t, b, spec.Name)
	var totalKiB uint64
	inspect(t, b, func(l api) error {
		var err error
		_, totalKiB, _, _, _, _, _, _, err = l.NodeGetInfo()
		return err
	})
	optionsOf(spec.Placement).MemoryMiB = int(totalKiB/1024) + 1024
	_, err := b.Create(ctxFor(t, time.Minute), spec)
	if backend.ClassOf(err) != backend.ClassQuota {
		t.Fatalf("Create with %d MiB = %v, want Quota", optionsOf(spec.Placement).MemoryMiB, err)
	}
	if vols := volumesOf(t, b, spec.Name); len(vols) != 0 {
		t.Errorf("a refused create left volumes %v", vols)
	}
	if _, ok := domainState(t, b, spec.Name); ok {
		t.Error("a refused create left a domain")
	}
}

// A placement naming a libvirt network the host does not have fails when libvirt starts the domain. That is
// a configuration to correct, Permanent and naming the network: never NotFound, which would tell the user
// the proxy was deleted outside Terraform (and drop it from the state).
func TestLiveMissingNetworkIsPermanent(t *testing.T) {
	b := liveBackend(t)
	spec := liveSpec(testOwner())
	optionsOf(spec.Placement).Network = "no-such-network-" + spec.UID[:8]
	cleanupProxy(t, b, spec.Name)
	_, err := b.Create(ctxFor(t, time.Minute), spec)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), optionsOf(spec.Placement).Network) {
		t.Fatalf("Create on a missing network = %v, want Permanent naming the network", err)
	}
}

func TestLiveFixedIPIsADHCPReservation(t *testing.T) {
	b := liveBackend(t)
	spec := liveSpec(testOwner())
	optionsOf(spec.Placement).IP = "198.18.0.77"
	optionsOf(spec.Placement).WaitForAddress = true
	cleanupProxy(t, b, spec.Name)

	hostEntries := func() []libvirtxml.NetworkDHCPHost {
		var hosts []libvirtxml.NetworkDHCPHost
		inspect(t, b, func(l api) error {
			n, err := l.NetworkLookupByName(b.hosts[liveHost].Network)
			if err != nil {
				return err
			}
			hosts, err = dhcpHosts(l, n)
			return err
		})
		return hosts
	}
	inst, err := b.Create(ctxFor(t, 2*time.Minute), spec)
	if err != nil {
		t.Fatal(err)
	}
	if inst.InternalAddress != "198.18.0.77" {
		t.Errorf("address = %q, want the fixed IP before the guest boots", inst.InternalAddress)
	}
	found := false
	for _, h := range hostEntries() {
		if h.IP == "198.18.0.77" {
			found = h.MAC == macFromUID(spec.UID) && h.Name == spec.Name
		}
	}
	if !found {
		t.Errorf("network XML has no host entry for %s with the proxy's MAC: %+v", spec.Name, hostEntries())
	}
	if err := b.Delete(ctxFor(t, time.Minute), inst.ID); err != nil {
		t.Fatal(err)
	}
	for _, h := range hostEntries() {
		if h.IP == "198.18.0.77" || h.Name == spec.Name {
			t.Errorf("reservation left after Delete: %+v", h)
		}
	}
}

func TestLiveErrorsOfUnusableHosts(t *testing.T) {
	h := liveHostConfig(t)
	tests := map[string]struct {
		uri  string
		want backend.Class
	}{
		// Unreachable after the host's dial retry (shortened here), not retried until the create timeout.
		"nothing listening": {"qemu+tcp://127.0.0.1:1/system", backend.ClassPermanent},
		"unknown driver":    {"bogus:///system", backend.ClassPermanent},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			hc := h
			hc.URI = tc.uri
			hc.DialTimeout = time.Second
			hc.Insecure = true // the tcp transport is refused before dialling otherwise, and the dial is what is tested
			b, err := New(Config{Hosts: map[string]HostConfig{liveHost: hc}})
			if err != nil {
				t.Fatal(err)
			}
			closeAtEnd(t, b)
			_, err = b.Create(ctxFor(t, 10*time.Minute), liveSpec("o"))
			if backend.ClassOf(err) != tc.want || backend.Retryable(err) {
				t.Fatalf("Create = %v, want %v, not retried", err, tc.want)
			}
		})
	}
}

func TestLiveReconnectAfterDrop(t *testing.T) {
	b := liveBackend(t)
	spec := liveSpec(testOwner())
	cleanupProxy(t, b, spec.Name)
	inst, err := b.Create(ctxFor(t, 2*time.Minute), spec)
	if err != nil {
		t.Fatal(err)
	}
	b.conns[liveHost].close() // as when libvirtd restarts
	if _, err := b.Get(ctxFor(t, time.Minute), inst.ID); err != nil {
		t.Fatalf("Get after the connection dropped = %v, want a redial", err)
	}
}

func TestLiveCheck(t *testing.T) {
	b := liveBackend(t)
	h := b.Check(ctxFor(t, time.Minute))
	if len(h) != 1 || !h[0].Healthy || h[0].Reason != backend.HealthHealthy || h[0].Details["libvirt_version"] == "" ||
		!strings.HasPrefix(h[0].Details["hypervisor"], "QEMU ") {
		t.Fatalf("Check = %+v", h)
	}
	// Each broken host reports the machine-readable word as its reason, and what is wrong in its message.
	tests := map[string]struct {
		change func(*HostConfig)
		reason string
		says   string
	}{
		"missing network": {func(h *HostConfig) { h.Network = "no-such-network" }, backend.HealthNotFound, "no-such-network"},
		"missing pool":    {func(h *HostConfig) { h.Pool = "no-such-pool" }, backend.HealthNotFound, "no-such-pool"},
		"missing base":    {func(h *HostConfig) { h.BaseVolume = "no-such-base.qcow2" }, backend.HealthNotFound, "no-such-base.qcow2"},
		"no socket": {func(h *HostConfig) {
			h.URI, h.DialTimeout = "qemu:///system?socket=/nonexistent/libvirt-sock", time.Second
		}, backend.HealthUnreachable, "is libvirtd running there"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			hc := liveHostConfig(t)
			tc.change(&hc)
			bad, err := New(Config{Hosts: map[string]HostConfig{liveHost: hc}})
			if err != nil {
				t.Fatal(err)
			}
			closeAtEnd(t, bad)
			h := bad.Check(ctxFor(t, time.Minute))
			if len(h) != 1 || h[0].Healthy || h[0].Reason != tc.reason || !strings.Contains(h[0].Details[backend.DetailMessage], tc.says) {
				t.Errorf("Check = %+v, want reason %s and a message saying %q", h, tc.reason, tc.says)
			}
		})
	}
}
