package kvm

import (
	"crypto/sha256"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/guest"
)

// A proxy of several instances (Options.Instances > 1) is that many domains on one host and one libvirt
// network, each a whole proxy VM with its own volumes, behind a virtual address the guests' keepalived moves
// by VRRP (internal/backend/kvm/guest/vrrp.go). Instance 0 is the domain named after the proxy, so the
// proxy's id is the same as with one instance; instance i > 0 is <name>-<i+1>.
//
// Addresses. VRRP's peers are fixed addresses, and the virtual address must be one DHCP never hands out: each
// instance and the virtual address get a DHCP host reservation on the network (the virtual one for a MAC that
// no interface has, derived from the UID like the instances'), picked among the network's addresses that no
// reservation and no lease holds, outside its DHCP ranges first. The reservations are made before any domain,
// and found again by their MACs, so a create retried after a crash takes the same addresses.
//
// Every instance's metadata records the group (metaHA): which instance it is, the members' names, MACs and
// addresses, and the virtual address. The domains are defined one after the other, instance 0 first, and
// deleted in the reverse order, so that what the provider leaves has instance 0 whenever it has another: Get,
// Reconfigure and Delete read the group from it. Should instance 0 be deleted behind the provider's back, Get,
// Update and Delete read it from another instance (ha_ops.go, orphanedGroup). They boot side by side.

// Bounds of Options.Instances.
const (
	DefaultInstances = 1
	MaxInstances     = 9
)

// metaHA records a proxy of several instances in each instance's metadata. Absent (nil) for a proxy of one,
// whose metadata is what it was before instances existed.
type metaHA struct {
	// Proxy is the proxy's name, instance 0's domain; Index is this domain's place among Members.
	Proxy string `xml:"proxy,attr"`
	Index int    `xml:"index,attr"`
	// Virtual is the address clients use, reserved on the network for VirtualMAC; PrefixLen is the network's.
	Virtual    string       `xml:"virtual-address,attr"`
	VirtualMAC string       `xml:"virtual-mac,attr"`
	PrefixLen  int          `xml:"prefix-length,attr"`
	RouterID   int          `xml:"router-id,attr"`
	Members    []metaMember `xml:"member"`
}

// metaMember is one instance: its domain's name, its interface's MAC and its reserved address.
type metaMember struct {
	Name string `xml:"name,attr"`
	MAC  string `xml:"mac,attr"`
	IP   string `xml:"ip,attr"`
}

// vrrp is what the guest of instance ha.Index runs (nil for a proxy of one).
func (ha *metaHA) vrrp(healthPort int) (*guest.VRRP, error) {
	if ha == nil {
		return nil, nil
	}
	v := &guest.VRRP{RouterID: ha.RouterID, PrefixLen: ha.PrefixLen, HealthPort: healthPort}
	var err error
	if v.Virtual, err = netip.ParseAddr(ha.Virtual); err != nil {
		return nil, fmt.Errorf("the virtual address %q recorded in the metadata: %w", ha.Virtual, err)
	}
	for i, m := range ha.Members {
		a, err := netip.ParseAddr(m.IP)
		if err != nil {
			return nil, fmt.Errorf("instance %s's address %q recorded in the metadata: %w", m.Name, m.IP, err)
		}
		if i == ha.Index {
			v.Self = a
		} else {
			v.Peers = append(v.Peers, a)
		}
	}
	return v, v.Validate()
}

// memberName is the domain name of instance i of the proxy named name.
func memberName(name string, i int) string {
	if i == 0 {
		return name
	}
	return name + "-" + strconv.Itoa(i+1)
}

// memberMAC is instance i's MAC: instance 0 has the one a proxy of one has.
func memberMAC(uid string, i int) string {
	if i == 0 {
		return macFromUID(uid)
	}
	return macFromUID(uid + "/" + strconv.Itoa(i))
}

// virtualMAC is the MAC the virtual address's reservation is made for: no interface has it.
func virtualMAC(uid string) string { return macFromUID("virtual/" + uid) }

// virtualReservationName names the virtual address's reservation on the network.
func virtualReservationName(name string) string { return name + "-vip" }

// routerID is the VRRP router id of the proxy with uid, 1 to 255. The instances advertise by unicast to one
// another only, so two proxies with the same id on one network do not meet.
func routerID(uid string) int {
	sum := sha256.Sum256([]byte("vrrp:" + uid))
	return int(sum[0])%255 + 1
}

