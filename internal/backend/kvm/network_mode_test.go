package kvm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// egress_address is what a destination sees (network_mode.go): the guest's own address where its packets
// leave unchanged (a host bridge, a routed or open network, a network on the physical one), the one address a
// NAT network pins, and nothing where the host masquerades the guest behind addresses of its choosing (NAT,
// user_net) or where the guest reaches nothing outside (an isolated network). The address clients connect to
// is the guest's in every case but user_net.
func TestFakeEgressAddress(t *testing.T) {
	t.Parallel()
	const guest, fixed, pinned = "198.18.0.117", "198.18.0.60", "203.0.113.7"
	nat := func(start, end string) *libvirtxml.NetworkForward {
		return &libvirtxml.NetworkForward{Mode: "nat", NAT: &libvirtxml.NetworkForwardNAT{
			Addresses: []libvirtxml.NetworkForwardNATAddress{{Start: start, End: end}},
		}}
	}
	tests := map[string]struct {
		forward    *libvirtxml.NetworkForward // of the fake host's network "net"
		placement  func(*Options)
		wantEgress string
		// wantInternal is the guest's lease unless set.
		wantInternal string
	}{
		"nat network, as libvirt's default": {forward: &libvirtxml.NetworkForward{Mode: "nat"}},
		"forward without a mode is nat":     {forward: &libvirtxml.NetworkForward{}},
		"nat over an address range":         {forward: nat("203.0.113.7", "203.0.113.9")},
		"nat pinned to one address":         {forward: nat(pinned, pinned), wantEgress: pinned},
		"routed network":                    {forward: &libvirtxml.NetworkForward{Mode: "route"}, wantEgress: guest},
		"open network":                      {forward: &libvirtxml.NetworkForward{Mode: "open"}, wantEgress: guest},
		"network on a host bridge":          {forward: &libvirtxml.NetworkForward{Mode: "bridge"}, wantEgress: guest},
		"macvtap passthrough network":       {forward: &libvirtxml.NetworkForward{Mode: "passthrough"}, wantEgress: guest},
		"isolated network":                  {},
		"fixed ip on a routed network": {forward: &libvirtxml.NetworkForward{Mode: "route"},
			placement: func(p *Options) { p.IP = fixed }, wantEgress: fixed, wantInternal: fixed},
		"fixed ip on a nat network": {forward: &libvirtxml.NetworkForward{Mode: "nat"},
			placement: func(p *Options) { p.IP = fixed }, wantInternal: fixed},
		// No libvirt network, so no lease: the guest agent reports the address.
		"host bridge": {placement: func(p *Options) { p.Bridge = "br0" }, wantEgress: guest},
		"user_net": {placement: func(p *Options) { p.UserNet, p.ForwardPort = true, 18080 },
			wantInternal: DefaultForwardAddress},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFakeHost()
			f.networks["net"].forward = tc.forward
			b, _ := fakeBackend(f)
			spec := fakeSpec("uid-1", "o")
			optionsOf(spec.Placement).WaitForAddress = true // so that Create reports the address too
			if tc.placement != nil {
				tc.placement(optionsOf(spec.Placement))
			}
			mac := macFromUID("uid-1")
			f.networks["net"].leases = []libvirt.NetworkDhcpLease{{Type: int32(libvirt.IPAddrTypeIpv4), Mac: libvirt.OptString{mac}, Ipaddr: guest, Expirytime: 1}}
			f.guestIfaces = map[string][]libvirt.DomainInterface{spec.Name: {{Name: "eth0", Hwaddr: libvirt.OptString{mac},
				Addrs: []libvirt.DomainIPAddr{{Type: int32(libvirt.IPAddrTypeIpv4), Addr: guest, Prefix: 24}}}}}
			ctx := context.Background()
			created, err := b.Create(ctx, spec)
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if created.EgressAddress != tc.wantEgress {
				t.Errorf("Create reported egress %q, want %q as Get does", created.EgressAddress, tc.wantEgress)
			}
			inst, err := b.Get(ctx, created.ID)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			wantInternal := tc.wantInternal
			if wantInternal == "" {
				wantInternal = guest
			}
			if inst.EgressAddress != tc.wantEgress || inst.InternalAddress != wantInternal || inst.IngressAddress != wantInternal {
				t.Errorf("egress %q internal %q ingress %q, want egress %q and %q for the other two",
					inst.EgressAddress, inst.InternalAddress, inst.IngressAddress, tc.wantEgress, wantInternal)
			}
		})
	}
}

