// Package proxyconf renders the Squid configuration every backend runs, and the cloud-init and Kubernetes
// forms that deliver it. It is the one place that decides what the proxy allows.
package proxyconf

// Settings are the proxy's behaviour, the same on every backend.
type Settings struct {
	// Port is where Squid listens for clients.
	Port int
	// AllowedClientCIDRs may use the proxy; every other client is refused.
	AllowedClientCIDRs []string
	// AllowedDestinations are exact host names or ".suffix" domains; empty denies every destination.
	AllowedDestinations []string
	// AllowedPorts are the destination ports CONNECT may reach; empty means 443 only.
	AllowedPorts []int
	// Auth, when set, requires proxy basic authentication.
	Auth *BasicAuth
}

// BasicAuth is one proxy user. The password never reaches disk in clear: only its hash is written.
type BasicAuth struct {
	Username string
	Password string
}

// DefaultPort is Squid's customary port.
const DefaultPort = 3128

// DefaultConnectPorts is where CONNECT may go unless the user widens it.
var DefaultConnectPorts = []int{443}
