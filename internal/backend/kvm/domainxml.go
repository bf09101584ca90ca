package kvm

import (
	"fmt"
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// domainXML describes the proxy VM: the root overlay as a virtio disk, the seed ISO as a CD-ROM, one virtio
// interface, a serial console (the only way to watch cloud-init on a headless host), a guest agent channel
// (address discovery where no DHCP lease is visible) and a virtio RNG (key generation at first boot would
// otherwise stall waiting for entropy). Volumes are referenced by pool and name, never by path, so the same
// XML works on any host.
func domainXML(name string, p placement, domainType string, proxyPort int, meta string) (string, error) {
	port := uint(0)
	dom := &libvirtxml.Domain{
		Type:     domainType,
		Name:     name,
		Metadata: &libvirtxml.DomainMetadata{XML: meta},
		Memory:   &libvirtxml.DomainMemory{Value: uint(p.MemoryMiB), Unit: "MiB"},
		VCPU:     &libvirtxml.DomainVCPU{Value: uint(p.VCPUs)},
		OS: &libvirtxml.DomainOS{
			Type:        &libvirtxml.DomainOSType{Type: "hvm", Arch: "x86_64", Machine: "q35"},
			BootDevices: []libvirtxml.DomainBootDevice{{Dev: "hd"}},
		},
		Features: &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}, APIC: &libvirtxml.DomainFeatureAPIC{}},
		OnCrash:  "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			Disks: []libvirtxml.DomainDisk{
				{
					Device: "disk",
					Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2"},
					Source: &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: p.Pool, Volume: rootVolumeName(name)}},
					Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
				},
				{
					Device:   "cdrom",
					Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
					Source:   &libvirtxml.DomainDiskSource{Volume: &libvirtxml.DomainDiskSourceVolume{Pool: p.Pool, Volume: seedVolumeName(name)}},
					Target:   &libvirtxml.DomainDiskTarget{Dev: "sda", Bus: "sata"},
					ReadOnly: &libvirtxml.DomainDiskReadOnly{},
				},
			},
			Interfaces: []libvirtxml.DomainInterface{domainInterface(p, proxyPort)},
			Serials: []libvirtxml.DomainSerial{{
				Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
				Target: &libvirtxml.DomainSerialTarget{Port: &port},
			}},
			Consoles: []libvirtxml.DomainConsole{{
				Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
				Target: &libvirtxml.DomainConsoleTarget{Type: "serial", Port: &port},
			}},
			Channels: []libvirtxml.DomainChannel{{
				Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind"}},
				Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: guestAgentChannel}},
			}},
			RNGs: []libvirtxml.DomainRNG{{
				Model:   "virtio",
				Backend: &libvirtxml.DomainRNGBackend{Random: &libvirtxml.DomainRNGBackendRandom{Device: "/dev/urandom"}},
			}},
		},
	}
	if p.UserNet && p.slirp {
		dom.Devices.Interfaces = nil
		dom.QEMUCommandline = slirpCommandline(p, proxyPort)
	}
	s, err := dom.Marshal()
	if err != nil {
		return "", fmt.Errorf("encoding the domain XML: %w", err)
	}
	return s, nil
}

const guestAgentChannel = "org.qemu.guest_agent.0"

// domainInterface attaches the VM where the placement says. User-mode networking uses the passt backend,
// the one that supports port forwarding in libvirt: the proxy port is forwarded from the host address.
func domainInterface(p placement, proxyPort int) libvirtxml.DomainInterface {
	iface := libvirtxml.DomainInterface{
		MAC:   &libvirtxml.DomainInterfaceMAC{Address: p.MAC},
		Model: &libvirtxml.DomainInterfaceModel{Type: "virtio"},
	}
	switch {
	case p.Bridge != "":
		iface.Source = &libvirtxml.DomainInterfaceSource{Bridge: &libvirtxml.DomainInterfaceSourceBridge{Bridge: p.Bridge}}
	case p.UserNet:
		iface.Source = &libvirtxml.DomainInterfaceSource{User: &libvirtxml.DomainInterfaceSourceUser{}}
		iface.Backend = &libvirtxml.DomainInterfaceBackend{Type: "passt"}
		iface.PortForward = []libvirtxml.DomainInterfaceSourcePortForward{{
			Proto:   "tcp",
			Address: p.forwardAddress(),
			Ranges:  []libvirtxml.DomainInterfaceSourcePortForwardRange{{Start: uint(p.ForwardPort), To: uint(proxyPort)}},
		}}
	default:
		iface.Source = &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: p.Network}}
	}
	return iface
}

// Debian 12's libvirt 9.0 is built without passt (debian/patches/debian/Disable-passt-support.patch): it
// rejects <backend type='passt'/> with "XML error: Invalid value for attribute 'type' in element 'backend':
// 'passt'", and its <interface type='user'> (QEMU's slirp) cannot forward ports. On such a daemon the
// interface is QEMU's own user-mode network with the same forward, passed as QEMU arguments: the guest sees
// the same virtio NIC and MAC, the host the same listening address. libvirt marks such a domain tainted
// (custom-argv) and does not list the interface, which the backend never asks for on user-mode networking.
func slirpCommandline(p placement, proxyPort int) *libvirtxml.DomainQEMUCommandline {
	netdev := fmt.Sprintf("user,id=egressnet0,hostfwd=tcp:%s:%d-:%d", p.forwardAddress(), p.ForwardPort, proxyPort)
	// An explicit slot on the q35 root bus: QEMU takes arguments in order, and one it placed itself would
	// take the slot libvirt gives its first pcie-root-port. libvirt fills slots from 1 up; 0x10 is far
	// beyond what this domain's few devices use, and below the chipset's own at 0x1f.
	device := fmt.Sprintf("virtio-net-pci,netdev=egressnet0,mac=%s,bus=pcie.0,addr=0x10", p.MAC)
	return &libvirtxml.DomainQEMUCommandline{Args: []libvirtxml.DomainQEMUCommandlineArg{
		{Value: "-netdev"}, {Value: netdev}, {Value: "-device"}, {Value: device},
	}}
}

// isPasstRefused reports the error of a daemon that does not know the passt backend.
func isPasstRefused(err error) bool {
	return isCode(err, libvirt.ErrXMLError) && strings.Contains(err.Error(), "'backend'") && strings.Contains(err.Error(), "passt")
}