// checkInstances refuses, before anything is made, what a proxy of several instances cannot be
// (ValidateInstances), and a name whose last instance's domain name would be too long.
func checkInstances(name string, opts Options) error {
	if err := ValidateInstances(opts); err != nil {
		return err
	}
	if n := opts.Instances; n > 1 {
		if err := backend.ValidateName(memberName(name, n-1)); err != nil {
			return fmt.Errorf("instance %d's domain name: %w", n, err)
		}
	}
	return nil
}

// ValidateInstances refuses what a proxy of opts.Instances instances cannot be: more than MaxInstances, and
// with more than one, user-mode networking, a bridge, or a MAC or IP of its own. opts are the options as given,
// before the host's defaults (a MAC is derived when none is given). The provider's plan runs it too.
func ValidateInstances(opts Options) error {
	n := opts.Instances
	switch {
	case n < 0 || n > MaxInstances:
		return fmt.Errorf("instances must be between 1 and %d, not %d", MaxInstances, n)
	case n <= 1:
		return nil
	case opts.UserNet:
		return fmt.Errorf("instances > 1 needs a libvirt network: with user_net each VM is reached through a port of the host, and no address can move between them")
	case opts.Bridge != "":
		return fmt.Errorf("instances > 1 needs a libvirt network: on a bridge the provider cannot reserve the instances' and the virtual address")
	case opts.MAC != "" || opts.IP != "":
		return fmt.Errorf("instances > 1 takes neither mac nor ip: each instance gets its own, and the virtual address clients use is reserved on the network")
	}
	return nil
}

// reservationSlot is one address a proxy of several instances reserves on its network.
type reservationSlot struct{ name, mac string }

// groupSlots are the proxy's reservations: the virtual address first, then each instance's.
func groupSlots(spec backend.Spec, n int) []reservationSlot {
	slots := []reservationSlot{{virtualReservationName(spec.Name), virtualMAC(spec.UID)}}
	for i := range n {
		slots = append(slots, reservationSlot{memberName(spec.Name, i), memberMAC(spec.UID, i)})
	}
	return slots
}

// networkAddresses is what a network's definition and leases say of its IPv4 addresses.
type networkAddresses struct {
	subnet netip.Prefix
	// gateway is the host's own address on the network.
	gateway netip.Addr
	ranges  [][2]netip.Addr
	hosts   []libvirtxml.NetworkDHCPHost
	used    map[netip.Addr]bool
}

// readNetworkAddresses reads the network's first IPv4 subnet, its DHCP ranges and reservations, and its leases.
func readNetworkAddresses(l api, n libvirt.Network) (networkAddresses, error) {
	s, err := l.NetworkGetXMLDesc(n, 0)
	if err != nil {
		return networkAddresses{}, err
	}
	var nx libvirtxml.Network
	if err := nx.Unmarshal(s); err != nil {
		return networkAddresses{}, fmt.Errorf("reading the definition of libvirt network %q: %w", n.Name, err)
	}
	var na networkAddresses
	for _, ip := range nx.IPs {
		gw, err := netip.ParseAddr(ip.Address)
		if err != nil || !gw.Is4() || (ip.Family != "" && ip.Family != "ipv4") {
			continue
		}
		bits := int(ip.Prefix)
		if ip.Netmask != "" {
			m, err := netip.ParseAddr(ip.Netmask)
			if err != nil {
				continue
			}
			mb := m.As4()
			bits = 0
			for _, byt := range mb {
				for ; byt&0x80 != 0; byt <<= 1 {
					bits++
				}
			}
		}
		if bits < 8 || bits > 30 {
			continue
		}
		na.subnet, na.gateway = netip.PrefixFrom(gw, bits).Masked(), gw
		if ip.DHCP != nil {
			for _, r := range ip.DHCP.Ranges {
				start, err1 := netip.ParseAddr(r.Start)
				end, err2 := netip.ParseAddr(r.End)
				if err1 == nil && err2 == nil {
					na.ranges = append(na.ranges, [2]netip.Addr{start, end})
				}
			}
			na.hosts = ip.DHCP.Hosts
		}
		break
	}
	if !na.subnet.IsValid() {
		return networkAddresses{}, backend.Permanent("", "libvirt network %q has no IPv4 subnet of its own (an <ip> element with an address): instances > 1 needs one to reserve addresses in", n.Name)
	}
	leases, _, err := l.NetworkGetDhcpLeases(n, nil, 1, 0)
	if err != nil {
		return networkAddresses{}, err
	}
	na.used = map[netip.Addr]bool{na.gateway: true}
	for _, h := range na.hosts {
		if a, err := netip.ParseAddr(h.IP); err == nil {
			na.used[a] = true
		}
	}
	for _, le := range leases {
		if a, err := netip.ParseAddr(le.Ipaddr); err == nil {
			na.used[a] = true
		}
	}
	return na, nil
}

