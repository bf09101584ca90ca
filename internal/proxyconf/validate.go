package proxyconf

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

// The validators accept only values that cannot escape their line in squid.conf or htpasswd: no whitespace,
// no comment characters, no quotes, no control characters. They run at plan time and again before rendering.

// destinationRE: a DNS name of letters, digits and hyphens, optionally starting with "." for "this domain and
// every subdomain". No wildcards, ports or paths.
var destinationRE = regexp.MustCompile(`^\.?([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ValidateDestination reports why d cannot be an allowed destination, or nil.
func ValidateDestination(d string) error {
	if d == "" {
		return fmt.Errorf("destination must not be empty")
	}
	if d != strings.ToLower(d) {
		return fmt.Errorf("destination %q must be lowercase", d)
	}
	if len(strings.TrimPrefix(d, ".")) > 253 || !destinationRE.MatchString(d) {
		return fmt.Errorf("destination %q must be a host name such as api.example.com, or .example.com for the domain and all its subdomains (letters, digits, hyphens and dots only)", d)
	}
	// No top-level domain is numeric. Refusing one keeps IP literals out: "10.0.0.1" would otherwise pass as a
	// name, and ".0.1" would match a range of addresses nobody meant to allow.
	if tld := d[strings.LastIndexByte(d, '.')+1:]; strings.Trim(tld, "0123456789") == "" {
		return fmt.Errorf("destination %q must be a host name, not an IP address (its last label is numeric)", d)
	}
	return nil
}

// ValidateClientCIDR reports why c cannot be an allowed client range, or nil. It must be in canonical form
// (host bits zero), so what the user wrote is exactly what the proxy enforces.
func ValidateClientCIDR(c string) error {
	p, err := netip.ParsePrefix(c)
	if err != nil {
		return fmt.Errorf("%q is not a CIDR range such as 10.0.0.0/8: %w", c, err)
	}
	if p.Masked() != p {
		return fmt.Errorf("%q has host bits set: write %s", c, p.Masked())
	}
	// Squid compares IPv4 clients as IPv4-mapped IPv6 addresses, so such a range would admit IPv4 clients
	// although written as IPv6: ask for the IPv4 form, which says what it means.
	if p.Addr().Is4In6() {
		return fmt.Errorf("%q is an IPv4-mapped IPv6 range: write it as an IPv4 range", c)
	}
	return nil
}

// Upper bounds on the lists keep the rendered config, and the cloud-init user-data that carries it, well under
// GCE's 256 KB limit for one metadata value (proved by a test at these limits).
const (
	MaxAllowedDestinations = 500
	MaxAllowedClientCIDRs  = 200
	MaxAllowedPorts        = 100
)

// ValidatePort reports why p cannot be a TCP port, or nil.
func ValidatePort(p int) error {
	if p < 1 || p > 65535 {
		return fmt.Errorf("port %d must be between 1 and 65535", p)
	}
	return nil
}

var usernameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidateUsername reports why u cannot be a proxy user name, or nil.
func ValidateUsername(u string) error {
	if !usernameRE.MatchString(u) {
		return fmt.Errorf("username %q must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", u)
	}
	return nil
}

// ValidatePassword reports why p cannot be a proxy password, or nil. Basic auth cannot carry control
// characters, and bcrypt reads only the first 72 bytes.
func ValidatePassword(p string) error {
	if len(p) < 8 || len(p) > 72 {
		return fmt.Errorf("password must be 8 to 72 bytes long")
	}
	for _, r := range p {
		if r < ' ' || r == 0x7f {
			return fmt.Errorf("password must not contain control characters")
		}
	}
	return nil
}

// Validate checks every setting and returns the first problem found.
func (s Settings) Validate() error {
	if err := ValidatePort(s.Port); err != nil {
		return err
	}
	if s.Port == DefaultHealthPort {
		return fmt.Errorf("port %d is reserved for the proxy's health check", s.Port)
	}
	switch {
	case len(s.AllowedDestinations) > MaxAllowedDestinations:
		return fmt.Errorf("at most %d allowed destinations, got %d", MaxAllowedDestinations, len(s.AllowedDestinations))
	case len(s.AllowedClientCIDRs) > MaxAllowedClientCIDRs:
		return fmt.Errorf("at most %d allowed client CIDRs, got %d", MaxAllowedClientCIDRs, len(s.AllowedClientCIDRs))
	case len(s.AllowedPorts) > MaxAllowedPorts:
		return fmt.Errorf("at most %d allowed ports, got %d", MaxAllowedPorts, len(s.AllowedPorts))
	}
	for _, c := range s.AllowedClientCIDRs {
		if err := ValidateClientCIDR(c); err != nil {
			return err
		}
	}
	for _, d := range s.AllowedDestinations {
		if err := ValidateDestination(d); err != nil {
			return err
		}
	}
	for _, p := range s.AllowedPorts {
		if err := ValidatePort(p); err != nil {
			return err
		}
	}
	if s.Auth != nil {
		if err := ValidateUsername(s.Auth.Username); err != nil {
			return err
		}
		if err := ValidatePassword(s.Auth.Password); err != nil {
			return err
		}
	}
	return nil
}
