package kvm

import (
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// placement is the Options of a proxy with every default filled in from the host's configuration.
type placement struct {
	Options
	Host string
	// base, when known already (an image volume just checked or uploaded), saves define looking it up.
	base *baseVolume
	// slirp makes user-mode networking QEMU's own (slirp with hostfwd) instead of libvirt's passt
	// backend, for daemons built without passt (see userNetXML).
	slirp bool
	// ha, for one instance of a proxy of several, is the group recorded in its metadata (ha.go).
	ha *metaHA
	// created, when set, is the creation time the metadata records instead of the time of the define: the
	// proxy's, which every instance of a proxy of several records, and an instance made again keeps.
	created time.Time
}

// Defaults of a proxy VM's size: Squid for a few clients fits comfortably. The provider's schema shows
// and applies these same values.
const (
	DefaultVCPUs     = 1
	DefaultMemoryMiB = 512
	// DefaultDiskGiB is the root disk's size the provider asks for when the configuration gives none. A
	// placement with DiskGiB 0 gets the base volume's own size instead.
	DefaultDiskGiB = 4
	// DefaultForwardAddress is where user-mode networking forwards the proxy port when the placement names no
	// address: the host's loopback, so that only the host's own clients reach the proxy, not every network the
	// host is on.
	DefaultForwardAddress = "127.0.0.1"
)

// forwardAddress is the host address user-mode networking forwards the proxy port from.
func (p placement) forwardAddress() string { return firstOf(p.ForwardAddress, DefaultForwardAddress) }

// QuotaAdvice is what a user can do about a Quota error of this backend: a libvirt host has no quota
// system, only the memory and disk it has.
const QuotaAdvice = "The libvirt host lacks the memory or the storage pool space this proxy asks for. " +
	"Free some (stop or remove other domains, delete unused volumes, grow the pool), " +
	"or ask for fewer vCPUs, less memory or a smaller disk, then apply again."

// resolvePlacement fills spec's placement from the host configuration. It fails Permanent on what no retry
// can fix: an unknown host, a missing base volume name, malformed MAC or IP, two interface kinds at once.
func resolvePlacement(spec backend.Spec, hosts map[string]HostConfig) (placement, error) {
	pl := spec.Placement
	object := fmt.Sprintf("kvm proxy %s", spec.Name)
	if pl.Backend != "" && pl.Backend != Kind {
		return placement{}, backend.Permanent(object, "placement is for the %s backend, not kvm", pl.Backend)
	}
	h, ok := hosts[pl.Target]
	if !ok {
		return placement{}, backend.Permanent(object, "kvm host %q is not configured (configured: %v)", pl.Target, sortedNames(hosts))
	}
	opts, err := backend.OptionsOf[Options](pl)
	if err != nil {
		return placement{}, err
	}
	var p placement
	if opts != nil {
		p.Options = *opts
	}
	if err := checkInstances(spec.Name, p.Options); err != nil {
		return placement{}, backend.NewError(backend.ClassPermanent, object, err)
	}
	p.Host = pl.Target
	if p.VCPUs <= 0 {
		p.VCPUs = DefaultVCPUs
	}
	if p.MemoryMiB <= 0 {
		p.MemoryMiB = DefaultMemoryMiB
	}
	p.DomainType = firstOf(p.DomainType, h.DomainType)
	if err := validDomainType(p.DomainType); err != nil {
		return placement{}, backend.NewError(backend.ClassPermanent, object, err)
	}
	p.Pool = firstOf(p.Pool, h.Pool)
	if err := p.chooseBase(h); err != nil {
		return placement{}, backend.NewError(backend.ClassPermanent, object, err)
	}
	if err := p.chooseInterface(h, spec.UID); err != nil {
		return placement{}, backend.NewError(backend.ClassPermanent, object, err)
	}
	if p.Instances > 1 && p.Network == "" {
		return placement{}, backend.Permanent(object, "instances > 1 needs a libvirt network, and kvm host %q's default is bridge %q: set network on the proxy", p.Host, p.Bridge)
	}
	if p.UserNet && p.ForwardPort == 0 {
		p.ForwardPort = spec.Proxy.Port
	}
	if p.UserNet && spec.Proxy.Metrics != nil {
		// QEMU forwards the proxy's port alone: nothing could scrape the metrics ports.
		return placement{}, backend.Permanent(object, "metrics need a network or a bridge: user-mode networking forwards the proxy's port alone, so nothing could reach the metrics ports")
	}
	if err := ValidateSyslogTarget(p.SyslogTarget); err != nil {
		return placement{}, backend.NewError(backend.ClassPermanent, object, err)
	}
	return p, nil
}

// chooseBase checks what the proxy's root disk is made from, at most one of base_volume, image_file and
// image_url, and takes the host's base volume when it names none.
func (p *placement) chooseBase(h HostConfig) error {
	images := 0
	for _, set := range []bool{p.BaseVolume != "", p.ImageFile != "", p.ImageURL != ""} {
		if set {
			images++
		}
	}
	switch {
	case images > 1:
		return fmt.Errorf("set only one of base_volume, image_file and image_url")
	case p.ImageURL != "":
		// The base volume is the image's, named after image_sha256: Create finds or downloads it.
		if _, err := parseImageSource(p.ImageURL, p.ImageSHA256); err != nil {
			return err
		}
	case p.ImageSHA256 != "":
		return fmt.Errorf("image_sha256 is the checksum of image_url's image: set image_url too")
	case p.ImageFile != "":
		// The base volume is the image's, named after its content: Create hashes the file to know it.
	default:
		p.BaseVolume = firstOf(p.BaseVolume, h.BaseVolume)
		if p.BaseVolume == "" {
			return fmt.Errorf("no base volume: set base_volume, image_file or image_url on the proxy, or base_volume on kvm host %q", p.Host)
		}
	}
	return nil
}

// chooseInterface checks the proxy's network interface, at most one of network, bridge and user-mode
// networking, and takes the host's bridge, else its network, when it names none; then its MAC (derived from
// uid unless set) and its fixed IP.
func (p *placement) chooseInterface(h HostConfig, uid string) error {
	kinds := 0
	for _, set := range []bool{p.Network != "", p.Bridge != "", p.UserNet} {
		if set {
			kinds++
		}
	}
	if kinds > 1 {
		return fmt.Errorf("set only one of network, bridge and user-mode networking")
	}
	if kinds == 0 {
		if h.Bridge != "" {
			p.Bridge = h.Bridge
		} else {
			p.Network = h.Network
		}
	}
	if p.MAC == "" {
		p.MAC = macFromUID(uid)
	} else if hw, err := net.ParseMAC(p.MAC); err != nil || len(hw) != 6 {
		return fmt.Errorf("mac %q is not a 6-byte MAC address such as 52:54:00:12:34:56", p.MAC)
	} else {
		p.MAC = hw.String()
	}
	if p.IP != "" {
		a, err := netip.ParseAddr(p.IP)
		if err != nil || !a.Is4() {
			return fmt.Errorf("ip %q is not an IPv4 address", p.IP)
		}
		if p.Network == "" {
			return fmt.Errorf("a fixed ip needs a libvirt network (it becomes a DHCP reservation there)")
		}
	}
	return nil
}

// macFromUID derives a stable, locally administered MAC in QEMU's 52:54:00 range, so a retried create and the
// DHCP reservation agree on it without storing anything first.
func macFromUID(uid string) string {
	sum := sha256.Sum256([]byte("mac:" + uid))
	return net.HardwareAddr{0x52, 0x54, 0x00, sum[0], sum[1], sum[2]}.String()
}

// Volume names tie a volume to its proxy by name alone, so leftovers are recognisable without their domain.
func rootVolumeName(name string) string { return name + "-root.qcow2" }
func seedVolumeName(name string) string { return name + "-seed.iso" }
