package kvm

import (
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// addressFromHost fills inst's address from what the host knows, in the order the interface allows: the
// fixed IP (already set from the metadata), the libvirt network's DHCP leases, the guest agent. It is best
// effort: a guest that has not booted far enough simply has no address yet. The guest's address is where
// clients reach it, not necessarily what destinations see: egressAddress decides that (network_mode.go).
func addressFromHost(l api, dom libvirt.Domain, m metadata, inst *backend.Instance) {
	p := m.Placement
	switch {
	case p.IP != "":
		return
	case p.UserNet:
		// The proxy is reached through the host's forwarded port, not the guest's own address.
		inst.InternalAddress = firstOf(p.ForwardAddress, DefaultForwardAddress)
		inst.IngressAddress = inst.InternalAddress
		inst.Port = p.ForwardPort
		return
	case p.Network != "":
		if ip := leaseAddress(l, p.Network, p.MAC); ip != "" {
			inst.InternalAddress, inst.IngressAddress = ip, ip
			return
		}
	}
	if ip := agentAddress(l, dom, p.MAC); ip != "" {
		inst.InternalAddress, inst.IngressAddress = ip, ip
	}
}

// leaseAddress is the IPv4 address the network's DHCP server leased to mac, or "".
func leaseAddress(l api, network, mac string) string {
	net, err := l.NetworkLookupByName(network)
	if err != nil {
		return ""
	}
	leases, _, err := l.NetworkGetDhcpLeases(net, libvirt.OptString{mac}, 1, 0)
	if err != nil {
		return ""
	}
	return pickLease(leases, mac)
}

// pickLease chooses the IPv4 lease of mac that expires last: the current one when old leases linger.
func pickLease(leases []libvirt.NetworkDhcpLease, mac string) string {
	best, bestExpiry := "", int64(-1)
	for _, le := range leases {
		if le.Type != int32(libvirt.IPAddrTypeIpv4) || (len(le.Mac) > 0 && !strings.EqualFold(le.Mac[0], mac)) {
			continue
		}
		if le.Expirytime > bestExpiry {
			best, bestExpiry = le.Ipaddr, le.Expirytime
		}
	}
	return best
}

// agentAddress asks the QEMU guest agent for the interface with mac, or "" when no agent answers.
func agentAddress(l api, dom libvirt.Domain, mac string) string {
	ifaces, err := l.DomainInterfaceAddresses(dom, uint32(libvirt.DomainInterfaceAddressesSrcAgent), 0)
	if err != nil {
		return ""
	}
	return pickInterface(ifaces, mac)
}

func pickInterface(ifaces []libvirt.DomainInterface, mac string) string {
	for _, in := range ifaces {
		if len(in.Hwaddr) == 0 || !strings.EqualFold(in.Hwaddr[0], mac) {
			continue
		}
		for _, a := range in.Addrs {
			if a.Type == int32(libvirt.IPAddrTypeIpv4) && !strings.HasPrefix(a.Addr, "127.") {
				return a.Addr
			}
		}
	}
	return ""
}
