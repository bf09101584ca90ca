package kvm

import (
	"encoding/xml"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Namespace is the project's own XML namespace for the element it keeps in a domain's <metadata>. libvirt
// stores one element per namespace, so the provider's bookkeeping never collides with other tools'.
const (
	Namespace      = "https://egress-proxies.dev/xmlns/egress-proxy/1"
	metadataPrefix = "egress"
)

// metadata is everything Get, ListByTag and Delete need to know about a proxy, stored on the domain itself:
// ownership (managed marker, owner, UID), the user's labels, the creation time, the placement and the proxy
// settings (without the password), so that an import or a Delete needs no provider-level default.
type metadata struct {
	// libvirt returns the element without its namespace (DomainGetMetadata) or with a prefix of its own
	// (domain XML), so reading matches the local name; writing declares the namespace.
	XMLName   xml.Name        `xml:"proxy"`
	XMLNS     string          `xml:"xmlns,attr,omitempty"`
	ManagedBy string          `xml:"managed-by"`
	Owner     string          `xml:"owner"`
	UID       string          `xml:"uid"`
	Name      string          `xml:"name"`
	CreatedAt string          `xml:"created-at"`
	Labels    []metaLabel     `xml:"labels>label"`
	Placement metaPlacement   `xml:"placement"`
	Proxy     metaProxy       `xml:"settings"`
	Volumes   metaVolumeNames `xml:"volumes"`
	// HA records the group of a proxy of several instances (ha.go); absent for a proxy of one.
	HA *metaHA `xml:"instances,omitempty"`
}

type metaLabel struct {
	Key   string `xml:"key,attr"`
	Value string `xml:",chardata"`
}

type metaPlacement struct {
	VCPUs          int    `xml:"vcpus,attr"`
	MemoryMiB      int    `xml:"memory-mib,attr"`
	DiskGiB        int    `xml:"disk-gib,attr"`
	DomainType     string `xml:"domain-type,attr"`
	Pool           string `xml:"pool,attr"`
	BaseVolume     string `xml:"base-volume,attr"`
	ImageFile      string `xml:"image-file,attr,omitempty"`
	Network        string `xml:"network,attr,omitempty"`
	Bridge         string `xml:"bridge,attr,omitempty"`
	UserNet        bool   `xml:"user-net,attr,omitempty"`
	ForwardAddress string `xml:"forward-address,attr,omitempty"`
	ForwardPort    int    `xml:"forward-port,attr,omitempty"`
	MAC            string `xml:"mac,attr"`
	IP             string `xml:"ip,attr,omitempty"`
	WaitForAddress bool   `xml:"wait-for-address,attr,omitempty"`
	WaitForProxy   bool   `xml:"wait-for-proxy,attr,omitempty"`
	SyslogTarget   string `xml:"syslog-target,attr,omitempty"`
}

type metaProxy struct {
	Port int `xml:"port,attr"`
	// AuthUser is the one user a version before several users recorded; read, never written (users).
	AuthUser     string        `xml:"auth-user,attr,omitempty"`
	Users        []string      `xml:"user"`
	Clients      []string      `xml:"client"`
	Destinations []string      `xml:"destination"`
	Ports        []int         `xml:"connect-port"`
	Denied       []string      `xml:"denied-destination"`
	RuleSets     []metaRuleSet `xml:"rule-set"`
	// ClientCA and ClientCRL are the SHA-256 of TLSSettings.ClientCAPEM and ClientCRLPEM (hex), when set:
	// enough to tell that the guest's files are the ones asked for. The files are in the seed's user-data.
	ClientCA  string `xml:"client-ca-sha256,attr,omitempty"`
	ClientCRL string `xml:"client-crl-sha256,attr,omitempty"`
	// LogFormat is proxyconf.Settings.LogFormat; absent for the text line, so a domain made before the JSON
	// line existed reads back as it logs.
	LogFormat string `xml:"log-format,attr,omitempty"`
	// Metrics is proxyconf.Settings.Metrics, with its ports filled in; absent without metrics, so a domain
	// made before metrics existed reads back without them.
	Metrics *metaMetrics `xml:"metrics,omitempty"`
}

// metaMetrics records proxyconf.MetricsSettings.
type metaMetrics struct {
	Port      int      `xml:"port,attr"`
	SquidPort int      `xml:"squid-port,attr"`
	Clients   []string `xml:"client"`
}

// settings are the recorded metrics as settings (nil for none).
func (m *metaMetrics) settings() *proxyconf.MetricsSettings {
	if m == nil {
		return nil
	}
	return &proxyconf.MetricsSettings{Port: m.Port, SquidPort: m.SquidPort, AllowedClientCIDRs: m.Clients}
}

// metaMetricsOf is the metadata form of s (nil for none).
func metaMetricsOf(s *proxyconf.MetricsSettings) *metaMetrics {
	if s == nil {
		return nil
	}
	port, squidPort := s.Ports()
	return &metaMetrics{Port: port, SquidPort: squidPort, Clients: s.AllowedClientCIDRs}
}

func sameMetaMetrics(a, b *metaMetrics) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Port == b.Port && a.SquidPort == b.SquidPort && slices.Equal(a.Clients, b.Clients)
}

// metaRuleSet records one proxyconf.RuleSet, so that Get reads back the rule sets the guest enforces.
type metaRuleSet struct {
	Name         string   `xml:"name,attr"`
	Mode         string   `xml:"mode,attr,omitempty"`
	Clients      []string `xml:"client"`
	Users        []string `xml:"user"`
	Subjects     []string `xml:"certificate-subject"`
	Destinations []string `xml:"destination"`
	Ports        []int    `xml:"connect-port"`
}

