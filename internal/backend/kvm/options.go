package kvm

import "github.com/egress-proxies/terraform-provider-egress/internal/backend"

// Kind is this backend's kind: the first part of its ids and the name of its provider and resource blocks.
const Kind backend.Kind = "kvm"

// IDForm is how this backend's ids look: a host has no scope within it, so the id has none.
var IDForm = backend.IDForm{Kind: Kind, Parts: []string{"host", "name"}}

// Options holds the settings of a proxy on a libvirt host.
type Options struct {
	VCPUs     int
	MemoryMiB int
	DiskGiB   int

	// DomainType is "kvm", "qemu" or "" for the host's configured default.
	DomainType string
	// Pool holds the proxy's root overlay and seed ISO; BaseVolume, in the same pool, backs the overlay.
	// Empty means the host's configured default.
	Pool       string
	BaseVolume string
	// ImageFile is a local path, read by the provider process, to a qcow2 or raw disk image to use instead of
	// BaseVolume: it is uploaded once into Pool as a volume named after its content's SHA-256
	// (egress-image-<16 hex digits>.qcow2 or .raw) and shared by every proxy made from the same content.
	// Image volumes are never deleted by the provider. Reading a proxy back reports BaseVolume as that
	// volume's name.
	ImageFile string
	// ImageURL is an http or https URL of a qcow2 or raw disk image, downloaded by the provider process into
	// Pool once and shared like ImageFile's, and ImageSHA256 the hex SHA-256 its content must have: the
	// volume is named after it, so a proxy whose image is in the pool already downloads nothing. At most one
	// of BaseVolume, ImageFile and ImageURL is set. Get reports neither (a URL may carry credentials, and
	// the domain's metadata is readable by whoever may read the host's domains), only BaseVolume.
	ImageURL    string
	ImageSHA256 string

	// The interface: at most one of Network (a libvirt network), Bridge (a host bridge) or UserNet (QEMU
	// user-mode networking, the proxy port forwarded to ForwardAddress:ForwardPort on the host). None set
	// means the host's configured default network.
	Network        string
	Bridge         string
	UserNet        bool
	ForwardAddress string
	ForwardPort    int

	// MAC is the interface's address; empty derives a stable one from the UID. IP, on a libvirt network,
	// becomes a DHCP host reservation there and is the proxy's address before the guest boots.
	MAC string
	IP  string
	// WaitForAddress makes Create wait (within its ctx) until the network or guest agent reports an address.
	WaitForAddress bool
	// WaitForProxy makes Create wait (within its ctx), after the address, until the proxy answers: a TCP
	// connection to its port and a 200 from its health endpoint (user-mode networking: any HTTP answer on
	// the forwarded port). When the address proves unreachable from where the provider runs, Create does
	// not wait for the proxy and succeeds without having verified it. Only with WaitForAddress: the proxy is
	// probed at its address. Both flags are stored as given and read back as given.
	WaitForProxy bool

	// Instances is how many VMs serve the proxy (0 or 1: one, as before instances existed). More than one
	// are that many domains on the host, on one libvirt network, behind a virtual address of that network
	// which keepalived in the guests moves by VRRP to a VM whose Squid answers (ha.go). Each VM gets a fixed
	// address reserved on the network, as does the virtual address, so MAC, IP, Bridge and UserNet are
	// refused with it. The name of instance i > 0 is the proxy's name followed by -<i+1>.
	Instances int

	// SyslogTarget, when set, is where the guest forwards Squid's access log besides its journal:
	// "udp://HOST:PORT" or "tcp://HOST:PORT" (ValidateSyslogTarget). Update changes it in place through the
	// guest agent.
	SyslogTarget string
}