func (na networkAddresses) inRange(a netip.Addr) bool {
	for _, r := range na.ranges {
		if r[0].Compare(a) <= 0 && a.Compare(r[1]) <= 0 {
			return true
		}
	}
	return false
}

// reservedFor is the address reserved for mac, if any.
func (na networkAddresses) reservedFor(mac string) string {
	for _, h := range na.hosts {
		if strings.EqualFold(h.MAC, mac) && h.IP != "" {
			return h.IP
		}
	}
	return ""
}

// candidates are the subnet's free addresses, those outside the DHCP ranges first (no dynamic lease can
// ever take them), each group from the top of the subnet down; neither the subnet's own address nor its
// broadcast address.
func (na networkAddresses) candidates() []netip.Addr {
	var outside, inside []netip.Addr
	first := na.subnet.Addr().Next()
	last := lastAddr(na.subnet).Prev()
	for a := last; a.IsValid() && first.Compare(a) <= 0; a = a.Prev() {
		if na.used[a] {
			continue
		}
		if na.inRange(a) {
			inside = append(inside, a)
		} else {
			outside = append(outside, a)
		}
		if len(outside) > 4*MaxInstances {
			break // enough to choose from
		}
	}
	return append(outside, inside...)
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// reserveGroup reserves the proxy's addresses on network (see groupSlots) and returns the group. A slot whose
// MAC has a reservation already (an earlier attempt's) keeps it. A free address that another reservation takes
// between the read and the update is refused by libvirt; the slot then tries the next one.
func reserveGroup(l api, network libvirt.Network, spec backend.Spec, n int) (metaHA, error) {
	na, err := readNetworkAddresses(l, network)
	if err != nil {
		return metaHA{}, err
	}
	ha := metaHA{Proxy: spec.Name, PrefixLen: na.subnet.Bits(), RouterID: routerID(spec.UID)}
	free := na.candidates()
	for _, slot := range groupSlots(spec, n) {
		ip := na.reservedFor(slot.mac)
		for ip == "" {
			if len(free) == 0 {
				return metaHA{}, backend.Quota("", "libvirt network %q has no free address left for %s (instances > 1 reserves one per instance and one for the virtual address)", network.Name, slot.name)
			}
			candidate := free[0].String()
			free = free[1:]
			err := reserve(l, network, slot.name, slot.mac, candidate)
			switch {
			case err == nil:
				ip = candidate
			case backend.ClassOf(err) == backend.ClassPermanent:
				continue // taken meanwhile
			default:
				return metaHA{}, err
			}
		}
		if slot.mac == virtualMAC(spec.UID) {
			ha.Virtual, ha.VirtualMAC = ip, slot.mac
			continue
		}
		ha.Members = append(ha.Members, metaMember{Name: slot.name, MAC: slot.mac, IP: ip})
	}
	return ha, nil
}

// memberPlacement is instance i's placement: its MAC, its reserved address, the group recorded with it.
func memberPlacement(p placement, ha metaHA, i int) placement {
	p.MAC, p.IP = ha.Members[i].MAC, ha.Members[i].IP
	mine := ha
	mine.Index = i
	mine.Members = append([]metaMember(nil), ha.Members...)
	p.ha = &mine
	return p
}

// mixedBaseMarker joins, in what Get reports as the base volume of a proxy whose instances run different
// images (an image roll cut short), instance 0's volume to the others'.
const mixedBaseMarker = " (and "

// mixedBaseVolume is the base volume Get reports for a proxy whose instance 0 runs first and other instances
// others: no configuration names it, so the next plan updates the proxy, and the update rolls the image the
// configuration names over every instance.
func mixedBaseVolume(first string, others []string) string {
	return first + mixedBaseMarker + strings.Join(others, ", ") + " on some of its instances)"
}

// IsMixedBaseVolume says whether a base volume Get reported is mixedBaseVolume's: the proxy's instances run
// different images.
func IsMixedBaseVolume(volume string) bool { return strings.Contains(volume, mixedBaseMarker) }
