package kvm

import (
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"
)

// Config is the kvm backend's provider-level configuration: the libvirt hosts proxies may run on, and the
// defaults a proxy's placement falls back to.
type Config struct {
	// Hosts maps the name used in placements and ProviderIDs (kvm/<host>/<name>) to how to reach it.
	// Empty means one host named DefaultHostName at $LIBVIRT_DEFAULT_URI, or qemu:///system.
	Hosts map[string]HostConfig

	// Defaults for every host that does not set its own. Empty values take the built-in defaults below.
	Pool       string
	BaseVolume string
	Network    string
	DomainType string
}

// HostConfig is one libvirt host.
type HostConfig struct {
	// URI is a libvirt connection URI: qemu:///system, qemu:///session, qemu+tcp://host/system,
	// qemu+tls://host/system, qemu+ssh://user@host/system, test:///default. The query parameters libvirt
	// documents for these transports are honoured: socket, keyfile, known_hosts, no_verify, pkipath, name.
	URI string

	Pool       string
	BaseVolume string
	// Network is the libvirt network proxies attach to unless the placement says otherwise; Bridge, when
	// set, attaches them to a host bridge instead.
	Network string
	Bridge  string
	// DomainType is "kvm", "qemu" or "auto" (kvm when the host's capabilities offer it).
	DomainType string

	// SSH: the private key (tried before the ssh configuration's IdentityFile; with neither,
	// ~/.ssh/id_ed25519, id_ecdsa, id_rsa) and known_hosts file (default: the configuration's
	// UserKnownHostsFile, else ~/.ssh/known_hosts). Host keys are verified unless InsecureIgnoreHostKey is
	// set, which spares the libvirt host only, never a jump host.
	SSHKeyFile            string
	SSHKnownHostsFile     string
	InsecureIgnoreHostKey bool
	// SSHConfigFile is the ssh client configuration the host's name, user, port, keys, known_hosts files and
	// jump hosts are looked up in, as ssh -F reads it: empty means ~/.ssh/config, then /etc/ssh/ssh_config;
	// "none" means none. The URI's user and port, and the settings above, come first.
	SSHConfigFile string

	// TLS: libvirt's PKI files (defaults /etc/pki/CA/cacert.pem, /etc/pki/libvirt/clientcert.pem and
	// /etc/pki/libvirt/private/clientkey.pem, or under pkipath). InsecureSkipVerify disables server checks.
	TLSCACertFile      string
	TLSClientCertFile  string
	TLSClientKeyFile   string
	InsecureSkipVerify bool

	// Insecure allows a transport anyone on the path could read or take over: qemu+tcp://, or no_verify=1
	// (ValidateTransport says why it takes a decision of its own).
	Insecure bool

	// DialTimeout bounds connecting: attempts are retried within it (a daemon restarting is waited for),
	// then the host is unreachable, a Permanent error. A caller's earlier deadline ends it sooner. Zero
	// means DefaultDialTimeout.
	DialTimeout time.Duration
}

// Built-in defaults, the names libvirt installs on a typical host.
const (
	DefaultHostName    = "local"
	DefaultURI         = "qemu:///system"
	DefaultPool        = "default"
	DefaultNetwork     = "default"
	DefaultDomainType  = DomainTypeAuto
	DefaultDialTimeout = 30 * time.Second
	// DefaultSocket is the daemon's unix socket unless the URI's socket parameter names another: the local
	// one for qemu:///system, the remote one for qemu+ssh://.
	DefaultSocket = "/var/run/libvirt/libvirt-sock"
)

// Domain types a host or placement may ask for.
const (
	DomainTypeAuto = "auto"
	DomainTypeKVM  = "kvm"
	DomainTypeQEMU = "qemu"
)

// DomainTypes lists the accepted DomainType values, for validators and documentation.
var DomainTypes = []string{DomainTypeAuto, DomainTypeKVM, DomainTypeQEMU}

