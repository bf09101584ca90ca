package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// settingsAnnotation is the JSON form of the settings annotation. The ConfigMap it sits on is readable by
// anyone with the built-in view role, which cannot read Secrets: so it holds no password, no password hash
// and no private key. The credentials live only in the Secret.
type settingsAnnotation struct {
	proxyconf.Settings
	// TLS shadows Settings.TLS (the shallower field wins in encoding/json): fingerprints instead of PEM.
	TLS *tlsFingerprints `json:"TLS,omitempty"`
}

// tlsFingerprints stand for the certificate and key: enough to tell that TLS is on and that either changed,
// nothing to recover them from. A private key has far too much entropy for a plain SHA-256 to be reversed.
type tlsFingerprints struct {
	// CertificateSHA256 is the hash of certificate_pem as given (the chain).
	CertificateSHA256 string `json:"certificateSHA256"`
	// PairSHA256 hashes certificate and key together, so that a key replaced under the same certificate
	// still changes the annotation.
	PairSHA256 string `json:"pairSHA256"`
}

func fingerprints(t proxyconf.TLSSettings) *tlsFingerprints {
	cert := sha256.Sum256([]byte(t.CertificatePEM))
	pair := sha256.New()
	// Length-prefixed, so that no other split of the same bytes into certificate and key hashes alike.
	_, _ = fmt.Fprintf(pair, "%d\n%s%d\n%s", len(t.CertificatePEM), t.CertificatePEM, len(t.PrivateKeyPEM), t.PrivateKeyPEM)
	return &tlsFingerprints{CertificateSHA256: hex.EncodeToString(cert[:]), PairSHA256: hex.EncodeToString(pair.Sum(nil))}
}

// storedSettings is the settings annotation: the proxy's settings with the user name but not the password,
// and fingerprints of the TLS certificate and key instead of the PEM.
func storedSettings(s proxyconf.Settings) string {
	a := settingsAnnotation{Settings: s}
	if s.Auth != nil {
		a.Auth = &proxyconf.BasicAuth{Username: s.Auth.Username}
	}
	if s.TLS != nil {
		a.Settings.TLS = nil
		a.TLS = fingerprints(*s.TLS)
	}
	b, _ := json.Marshal(a) // plain strings and ints: cannot fail
	return string(b)
}

// parseSettings reads the annotation back. TLS comes back empty but set: Read needs to know the listener
// speaks TLS, never the certificate or key, which the provider keeps in state from the configuration.
// An annotation written before fingerprints (with the PEM in it) parses the same way.
func parseSettings(v string) *proxyconf.Settings {
	if v == "" {
		return nil
	}
	var a settingsAnnotation
	if json.Unmarshal([]byte(v), &a) != nil {
		return nil
	}
	s := a.Settings
	if a.TLS != nil {
		s.TLS = &proxyconf.TLSSettings{}
	}
	return &s
}

// withoutLegacyKey rewrites a settings annotation written before fingerprints, which holds the TLS key in
// PEM, into today's form; any other value comes back as it is. Update, which every apply calls, runs it,
// so a proxy made by an older provider loses the key from its ConfigMap on the next apply.
func withoutLegacyKey(v string) string {
	var old proxyconf.Settings
	if json.Unmarshal([]byte(v), &old) != nil || old.TLS == nil || old.TLS.PrivateKeyPEM == "" {
		return v
	}
	return storedSettings(old)
}