// metaVolumeNames records the volumes Create made, so Delete removes exactly those.
type metaVolumeNames struct {
	Root string `xml:"root,attr"`
	Seed string `xml:"seed,attr"`
}

// newMetadata describes the proxy spec places at p, created now.
func newMetadata(spec backend.Spec, p placement, created time.Time) metadata {
	m := metadata{
		ManagedBy: backend.ManagedByValue,
		Owner:     spec.Owner,
		UID:       spec.UID,
		Name:      spec.Name,
		CreatedAt: created.UTC().Format(time.RFC3339),
		Labels:    labelsToMeta(spec.Labels),
		Placement: metaPlacement{
			VCPUs: p.VCPUs, MemoryMiB: p.MemoryMiB, DiskGiB: p.DiskGiB, DomainType: p.DomainType,
			Pool: p.Pool, BaseVolume: p.BaseVolume, ImageFile: p.ImageFile, Network: p.Network, Bridge: p.Bridge,
			UserNet: p.UserNet, ForwardAddress: p.ForwardAddress, ForwardPort: p.ForwardPort, MAC: p.MAC, IP: p.IP,
			WaitForAddress: p.WaitForAddress, WaitForProxy: p.WaitForProxy, SyslogTarget: p.SyslogTarget,
		},
		Proxy:   metaProxyOf(spec.Proxy),
		Volumes: metaVolumeNames{Root: rootVolumeName(spec.Name), Seed: seedVolumeName(spec.Name)},
		HA:      p.ha,
	}
	return m
}

func labelsToMeta(labels map[string]string) []metaLabel {
	out := make([]metaLabel, 0, len(labels))
	for k, v := range labels {
		out = append(out, metaLabel{Key: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func (m metadata) labels() map[string]string {
	out := make(map[string]string, len(m.Labels))
	for _, l := range m.Labels {
		out[l.Key] = l.Value
	}
	return out
}

// managedBy reports whether the domain is this provider's and belongs to owner ("" matches any owner).
func (m metadata) managedBy(owner string) bool {
	return m.ManagedBy == backend.ManagedByValue && (owner == "" || m.Owner == owner)
}

func (m metadata) createdAt() time.Time {
	t, _ := time.Parse(time.RFC3339, m.CreatedAt)
	return t
}

func (m metadata) marshal() (string, error) {
	m.XMLNS = Namespace
	b, err := xml.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encoding the domain metadata: %w", err)
	}
	return string(b), nil
}

func parseMetadata(s string) (metadata, error) {
	var m metadata
	if err := xml.Unmarshal([]byte(s), &m); err != nil {
		return metadata{}, fmt.Errorf("reading the domain's %s metadata: %w", Namespace, err)
	}
	return m, nil
}

// instance is what Get and ListByTag report for a domain described by m on host.
func (m metadata) instance(host string, state backend.State) backend.Instance {
	p := m.Placement
	inst := backend.Instance{
		ID:        backend.ProviderID{Backend: Kind, Target: host, Name: m.Name},
		Name:      m.Name,
		UID:       m.UID,
		Owner:     m.Owner,
		Labels:    m.labels(),
		State:     state,
		Port:      m.Proxy.Port,
		CreatedAt: m.createdAt(),
		Placement: backend.Placement{Backend: Kind, Target: host, Options: &Options{
			VCPUs: p.VCPUs, MemoryMiB: p.MemoryMiB, DiskGiB: p.DiskGiB, DomainType: p.DomainType,
			Pool: p.Pool, BaseVolume: p.BaseVolume, ImageFile: p.ImageFile, Network: p.Network, Bridge: p.Bridge,
			UserNet: p.UserNet, ForwardAddress: p.ForwardAddress, ForwardPort: p.ForwardPort, MAC: p.MAC, IP: p.IP,
			WaitForAddress: p.WaitForAddress, WaitForProxy: p.WaitForProxy, SyslogTarget: p.SyslogTarget,
			Instances: m.instances(),
		}},
		Proxy: &proxyconf.Settings{
			Port: m.Proxy.Port, AllowedClientCIDRs: m.Proxy.Clients,
			AllowedDestinations: m.Proxy.Destinations, AllowedPorts: m.Proxy.Ports,
			DeniedDestinations: m.Proxy.Denied, RuleSets: m.Proxy.ruleSets(),
			LogFormat: proxyconf.LogFormat(m.Proxy.LogFormat), Metrics: m.Proxy.Metrics.settings(),
		},
	}
	for _, u := range m.Proxy.users() {
		inst.Proxy.Users = append(inst.Proxy.Users, proxyconf.BasicAuth{Username: u})
	}
	// EgressAddress depends on the libvirt network's forward mode, which the metadata does not hold: Get sets
	// it (network_mode.go).
	switch {
	case p.IP != "":
		inst.InternalAddress, inst.IngressAddress = p.IP, p.IP
	case p.UserNet:
		// Known before the guest boots, like a fixed IP: the host's forwarded port, which is also where clients
		// connect (the guest has no address of its own outside QEMU).
		inst.InternalAddress, inst.Port = firstOf(p.ForwardAddress, DefaultForwardAddress), p.ForwardPort
		inst.IngressAddress = inst.InternalAddress
	}
	return inst
}

// instances is how many instances the proxy m describes has: one unless it records a group.
func (m metadata) instances() int {
	if m.HA == nil {
		return DefaultInstances
	}
	return len(m.HA.Members)
}