// hosts returns the configured hosts with every default filled in, or an error naming the first bad one.
func (c Config) hosts() (map[string]HostConfig, error) {
	in := c.Hosts
	if len(in) == 0 {
		uri := os.Getenv("LIBVIRT_DEFAULT_URI")
		if uri == "" {
			uri = DefaultURI
		}
		in = map[string]HostConfig{DefaultHostName: {URI: uri}}
	}
	out := make(map[string]HostConfig, len(in))
	for name, h := range in {
		if err := ValidateHostName(name); err != nil {
			return nil, err
		}
		h.Pool = firstOf(h.Pool, c.Pool, DefaultPool)
		h.BaseVolume = firstOf(h.BaseVolume, c.BaseVolume)
		h.Network = firstOf(h.Network, c.Network, DefaultNetwork)
		h.DomainType = firstOf(h.DomainType, c.DomainType, DefaultDomainType)
		if h.DialTimeout <= 0 {
			h.DialTimeout = DefaultDialTimeout
		}
		if err := validDomainType(h.DomainType); err != nil {
			return nil, fmt.Errorf("kvm host %q: %w", name, err)
		}
		if _, err := parseURI(h.URI); err != nil {
			return nil, fmt.Errorf("kvm host %q: %w", name, err)
		}
		out[name] = h
	}
	return out, nil
}

func validDomainType(t string) error {
	for _, ok := range DomainTypes {
		if t == ok {
			return nil
		}
	}
	return fmt.Errorf("domain type %q must be one of %s", t, strings.Join(DomainTypes, ", "))
}

func firstOf(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// sortedNames lists host names in a stable order, so ListByTag and Check report them predictably.
func sortedNames(hosts map[string]HostConfig) []string {
	names := make([]string, 0, len(hosts))
	for n := range hosts {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// target is a parsed libvirt URI: how to reach the daemon, and what to ask it to open once there.
type target struct {
	transport string // unix, tcp, tls, ssh
	host      string // host name, no port
	port      string
	user      string
	socket    string // the daemon's unix socket: local for unix, remote for ssh
	// name is the URI sent in ConnectOpen: the daemon is local to itself, so the transport is dropped.
	name  string
	query url.Values
}

// Default unix sockets and ports of libvirtd.
const (
	systemSocket = DefaultSocket
	tcpPort      = "16509"
	tlsPort      = "16514"
)

// parseURI understands the URI forms libvirt clients accept; drivers are not checked here (the daemon knows
// which it has), transports are, so a typo fails at configuration time instead of at first use.
func parseURI(s string) (target, error) {
	if s == "" {
		return target{}, fmt.Errorf("libvirt URI is empty")
	}
	u, err := url.Parse(s)
	if err != nil {
		return target{}, fmt.Errorf("libvirt URI %q: %w", s, err)
	}
	if u.Scheme == "" || u.Opaque != "" {
		return target{}, fmt.Errorf("libvirt URI %q must look like driver[+transport]://[user@][host][:port]/path", s)
	}
	driver, transport, _ := strings.Cut(u.Scheme, "+")
	if transport == "" {
		transport = "unix"
		if u.Host != "" {
			transport = "tls" // libvirt's rule: a host without a transport means TLS
		}
	}
	t := target{transport: transport, host: u.Hostname(), port: u.Port(), user: u.User.Username(), query: u.Query()}
	t.name = (&url.URL{Scheme: driver, Path: u.Path}).String()
	if n := t.query.Get("name"); n != "" {
		t.name = n
	}
	switch transport {
	case "unix":
		t.socket = t.query.Get("socket")
		if t.socket == "" {
			t.socket = localSocket(driver, u.Path)
		}
	case "tcp", "tls", "ssh":
		if t.host == "" {
			return target{}, fmt.Errorf("libvirt URI %q: the %s transport needs a host", s, transport)
		}
		// An ssh URI without a port leaves it to the ssh configuration, as libvirt leaves it to ssh.
		t.port = firstOf(t.port, map[string]string{"tcp": tcpPort, "tls": tlsPort}[transport])
		t.socket = firstOf(t.query.Get("socket"), systemSocket)
	default:
		return target{}, fmt.Errorf("libvirt URI %q: transport %q is not supported (use unix, tcp, tls or ssh)", s, transport)
	}
	if !strings.HasPrefix(t.socket, "/") || strings.ContainsAny(t.socket, "\x00\n") {
		return target{}, fmt.Errorf("libvirt URI %q: socket %q must be an absolute path to the daemon's unix socket, such as %s", s, t.socket, systemSocket)
	}
	return t, nil
}

// localSocket is where a local daemon listens: the system daemon for /system and for drivers without a
// session daemon (test:///default is served in-process by whichever daemon answers), the per-user one
// for /session.
func localSocket(driver, path string) string {
	if path == "/session" && driver != "test" {
		if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
			return dir + "/libvirt/libvirt-sock"
		}
		if home, err := os.UserHomeDir(); err == nil {
			return home + "/.cache/libvirt/libvirt-sock"
		}
	}
	return systemSocket
}