// The network's forward mode is read once per provider process and host, not on every Get: ten proxies on one
// network, read all at once as Terraform refreshes them, cost one read of its definition. A read that fails is
// not remembered, and fails the Get rather than report no address for one that is known.
func TestFakeEgressReadsNetworkOnce(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	f.networks["net"].forward = &libvirtxml.NetworkForward{Mode: "route"}
	b, cnt := fakeBackend(f)
	ctx := context.Background()
	const n = 10
	ids := make([]backend.ProviderID, n)
	for i := range n {
		uid := fmt.Sprintf("uid-%d", i)
		f.networks["net"].leases = append(f.networks["net"].leases, libvirt.NetworkDhcpLease{
			Type: int32(libvirt.IPAddrTypeIpv4), Mac: libvirt.OptString{macFromUID(uid)}, Ipaddr: fmt.Sprintf("198.18.0.%d", 100+i), Expirytime: 1,
		})
		inst, err := b.Create(ctx, fakeSpec(uid, "o"))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = inst.ID
	}

	f.failOn["NetworkGetXMLDesc"] = lvErr(libvirt.ErrInternalError, "internal error: network is being redefined")
	_, err := b.Get(ctx, ids[0])
	if err == nil || !strings.Contains(err.Error(), `libvirt network "net"`) {
		t.Fatalf("Get while the network cannot be read = %v, want the network's error", err)
	}
	delete(f.failOn, "NetworkGetXMLDesc")
	cnt.take()

	got := make([]backend.Instance, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i], errs[i] = b.Get(ctx, ids[i]) })
	}
	wg.Wait()
	for i := range n {
		if want := fmt.Sprintf("198.18.0.%d", 100+i); errs[i] != nil || got[i].EgressAddress != want {
			t.Errorf("Get %s = egress %q, %v; want %s", ids[i].Name, got[i].EgressAddress, errs[i], want)
		}
	}
	if _, per := cnt.take(); per["NetworkGetXMLDesc"] != 1 {
		t.Errorf("ten Gets read the network's definition %d times, want once (after the failed read): %v", per["NetworkGetXMLDesc"], per)
	}
}

// Reads of a network that arrive while it is being read wait for that read, whether it succeeds or fails; a
// failed read is not remembered. synctest.Wait returns once every goroutine of the test is blocked, so the
// waiters are known to have arrived during the read, not after it.
func TestNetworkEgressesSharesOneRead(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		err       error
		wantReads int // in all, after one more get once the first read has ended
	}{
		"the read succeeds": {wantReads: 1},
		"the read fails":    {err: errors.New("connection reset"), wantReads: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var c networkEgresses
				var mu sync.Mutex
				reads := 0
				release := make(chan struct{})
				read := func() (networkEgress, error) {
					mu.Lock()
					reads++
					mu.Unlock()
					<-release
					return networkEgress{own: true}, tc.err
				}
				var wg sync.WaitGroup
				errs := make([]error, 10)
				for i := range errs {
					wg.Go(func() { _, errs[i] = c.get("h", "net", read) })
					synctest.Wait() // the first is in its read, each later one waits for it
				}
				close(release)
				wg.Wait()
				for i, err := range errs {
					if !errors.Is(err, tc.err) {
						t.Errorf("get %d = %v, want the read's error %v", i, err, tc.err)
					}
				}
				if _, err := c.get("h", "net", read); !errors.Is(err, tc.err) {
					t.Errorf("get after the read = %v, want %v", err, tc.err)
				}
				if reads != tc.wantReads {
					t.Errorf("%d reads, want %d", reads, tc.wantReads)
				}
			})
		})
	}
}
