package kubernetes

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes/guest"
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

// tlsFingerprints is the annotation's form of proxyconf.TLSFingerprints.
type tlsFingerprints struct {
	CertificateSHA256 string `json:"certificateSHA256"`
	PairSHA256        string `json:"pairSHA256"`
}

// storedSettings is the settings annotation: the proxy's settings with the user name but not the password,
// and fingerprints of the TLS certificate and key instead of the PEM.
func storedSettings(s proxyconf.Settings) string {
	a := settingsAnnotation{Settings: s.WithoutSecrets()}
	if s.TLS != nil {
		f := s.TLS.Fingerprints()
		a.TLS = &tlsFingerprints{CertificateSHA256: f.Certificate, PairSHA256: f.Pair}
	}
	b, _ := json.Marshal(a) // plain strings and ints: cannot fail
	return string(b)
}

// proxyOf reads the proxy's settings back from its ConfigMap (nil: none): the settings annotation, and the
// client CA and CRL from the files the pods mount, which are what the proxy enforces.
func proxyOf(cm *corev1.ConfigMap) *proxyconf.Settings {
	if cm == nil {
		return nil
	}
	s := parseSettings(cm.Annotations[annotationSettings])
	if s != nil && s.TLS != nil {
		s.TLS.ClientCAPEM, s.TLS.ClientCRLPEM = cm.Data[guest.ClientCAKey], cm.Data[guest.ClientCRLKey]
	}
	return s
}

// parseSettings reads the annotation back. TLS comes back empty but set: Read needs to know the listener
// speaks TLS, never the certificate or key, which the provider keeps in state from the configuration.
// An annotation written before fingerprints (with the PEM in it) parses the same way.
func parseSettings(v string) *proxyconf.Settings {
	if v == "" {
		return nil
	}
	// Settings and the fingerprints that shadow its TLS are read apart: Settings has an UnmarshalJSON of its
	// own (for the one user of earlier versions), which settingsAnnotation would otherwise take over whole.
	var s proxyconf.Settings
	var a struct {
		TLS *tlsFingerprints `json:"TLS"`
	}
	if json.Unmarshal([]byte(v), &s) != nil || json.Unmarshal([]byte(v), &a) != nil {
		return nil
	}
	s.TLS = nil
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
