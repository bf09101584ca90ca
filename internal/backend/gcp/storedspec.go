package gcp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"cloud.google.com/go/compute/apiv1/computepb"

	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// metadataSpec is the metadata key holding what the instance itself cannot tell when read back: the proxy's
// settings without any secret, the image it was made from, and the address it was given. Whoever may read
// the instance may read it, and so may every process on the VM: it holds no password, hash or key.
const metadataSpec = "egress-spec"

type storedSpec struct {
	// Settings are the proxy's settings less its secrets: the username without the password, and no TLS at
	// all (TLS below stands for it).
	Settings          proxyconf.Settings `json:"settings"`
	TLS               *storedTLS         `json:"tls,omitempty"`
	Image             string             `json:"image"`
	StaticEgressIP    bool               `json:"static_egress_ip,omitempty"`
	EgressAddressName string             `json:"egress_address_name,omitempty"`
	// SecretManager says the proxy's secrets are in its Secret Manager secret, not in metadata: set at
	// create for a VM whose service account can read it (usesSecretManager), kept for the VM's life.
	SecretManager bool `json:"secret_manager,omitempty"`
}

// storedTLS tells the TLS settings apart without holding the key. The certificate itself is in its own
// metadata key (gcpguest.MetadataTLSCert); Fingerprint covers certificate and key together, so that a new
// key under the same certificate is still a change Reconfigure makes. A SHA-256 of a private key tells
// nothing about it: the key is far too large a number to guess and check.
type storedTLS struct {
	CertificateSHA256 string `json:"certificate_sha256"`
	Fingerprint       string `json:"fingerprint"`
	// ClientCASHA256 and ClientCRLSHA256 tell the client CA and CRL apart (empty: none); the files
	// themselves are in their own metadata keys (gcpguest.MetadataClientCA, MetadataClientCRL).
	ClientCASHA256  string `json:"client_ca_sha256,omitempty"`
	ClientCRLSHA256 string `json:"client_crl_sha256,omitempty"`
}

// withSettings returns the spec holding s less its secrets.
func (st storedSpec) withSettings(s proxyconf.Settings) storedSpec {
	st.Settings = s.WithoutSecrets()
	st.TLS = nil
	if s.TLS != nil {
		f := s.TLS.Fingerprints()
		st.TLS = &storedTLS{CertificateSHA256: f.Certificate, Fingerprint: f.Pair,
			ClientCASHA256: sha256Hex(s.TLS.ClientCAPEM), ClientCRLSHA256: sha256Hex(s.TLS.ClientCRLPEM)}
	}
	return st
}

// sha256Hex is the SHA-256 of s in hex, or "" for an empty s.
func sha256Hex(s string) string {
	if s == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// sameTLS reports whether want is the TLS the spec stands for. A spec written by an earlier version of the
// provider held the TLS settings in Settings: it is never the same, so the next change rewrites it without them.
func (st storedSpec) sameTLS(want *proxyconf.TLSSettings) bool {
	switch {
	case st.Settings.TLS != nil:
		return false
	case want == nil || st.TLS == nil:
		return want == nil && st.TLS == nil
	}
	return st.TLS.Fingerprint == want.Fingerprints().Pair && st.TLS.ClientCASHA256 == sha256Hex(want.ClientCAPEM) &&
		st.TLS.ClientCRLSHA256 == sha256Hex(want.ClientCRLPEM)
}

// settings are the proxy's settings as read back: no password, and for TLS only the certificate, taken from
// its own metadata key.
func (st storedSpec) settings(in *computepb.Instance) proxyconf.Settings {
	s := st.Settings
	switch {
	case s.TLS != nil:
		// An earlier version's spec: it held the key, which is never read back.
		s.TLS = &proxyconf.TLSSettings{CertificatePEM: s.TLS.CertificatePEM}
	case st.TLS != nil:
		cert, _ := metadataValue(in, gcpguest.MetadataTLSCert)
		ca, _ := metadataValue(in, gcpguest.MetadataClientCA)
		crl, _ := metadataValue(in, gcpguest.MetadataClientCRL)
		s.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, ClientCAPEM: ca, ClientCRLPEM: crl}
	}
	s.Users = proxyconf.UsernamesOnly(s.Users)
	return s
}

func readStoredSpec(in *computepb.Instance) (storedSpec, bool) {
	v, ok := metadataValue(in, metadataSpec)
	if !ok {
		return storedSpec{}, false
	}
	var s storedSpec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return storedSpec{}, false
	}
	return s, true
}

// jsonOf renders settings canonically: an empty list and a missing one are the same rule.
func jsonOf(s proxyconf.Settings) (string, error) {
	if len(s.AllowedClientCIDRs) == 0 {
		s.AllowedClientCIDRs = nil
	}
	if len(s.AllowedDestinations) == 0 {
		s.AllowedDestinations = nil
	}
	if len(s.AllowedPorts) == 0 {
		s.AllowedPorts = nil
	}
	b, err := json.Marshal(s)
	return string(b), err
}
