package proxyconf

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
)

// ValidateClientCA reports why caPEM and crlPEM cannot make the proxy's TLS listener verify client
// certificates, or nil. caPEM is one or more PEM certificates, each a CA (basic constraints CA:TRUE, and
// keyCertSign where key usage is given): OpenSSL, under Squid, refuses a chain through anything else, so a
// leaf given by mistake would make every client fail its handshake. crlPEM, optional, is one or more PEM CRLs,
// each signed by one of those CAs: Squid checks revocation of every client certificate against them
// (crlfile= implies VERIFY_CRL), and OpenSSL fails a handshake whose issuer's CRL it lacks or cannot verify, so a
// CRL of another CA would refuse every client. Once a CRL is given, every CA here that issues client
// certificates needs its own CRL here too: seen with Squid 5.7, a client of a second CA without one fails its
// handshake ("unknown certificate authority"). That is not refused here, because a root given beside the
// intermediate that issues the client certificates needs none: only the client's own certificate is checked
// against a CRL. (The issuing intermediate alone is enough as the client CA: seen with Squid 5.7, its clients
// are accepted.) Neither is a secret.
func ValidateClientCA(caPEM, crlPEM string) error {
	if caPEM == "" {
		if crlPEM != "" {
			return fmt.Errorf("a client CRL needs the client CA that signed it: set the client CA too, or remove the CRL")
		}
		return nil
	}
	if len(caPEM) > MaxPEMBytes || len(crlPEM) > MaxPEMBytes {
		return fmt.Errorf("the client CA and the client CRL must each be at most %d bytes of PEM", MaxPEMBytes)
	}
	cas, err := pemBlocks(caPEM, "client CA", "CERTIFICATE")
	if err != nil {
		return err
	}
	var certs []*x509.Certificate
	for i, b := range cas {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return fmt.Errorf("client CA, certificate %d: %w", i+1, err)
		}
		if !c.BasicConstraintsValid || !c.IsCA {
			return fmt.Errorf("client CA, certificate %d (%q) is not a CA certificate (its basic constraints lack CA:TRUE): give the CA that issues the client certificates, not a client certificate", i+1, c.Subject.CommonName)
		}
		if c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageCertSign == 0 {
			return fmt.Errorf("client CA, certificate %d (%q) may not sign certificates (its key usage lacks keyCertSign): give the CA that issues the client certificates", i+1, c.Subject.CommonName)
		}
		certs = append(certs, c)
	}
	if crlPEM == "" {
		return nil
	}
	crls, err := pemBlocks(crlPEM, "client CRL", "X509 CRL")
	if err != nil {
		return err
	}
	for i, b := range crls {
		crl, err := x509.ParseRevocationList(b)
		if err != nil {
			return fmt.Errorf("client CRL %d: %w", i+1, err)
		}
		signed := false
		for _, c := range certs {
			if crl.CheckSignatureFrom(c) == nil {
				signed = true
				break
			}
		}
		if !signed {
			return fmt.Errorf("client CRL %d (issuer %q) is not signed by a certificate of the client CA: give the CRL the client CA issued, or add its CA", i+1, crl.Issuer.String())
		}
	}
	return nil
}

// pemBlocks are the DER contents of the PEM blocks in text, each of type typ; what names the value in errors.
func pemBlocks(text, what, typ string) ([][]byte, error) {
	var out [][]byte
	for rest := []byte(text); ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			if strings.TrimSpace(string(rest)) != "" {
				return nil, fmt.Errorf("the %s holds something other than PEM blocks", what)
			}
			break
		}
		if b.Type != typ {
			return nil, fmt.Errorf("the %s holds a %q block: only %q blocks belong there", what, b.Type, typ)
		}
		out = append(out, b.Bytes)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the %s holds no PEM %q block", what, typ)
	}
	return out, nil
}
