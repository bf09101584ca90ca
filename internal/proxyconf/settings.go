// Package proxyconf is the policy every backend shares: the proxy's settings and their validation, the
// squid.conf every backend runs, the nftables backstop, the htpasswd file and the destination guards. It is the
// one place that decides what the proxy allows. How a backend delivers it to its guest (a cloud-init seed, a
// startup script, an agent, a pod) is that backend's guest package's (internal/backend/<kind>/guest); this
// package imports no backend.
package proxyconf

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

// Settings are the proxy's behaviour, the same on every backend.
type Settings struct {
	// Port is where Squid listens for clients; it speaks TLS when TLS is set.
	Port int
	// AllowedClientCIDRs may use the proxy; every other client is refused. It stays the gate with rule sets:
	// a rule set's SourceCIDRs select among these clients and must lie within them (ValidateRuleSet).
	AllowedClientCIDRs []string
	// AllowedDestinations are exact host names or ".suffix" domains; empty denies every destination.
	AllowedDestinations []string
	// AllowedPorts are the destination ports CONNECT may reach; empty means 443 only.
	AllowedPorts []int
	// AllowedPrivateCIDRs are private ranges (inside PrivateRanges) the proxy may connect to after all, such as
	// an internal package mirror. Loopback, link-local, unspecified and the proxy's own addresses stay refused.
	AllowedPrivateCIDRs []string
	// Users, when any, require proxy basic authentication: a client logs in as one of them. Empty means no
	// authentication.
	Users []BasicAuth
	// RuleSets judge the requests of the clients they name, in order: the first rule set whose clients match a
	// request decides it, and a client no rule set names falls back to AllowedDestinations and AllowedPorts.
	RuleSets []RuleSet
	// DeniedDestinations are refused for every client and rule set, in both modes: exact host names or
	// ".suffix" domains, as AllowedDestinations.
	DeniedDestinations []string
	// TLS, when set, makes Port a TLS listener, so that credentials never cross the network in clear.
	TLS *TLSSettings
	// MaxConnectionsPerClient bounds the connections one client address may hold open; 0 means
	// DefaultMaxConnectionsPerClient.
	MaxConnectionsPerClient int
	// Timeouts bound how long one client may hold the proxy's resources; zero fields take the defaults.
	Timeouts Timeouts
	// LogFormat is the access log's format; the zero value is LogFormatText. Omitted from JSON when zero, so
	// that the settings a backend keeps for a proxy made before it existed read back, and compare, as they were.
	LogFormat LogFormat `json:",omitempty"`
	// Metrics, when set, serves the proxy's Prometheus metrics to the metrics clients alone (metrics.go).
	Metrics *MetricsSettings `json:",omitempty"`
}

// BasicAuth is one proxy user. The password never reaches disk in clear: only its hash is written.
type BasicAuth struct {
	Username string
	Password string
}

// TLSSettings are the proxy's own certificate (PEM, the leaf first, then any intermediates) and its private
// key (PEM, unencrypted).
type TLSSettings struct {
	CertificatePEM string
	PrivateKeyPEM  string
	// ClientCAPEM, when set, makes clients present a certificate this CA (PEM, one or more certificates)
	// signed; rule sets may then match the certificate's subject. Not a secret.
	ClientCAPEM string
	// ClientCRLPEM, optional with ClientCAPEM, lists revoked client certificates (PEM). Not a secret.
	ClientCRLPEM string
}

// RuleSet is the egress policy of the clients it names.
type RuleSet struct {
	// Name identifies the rule set in the access log and in plan-time errors: unique within a proxy.
	Name string
	// Clients say whose requests the rule set judges.
	Clients RuleSetClients
	// Destinations are exact host names or ".suffix" domains, as Settings.AllowedDestinations; empty allows
	// none (in report mode: every request is a would-be denial).
	Destinations []string
	// Ports are the destination ports CONNECT may reach; empty means DefaultConnectPorts.
	Ports []int
	// Mode is RuleSetEnforce (the zero value means it too) or RuleSetReport.
	Mode RuleSetMode
}

// RuleSetClients name clients. A request matches when it satisfies every field that is set: from one of
// SourceCIDRs, authenticated as one of Users, with a client certificate whose subject common name is one of
// CertificateSubjects. At least one field is set; several rule sets express "or". Users must be users of the
// proxy, and CertificateSubjects need TLSSettings.ClientCAPEM: without them the rule set could never match, and
// validation refuses it. A request's checks before any rule set (client ranges, the connection limit,
// authentication, the deny list) apply to every client whatever its rule set.
type RuleSetClients struct {
	SourceCIDRs         []string
	Users               []string
	CertificateSubjects []string
}

