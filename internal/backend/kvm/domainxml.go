package kvm

import (
	"fmt"

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
			Address: p.ForwardAddress,
			Ranges:  []libvirtxml.DomainInterfaceSourcePortForwardRange{{Start: uint(p.ForwardPort), To: uint(proxyPort)}},
		}}
	default:
		iface.Source = &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: p.Network}}
	}
	return iface
}
