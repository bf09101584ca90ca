package kvm

import "testing"

// The test environment's network is NAT (scripts/libvirt-env.sh), as libvirt's default network is. Read from the
// real daemon's definition of it, a guest there has no egress address: destinations see the host's. Cheap: two
// calls, no guest.
func TestLiveEgressAddressOnNATNetwork(t *testing.T) {
	b := liveBackend(t)
	network := b.hosts[liveHost].Network
	var got string
	inspect(t, b, func(l api) error {
		var err error
		got, err = b.egressAddress(l, liveHost, metaPlacement{Network: network}, "198.18.0.99")
		return err
	})
	if got != "" {
		t.Errorf("egress address of a guest on NAT network %q = %q, want none", network, got)
	}
}
