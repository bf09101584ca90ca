package kvm

import (
	"fmt"
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// A fixed IP is a DHCP host reservation on the libvirt network: the guest gets exactly that address from the
// network's own DHCP server, and the address is known before the guest boots.

func lookupNetwork(l api, name string) (libvirt.Network, error) {
	n, err := l.NetworkLookupByName(name)
	if isCode(err, libvirt.ErrNoNetwork) {
		return n, missingOnHost(fmt.Sprintf("Create libvirt network %q on the host (virsh net-define, then net-start and net-autostart), "+
			"or set kvm.network on the proxy, or network on the provider's kvm block, to a network that exists, then apply again.", name),
			fmt.Errorf("libvirt network %q does not exist on the host: %w", name, err))
	}
	return n, err
}

// reserve adds the host entry, live and persistently. An identical entry from an earlier attempt is fine;
// one that gives the IP or MAC to someone else is libvirt's refusal, kept as the error.
func reserve(l api, n libvirt.Network, name, mac, ip string) error {
	network := n.Name
	entry, err := (&libvirtxml.NetworkDHCPHost{MAC: mac, Name: name, IP: ip}).Marshal()
	if err != nil {
		return err
	}
	err = updateHosts(l, n, libvirt.NetworkUpdateCommandAddLast, entry)
	if err == nil {
		return nil
	}
	if classOf(err) == backend.ClassTransient {
		// The connection broke, or the daemon was busy: the entry may or may not have been added. The retry
		// adds it again, and an entry the lost answer did add is then found below as ours.
		return err
	}
	hosts, herr := dhcpHosts(l, n)
	if herr != nil && classOf(herr) == backend.ClassTransient {
		return herr
	}
	for _, h := range hosts {
		if strings.EqualFold(h.MAC, mac) && h.IP == ip {
			return nil
		}
	}
	return backend.Permanent("", "reserving %s for %s on network %q: %v", ip, mac, network, err)
}

// unreserve removes every host entry named name or carrying mac (the MAC is empty when not known).
func unreserve(l api, network, name, mac string) error {
	return removeHosts(l, network, func(h libvirtxml.NetworkDHCPHost) bool {
		return h.Name == name || (mac != "" && strings.EqualFold(h.MAC, mac))
	})
}

// removeHosts removes the network's host entries that match; a network that does not exist has none.
func removeHosts(l api, network string, match func(libvirtxml.NetworkDHCPHost) bool) error {
	n, err := l.NetworkLookupByName(network)
	if isCode(err, libvirt.ErrNoNetwork) {
		return nil
	}
	if err != nil {
		return err
	}
	hosts, err := dhcpHosts(l, n)
	if err != nil {
		return err
	}
	for _, h := range hosts {
		if !match(h) {
			continue
		}
		entry, err := (&libvirtxml.NetworkDHCPHost{MAC: h.MAC, Name: h.Name, IP: h.IP}).Marshal()
		if err != nil {
			return err
		}
		if err := updateHosts(l, n, libvirt.NetworkUpdateCommandDelete, entry); err != nil {
			return err
		}
	}
	return nil
}

// updateHosts changes the running network and its persistent config; an inactive network has only the latter.
func updateHosts(l api, n libvirt.Network, cmd libvirt.NetworkUpdateCommand, entry string) error {
	err := l.NetworkUpdateCompat(n, cmd, libvirt.NetworkSectionIPDhcpHost, -1, entry,
		libvirt.NetworkUpdateAffectLive|libvirt.NetworkUpdateAffectConfig)
	if isCode(err, libvirt.ErrOperationInvalid) && strings.Contains(err.Error(), "not active") {
		err = l.NetworkUpdateCompat(n, cmd, libvirt.NetworkSectionIPDhcpHost, -1, entry, libvirt.NetworkUpdateAffectConfig)
	}
	return err
}

// dhcpHosts lists the network's DHCP host entries, from its IPv4 ranges.
func dhcpHosts(l api, n libvirt.Network) ([]libvirtxml.NetworkDHCPHost, error) {
	s, err := l.NetworkGetXMLDesc(n, 0)
	if err != nil {
		return nil, err
	}
	var nx libvirtxml.Network
	if err := nx.Unmarshal(s); err != nil {
		return nil, err
	}
	var hosts []libvirtxml.NetworkDHCPHost
	for _, ip := range nx.IPs {
		if ip.DHCP != nil {
			hosts = append(hosts, ip.DHCP.Hosts...)
		}
	}
	return hosts, nil
}