// RuleSetMode is how a rule set treats a request outside its destinations or ports.
type RuleSetMode string

const (
	// RuleSetEnforce refuses it.
	RuleSetEnforce RuleSetMode = "enforce"
	// RuleSetReport forwards it and logs decision=would_deny with the rule set's name. The destination
	// guards, the refused ranges, the per-client limits and DeniedDestinations still refuse, always.
	RuleSetReport RuleSetMode = "report"
)

// TLSFingerprints stand for a certificate and its key where the backends keep settings that more can read
// than their secret store: enough to tell that TLS is on and whether either changed, nothing to recover them
// from (a private key has far too much entropy for a plain SHA-256 to be reversed).
type TLSFingerprints struct {
	// Certificate is the SHA-256 of CertificatePEM as given (the chain), hex.
	Certificate string
	// Pair is the SHA-256 of certificate and key together, length-prefixed so that no other split of the same
	// bytes hashes alike: a key replaced under the same certificate changes it.
	Pair string
}

// Fingerprints are t's fingerprints.
func (t TLSSettings) Fingerprints() TLSFingerprints {
	cert := sha256.Sum256([]byte(t.CertificatePEM))
	pair := sha256.Sum256(fmt.Appendf(nil, "%d\n%s%d\n%s", len(t.CertificatePEM), t.CertificatePEM, len(t.PrivateKeyPEM), t.PrivateKeyPEM))
	return TLSFingerprints{Certificate: hex.EncodeToString(cert[:]), Pair: hex.EncodeToString(pair[:])}
}

// WithoutSecrets is s with the users' names but not their passwords, and without TLS: the settings a backend
// may keep where more can read than its secret store (TLSFingerprints stand for the TLS settings there).
func (s Settings) WithoutSecrets() Settings {
	s.Users = UsernamesOnly(s.Users)
	s.TLS = nil
	return s
}

// UsernamesOnly is users with their names and no passwords, in a new slice (nil for none), so that clearing
// the passwords never reaches the caller's settings.
func UsernamesOnly(users []BasicAuth) []BasicAuth {
	if len(users) == 0 {
		return nil
	}
	out := make([]BasicAuth, len(users))
	for i, u := range users {
		out[i] = BasicAuth{Username: u.Username}
	}
	return out
}

// Usernames are the users' names, in order (nil for none).
func Usernames(users []BasicAuth) []string {
	var out []string
	for _, u := range users {
		out = append(out, u.Username)
	}
	return out
}

// Timeouts of the proxy. They stop one client from tying up connections and file descriptors by sending
// slowly or nothing at all.
type Timeouts struct {
	// RequestHeaders is how long a client has to send a complete request once connected (Squid's
	// request_timeout), and how long an idle persistent client connection is kept.
	RequestHeaders time.Duration
	// Connect is how long the proxy tries to reach a destination (Squid's connect_timeout).
	Connect time.Duration
	// Idle is how long a forwarded request or tunnel may pass no data before it is closed (read_timeout).
	Idle time.Duration
}

// Default timeouts: long enough for slow clients and long polls, short enough that idle connections do not
// pile up. Squid's own defaults are 5 minutes for request headers and 15 for an idle exchange.
const (
	DefaultRequestHeadersTimeout = 30 * time.Second
	DefaultConnectTimeout        = 30 * time.Second
	DefaultIdleTimeout           = 5 * time.Minute
)

// DefaultPort is Squid's customary port.
const DefaultPort = 3128

// DefaultMaxConnectionsPerClient allows a busy build host many parallel downloads while keeping one client
// far from the file descriptors Squid has (65536 in Debian's build).
const DefaultMaxConnectionsPerClient = 256

// MaxMaxConnectionsPerClient is the largest per-client limit accepted: beyond it one client could take all
// of Squid's file descriptors.
const MaxMaxConnectionsPerClient = 16384

// DefaultConnectPorts is where CONNECT may go unless the user widens it.
var DefaultConnectPorts = []int{443}

func (s Settings) maxConnectionsPerClient() int {
	if s.MaxConnectionsPerClient == 0 {
		return DefaultMaxConnectionsPerClient
	}
	return s.MaxConnectionsPerClient
}

func (t Timeouts) withDefaults() Timeouts {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&t.RequestHeaders, DefaultRequestHeadersTimeout)
	def(&t.Connect, DefaultConnectTimeout)
	def(&t.Idle, DefaultIdleTimeout)
	return t
}
