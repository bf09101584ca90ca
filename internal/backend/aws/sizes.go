package aws

import (
	"fmt"
	"slices"
	"strings"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// maxAdvancedParameter is the largest value SSM holds in one parameter, of the Advanced tier ("Managing
// parameter tiers": 8 KB): the secrets' bound, and the whole config's of a proxy in guest.FormatWhole.
const maxAdvancedParameter = 8192

// ParameterSizeError is a proxy whose settings SSM cannot hold: which parameter, how long it would be
// against what it may hold, and what in the settings makes it long.
type ParameterSizeError struct {
	// Parameter is the parameter: config or settings (each packed into at most guest.MaxParts parts), or
	// secrets.
	Parameter string
	// Chars is what it would hold (the packed characters of a packed one); Limit what it may.
	Chars, Limit int
	// Attribute is the proxy's attribute that takes the most of it, as the schema names it
	// (allowed_destinations, tls.certificate_pem, tls.private_key_pem, ...): what to reduce.
	Attribute string
	// shares says what each attribute takes, and how much of it to remove.
	shares string
}

func (e *ParameterSizeError) Error() string {
	what := fmt.Sprintf("the proxy's %s parameter would hold %d characters, and an SSM SecureString holds at most %d (Advanced tier)", e.Parameter, e.Chars, e.Limit)
	if e.Parameter != guest.ParameterSecrets {
		what = fmt.Sprintf("the proxy's %s, compressed, takes %d characters, and its %d SSM parameters of %d characters hold %d: %d too many",
			e.Parameter, e.Chars, guest.MaxParts, guest.MaxPartChars, e.Limit, e.Chars-e.Limit)
	}
	if e.shares != "" {
		what += "; " + e.shares
	}
	return what
}

// CheckParameterSizes renders the parameters a proxy of settings s and options o would write and refuses
// those SSM cannot hold (a *ParameterSizeError): what a plan can tell before Create or Reconfigure meets
// SSM's ValidationException. The config's key and MAC have fixed sizes, so a throwaway key measures them as
// well as the real one; a config packs alike under any key.
func CheckParameterSizes(name string, s proxyconf.Settings, o Options) error {
	p, err := renderParametersWith(name, s, guest.FormatLatest, make([]byte, guest.ConfigKeyBytes))
	if err != nil {
		return nil //nolint:nilerr // not this check's to report: the settings' own validation says what is wrong
	}
	return checkSizes(name, s, o, p)
}

// checkSizes refuses the rendering p of settings s when SSM cannot hold it; nil when it can.
func checkSizes(name string, s proxyconf.Settings, o Options, p parameters) error {
	e := oversize(s, o, p)
	if e == nil {
		return nil
	}
	e.explain(name, s, o)
	return e
}

// oversize is the first of p's values that SSM cannot hold, without the attributes' shares; nil when all fit.
func oversize(s proxyconf.Settings, o Options, p parameters) *ParameterSizeError {
	if n := packedChars(p.parts); len(p.parts) > guest.MaxParts {
		return &ParameterSizeError{Parameter: guest.ParameterConfig, Chars: n, Limit: guest.MaxPackedChars}
	}
	if _, parts, err := packedSettings(newStoredSpec(s, o, p)); err == nil && len(parts) > guest.MaxParts {
		return &ParameterSizeError{Parameter: guest.ParameterSettings, Chars: packedChars(parts), Limit: guest.MaxPackedChars}
	}
	if len(p.secrets) > maxAdvancedParameter {
		// The key, always: proxyconf.MaxUsers users' password hashes take well under half of it.
		return &ParameterSizeError{Parameter: guest.ParameterSecrets, Chars: len(p.secrets), Limit: maxAdvancedParameter, Attribute: "tls.private_key_pem",
			shares: "the TLS private key takes most of it: use a smaller one (an ECDSA P-256 key is about 240 characters of PEM, an RSA 4096 one about 3300)"}
	}
	return nil
}

func packedChars(parts []string) int {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	return n
}

// explain finds which attributes make e's packed value long, by packing it again without each, and says
// how much each takes and how many entries of the largest to remove, as an estimate (compression is not
// linear, so the plan after the change checks again).
func (e *ParameterSizeError) explain(name string, s proxyconf.Settings, o Options) {
	if e.Parameter == guest.ParameterSecrets {
		return
	}
	type share struct {
		attribute string
		entries   int
		chars     int
	}
	var shares []share
	var caPEM, crlPEM string
	if s.TLS != nil {
		caPEM, crlPEM = s.TLS.ClientCAPEM, s.TLS.ClientCRLPEM
	}
	for _, a := range []struct {
		attribute string
		entries   int
		without   func(proxyconf.Settings) proxyconf.Settings
		// pem, when set, is measured alone (packedPEM) rather than by packing the settings without it.
		pem string
	}{
		{attribute: "allowed_destinations", entries: len(s.AllowedDestinations), without: func(s proxyconf.Settings) proxyconf.Settings { s.AllowedDestinations = nil; return s }},
		{attribute: "allowed_client_cidrs", entries: len(s.AllowedClientCIDRs), without: func(s proxyconf.Settings) proxyconf.Settings { s.AllowedClientCIDRs = nil; return s }},
		{attribute: "allowed_private_cidrs", entries: len(s.AllowedPrivateCIDRs), without: func(s proxyconf.Settings) proxyconf.Settings { s.AllowedPrivateCIDRs = nil; return s }},
		{attribute: "allowed_ports", entries: len(s.AllowedPorts), without: func(s proxyconf.Settings) proxyconf.Settings { s.AllowedPorts = nil; return s }},
		{attribute: "rule_sets", entries: len(s.RuleSets), without: func(s proxyconf.Settings) proxyconf.Settings { s.RuleSets = nil; return s }},
		{attribute: "denied_destinations", entries: len(s.DeniedDestinations), without: func(s proxyconf.Settings) proxyconf.Settings { s.DeniedDestinations = nil; return s }},
		{attribute: "auth", entries: len(s.Users), without: func(s proxyconf.Settings) proxyconf.Settings { s.Users = nil; return s }},
		{attribute: "tls.certificate_pem", without: func(s proxyconf.Settings) proxyconf.Settings { s.TLS = nil; return s }},
		// Settings without the client CA or CRL are either invalid (rule sets by certificate subject need the CA,
		// a CRL needs it) or lose both: each is measured alone, which is close, since PEM's base64 compresses
		// alike alone and among the rest. Each is in the config and in the settings, in full.
		{attribute: "tls.client_ca_pem", pem: caPEM},
		{attribute: "tls.client_crl_pem", pem: crlPEM},
	} {
		switch {
		case a.attribute == "tls.certificate_pem" && s.TLS == nil, strings.HasPrefix(a.attribute, "tls.client_") && a.pem == "",
			!strings.HasPrefix(a.attribute, "tls.") && a.entries == 0:
			continue
		case a.attribute == "tls.certificate_pem" && caPEM+crlPEM != "":
			a.pem = s.TLS.CertificatePEM // without TLS, the client CA would go too
		}
		if a.pem != "" {
			shares = append(shares, share{a.attribute, a.entries, packedPEM(a.pem)})
			continue
		}
		if n, ok := packedSize(name, a.without(s), o, e.Parameter); ok && n < e.Chars {
			shares = append(shares, share{a.attribute, a.entries, e.Chars - n})
		}
	}
	if len(shares) == 0 {
		return
	}
	slices.SortStableFunc(shares, func(a, b share) int { return b.chars - a.chars })
	e.Attribute = shares[0].attribute
	var said []string
	for i, sh := range shares {
		w := fmt.Sprintf("%s take about %d", sh.attribute, sh.chars)
		switch sh.attribute {
		case "tls.certificate_pem":
			w = fmt.Sprintf("the certificate chain in %s takes about %d", sh.attribute, sh.chars)
		case "tls.client_ca_pem", "tls.client_crl_pem":
			w = fmt.Sprintf("%s takes about %d", sh.attribute, sh.chars)
		}
		if i == 0 && sh.entries > 0 {
			each := float64(sh.chars) / float64(sh.entries)
			remove := min(sh.entries, int(float64(e.Chars-e.Limit)/each)+1)
			w += fmt.Sprintf(" (%d entries, about %.0f each: remove about %d of them)", sh.entries, each, remove)
		}
		said = append(said, w)
	}
	e.shares = strings.Join(said, ", ")
}

// packedPEM is about what pem takes of a packed value: the characters it packs to alone.
func packedPEM(pem string) int {
	_, parts := guest.Pack([]byte(pem))
	return packedChars(parts)
}

// packedSize is the packed characters of the parameter named parameter (config or settings) for settings
// s; false when they do not render.
func packedSize(name string, s proxyconf.Settings, o Options, parameter string) (int, bool) {
	p, err := renderParametersWith(name, s, guest.FormatLatest, make([]byte, guest.ConfigKeyBytes))
	if err != nil {
		return 0, false
	}
	if parameter == guest.ParameterConfig {
		return packedChars(p.parts), true
	}
	_, parts, err := packedSettings(newStoredSpec(s, o, p))
	return packedChars(parts), err == nil
}
