package proxyconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"
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
	// No top-level domain is a number. A name whose last label is one is an IPv4 address to inet_aton(3),
	// which getaddrinfo(3) uses for numeric hosts, and to browsers and URL parsers (the WHATWG URL standard's
	// "ends in a number" check), in any spelling: "2130706433", octal "0177.0.0.1", hex "0x7f000001" and
	// mixes such as "127.0x1" all name 127.0.0.1. Refusing them keeps IP literals out of the allow-list, and
	// ".0.1" from matching a range of addresses nobody meant to allow.
	switch tld := d[strings.LastIndexByte(d, '.')+1:]; {
	case strings.Trim(tld, "0123456789") == "":
		return fmt.Errorf("destination %q must be a host name, not an IP address: its last label %q is a decimal or octal number, so the name is read as an IPv4 address", d, tld)
	case strings.HasPrefix(tld, "0x") && strings.Trim(tld[2:], "0123456789abcdef") == "":
		return fmt.Errorf("destination %q must be a host name, not an IP address: its last label %q is a hexadecimal number, so the name is read as an IPv4 address", d, tld)
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
	// MaxUsers also bounds the bcrypt work of rendering the htpasswd file (tens of milliseconds a user) and
	// the secrets a backend stores in one value: 25 users of the longest names (about 126 characters of
	// htpasswd each) and an ECDSA key still fit one Standard SSM parameter of 4 KB on aws (at 50 they did
	// not: TestLargestSettingsCreate found the secrets Advanced).
	MaxUsers = 25
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
	case len(s.AllowedPrivateCIDRs) > MaxAllowedPrivateCIDRs:
		return fmt.Errorf("at most %d allowed private CIDRs, got %d", MaxAllowedPrivateCIDRs, len(s.AllowedPrivateCIDRs))
	}
	for _, c := range s.AllowedPrivateCIDRs {
		if err := ValidateAllowedPrivateCIDR(c); err != nil {
			return err
		}
	}
	if err := ValidateMaxConnectionsPerClient(s.MaxConnectionsPerClient); err != nil {
		return err
	}
	if err := s.Timeouts.validate(); err != nil {
		return err
	}
	if err := s.validatePolicy(); err != nil {
		return err
	}
	if err := ValidateLogFormat(s.LogFormat); err != nil {
		return err
	}
	if err := s.validateMetrics(); err != nil {
		return err
	}
	if s.TLS != nil {
		if err := ValidateTLS(s.TLS.CertificatePEM, s.TLS.PrivateKeyPEM); err != nil {
			return err
		}
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
	return ValidateUsers(s.Users)
}

// ValidateUsers reports why users cannot be the proxy's users, or nil: at most MaxUsers, each name valid and
// unique (htpasswd would keep only one of two lines of the same name), each password valid.
func ValidateUsers(users []BasicAuth) error {
	if len(users) > MaxUsers {
		return fmt.Errorf("at most %d users, got %d", MaxUsers, len(users))
	}
	seen := make(map[string]bool, len(users))
	for _, u := range users {
		if err := ValidateUsername(u.Username); err != nil {
			return err
		}
		if seen[u.Username] {
			return fmt.Errorf("username %q is given twice: each user needs a name of its own", u.Username)
		}
		seen[u.Username] = true
		if err := ValidatePassword(u.Password); err != nil {
			return fmt.Errorf("user %q: %w", u.Username, err)
		}
	}
	return nil
}

// MaxAllowedPrivateCIDRs bounds allowed_private_cidrs like the other lists.
const MaxAllowedPrivateCIDRs = 100

// ValidateAllowedPrivateCIDR reports why c cannot lift the private-range guard, or nil. It must be a
// canonical range inside one of PrivateRanges: loopback, link-local and the like can never be allowed, and a
// public range needs no exception.
func ValidateAllowedPrivateCIDR(c string) error {
	if err := ValidateClientCIDR(c); err != nil {
		return err
	}
	if !inPrivateRanges(netip.MustParsePrefix(c)) {
		return fmt.Errorf("%q is not inside a private range (%s): only private ranges can be allowed", c, strings.Join(PrivateRanges, ", "))
	}
	return nil
}

// ValidateMaxConnectionsPerClient reports why n cannot be the per-client connection limit, or nil; 0 takes
// the default.
func ValidateMaxConnectionsPerClient(n int) error {
	if n < 0 || n > MaxMaxConnectionsPerClient {
		return fmt.Errorf("max connections per client %d must be between 1 and %d", n, MaxMaxConnectionsPerClient)
	}
	return nil
}

// MaxPEMBytes bounds a certificate chain and a key, each: far below what user-data may carry.
const MaxPEMBytes = 16 * 1024

// ValidateTLS reports why the certificate and key cannot serve the proxy's TLS listener, or nil: both must be
// PEM, the key unencrypted and matching the first certificate, which must be a server certificate.
func ValidateTLS(certPEM, keyPEM string) error {
	if len(certPEM) > MaxPEMBytes || len(keyPEM) > MaxPEMBytes {
		return fmt.Errorf("certificate and private key must each be at most %d bytes of PEM", MaxPEMBytes)
	}
	var certs int
	for rest := []byte(certPEM); ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			if strings.TrimSpace(string(rest)) != "" {
				return fmt.Errorf("certificate_pem holds something other than PEM blocks")
			}
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("certificate_pem holds a %q block: only CERTIFICATE blocks belong there (the key goes in private_key_pem)", b.Type)
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Errorf("certificate_pem, certificate %d: %w", certs+1, err)
		}
		certs++
	}
	if certs == 0 {
		return fmt.Errorf("certificate_pem holds no PEM certificate")
	}
	kb, rest := pem.Decode([]byte(keyPEM))
	if kb == nil || strings.TrimSpace(string(rest)) != "" {
		return fmt.Errorf("private_key_pem must be exactly one PEM private key")
	}
	if strings.Contains(kb.Type, "ENCRYPTED") || kb.Headers["Proc-Type"] != "" {
		return fmt.Errorf("private_key_pem is encrypted: the proxy starts unattended and needs it unencrypted")
	}
	pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		return fmt.Errorf("certificate_pem and private_key_pem do not form a key pair: %w", err)
	}
	if len(pair.Leaf.ExtKeyUsage) > 0 && !slices.Contains(pair.Leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) && !slices.Contains(pair.Leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return fmt.Errorf("the first certificate in certificate_pem is not for TLS servers (its extended key usage lacks serverAuth)")
	}
	return nil
}

// validate accepts timeouts of whole seconds from 1 second to a day, which is what Squid's directives take.
func (t Timeouts) validate() error {
	for name, d := range map[string]time.Duration{"request headers": t.RequestHeaders, "connect": t.Connect, "idle": t.Idle} {
		if d == 0 {
			continue
		}
		if d < time.Second || d > 24*time.Hour || d%time.Second != 0 {
			return fmt.Errorf("%s timeout %s must be whole seconds between 1s and 24h", name, d)
		}
	}
	return nil
}
