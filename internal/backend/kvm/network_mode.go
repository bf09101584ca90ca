package kvm

import (
	"context"
	"fmt"
	"sync"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// egress_address is the source address destinations see, and on a libvirt network that is decided by the
// network's <forward> element, not by the guest:
//   - nat (libvirt's usual "default" network; also a <forward/> without a mode): the host masquerades the guest
//     behind whichever of its own addresses its routes pick for each destination, which the provider cannot
//     know, so the address is empty. The exception is a network that pins its NAT to one address
//     (<nat><address start='X' end='X'/></nat>): then destinations see X.
//   - route, open: the host routes the guest's packets unchanged; bridge, passthrough, private, vepa, hostdev:
//     the guest sits on the physical network itself. Destinations see the guest's own address.
//   - no <forward> (isolated): the guest reaches nothing beyond the host, so there is no egress address.
//
// A host bridge (kvm.bridge) puts the guest on the host's LAN: its own address. user_net (passt or slirp)
// sends the guest's connections from the host's own sockets: the host's address, which the provider cannot
// pick either.

// networkEgress is what a libvirt network does to the source address of its guests' outbound connections.
type networkEgress struct {
	// own: destinations see the guest's own address.
	own bool
	// translatedTo is the one address a NAT network translates every guest to, when it pins one.
	translatedTo string
}

// address is the source address destinations see for a guest at guest on the network, or "".
func (e networkEgress) address(guest string) string {
	switch {
	case e.own:
		return guest
	default:
		return e.translatedTo
	}
}

// egressOfForward reads a network's <forward> element; f is nil on an isolated network.
func egressOfForward(f *libvirtxml.NetworkForward) networkEgress {
	if f == nil {
		return networkEgress{}
	}
	switch f.Mode {
	case "", "nat": // libvirt reads a <forward/> without a mode as nat
		if f.NAT != nil && len(f.NAT.Addresses) == 1 && f.NAT.Addresses[0].Start == f.NAT.Addresses[0].End {
			return networkEgress{translatedTo: f.NAT.Addresses[0].Start}
		}
		return networkEgress{}
	case "route", "open", "bridge", "passthrough", "private", "vepa", "hostdev":
		return networkEgress{own: true}
	default:
		// A mode newer than this provider: reporting no address is wrong only by omission, a guessed one is
		// wrong on a partner's allow-list.
		return networkEgress{}
	}
}

// readNetworkEgress reads the network's definition: two calls.
func readNetworkEgress(l api, name string) (networkEgress, error) {
	n, err := l.NetworkLookupByName(name)
	if err != nil {
		return networkEgress{}, err
	}
	s, err := l.NetworkGetXMLDesc(n, 0)
	if err != nil {
		return networkEgress{}, err
	}
	var nx libvirtxml.Network
	if err := nx.Unmarshal(s); err != nil {
		return networkEgress{}, fmt.Errorf("reading the definition of libvirt network %q: %w", name, err)
	}
	return egressOfForward(nx.Forward), nil
}

// networkEgresses remembers each network's egress per host for the life of the provider process. A network's
// forward mode changes only when the network is redefined and restarted with its guests detached
// (virsh net-edit, net-destroy, net-start), which is rare: such a change is seen by the next provider process,
// which for Terraform is the next plan or apply. One Backend serves Terraform's parallel operations: reads of a
// network that arrive while it is being read wait for that read instead of making their own, so a refresh of
// ten proxies on one network reads it once. A failed read is not remembered; the next one tries again.
type networkEgresses struct {
	mu    sync.Mutex
	known map[networkKey]networkEgress
	// reading shares a read in flight among the calls that want the same network meanwhile.
	reading flights[networkEgress]
}

type networkKey struct{ host, network string }

// get returns the network's egress on host, calling read only when no other call has read it or is reading it.
// A waiter waits without a context: the read it waits for is a call on the same host, which either answers or
// ends with its connection (conn.do closes a connection whose call is stuck).
func (c *networkEgresses) get(host, network string, read func() (networkEgress, error)) (networkEgress, error) {
	k := networkKey{host, network}
	c.mu.Lock()
	e, ok := c.known[k]
	c.mu.Unlock()
	if ok {
		return e, nil
	}
	// Remembered before the flight ends, so a call arriving between the two finds it in known.
	return c.reading.do(context.Background(), host+"\x00"+network, func(context.Context) (networkEgress, error) {
		e, err := read()
		if err == nil {
			c.mu.Lock()
			if c.known == nil {
				c.known = map[networkKey]networkEgress{}
			}
			c.known[k] = e
			c.mu.Unlock()
		}
		return e, err
	})
}

// egressAddress is the address destinations see on the connections of a proxy placed at p on host whose own
// address is guest, or "" when there is none or the provider cannot know it. Only a libvirt network costs
// calls, the first time it is met (see networkEgresses).
func (b *Backend) egressAddress(l api, host string, p metaPlacement, guest string) (string, error) {
	switch {
	case guest == "" || p.UserNet:
		return "", nil
	case p.Bridge != "":
		return guest, nil
	case p.Network == "":
		return "", nil
	}
	e, err := b.networks.get(host, p.Network, func() (networkEgress, error) { return readNetworkEgress(l, p.Network) })
	if isCode(err, libvirt.ErrNoNetwork) {
		// The network was undefined under the proxy: where its traffic goes is not known.
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading libvirt network %q, which decides the proxy's egress address: %w", p.Network, err)
	}
	return e.address(guest), nil
}
