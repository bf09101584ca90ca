package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// The data-plane benchmark (scripts/bench-dataplane.sh) runs this project's squid.conf as rendered for a
// user, in two sizes: the small one a team starts with, and the large one of a proxy shared by many teams,
// with everything that makes Squid look more up per request: the longest lists a proxy takes, split between
// its own allow-list and rule sets, and a login.
const (
	smallDestinations = 10
	largeDestinations = proxyconf.MaxAllowedDestinations
	largeClientRanges = proxyconf.MaxAllowedClientCIDRs
	// largeRuleSets share half the large size's destinations and client ranges; the benchmark's client is
	// in the last, so that Squid checks every rule set before the one that decides.
	largeRuleSets = 10
	// benchUser logs in to the large configuration; its password is made anew for each run.
	benchUser = "bench"
)

// Variants of the large size, for the pods leg's measure of what each part costs (bench-dataplane-k8s.sh):
// large-noauth is it without the login (podLoginAndTLS), large-norules with its rule sets' destinations in the
// proxy's own allow-list and no rule set (its clients are admitted by the allow-list already).
const (
	variantNoAuth  = "large-noauth"
	variantNoRules = "large-norules"
)

// renderedSettings are the settings of one size (or a variant of the large one), allowing origin (a host name)
// to client (the benchmark client's range) among the others.
func renderedSettings(size, origin string, client netip.Prefix, port int) (proxyconf.Settings, error) {
	switch size {
	case variantNoAuth:
		return renderedSettings("large", origin, client, port)
	case variantNoRules:
		s, err := renderedSettings("large", origin, client, port)
		for _, r := range s.RuleSets {
			s.AllowedDestinations = append(s.AllowedDestinations, r.Destinations...)
		}
		s.RuleSets = nil
		return s, err
	}
	s := proxyconf.Settings{Port: port}
	// Other destinations, half exact names and half domains with their subdomains, as allow-lists mix them.
	n := 0
	others := func(count int) []string {
		var out []string
		for range count {
			if n%2 == 0 {
				out = append(out, fmt.Sprintf("api%d.service%d.example", n, n))
			} else {
				out = append(out, fmt.Sprintf(".service%d.example", n))
			}
			n++
		}
		return out
	}
	// Other clients' ranges: /24s of 10.0.0.0/8, which the benchmark's client is not in.
	otherClient := func(i int) string { return fmt.Sprintf("10.%d.%d.0/24", i/256, i%256) }
	switch size {
	case "small":
		s.AllowedDestinations = append(others(smallDestinations-1), origin)
		s.AllowedClientCIDRs = []string{client.String()}
	case "large":
		// Half the ranges admit clients (allowed_client_cidrs), the other half names them again in the rule
		// sets, which take half the destinations; the lists count together against the limits.
		admitted := largeClientRanges / 2
		for i := range admitted - 1 {
			s.AllowedClientCIDRs = append(s.AllowedClientCIDRs, otherClient(i))
		}
		s.AllowedClientCIDRs = append(s.AllowedClientCIDRs, client.String())
		s.AllowedDestinations = others(largeDestinations / 2)
		perSet := (largeDestinations - len(s.AllowedDestinations)) / largeRuleSets
		for k := range largeRuleSets {
			r := proxyconf.RuleSet{Name: fmt.Sprintf("team-%d", k), Mode: proxyconf.RuleSetEnforce}
			for j := range admitted / largeRuleSets {
				i := k*(admitted/largeRuleSets) + j
				if i < admitted-1 {
					r.Clients.SourceCIDRs = append(r.Clients.SourceCIDRs, otherClient(i))
				}
			}
			r.Destinations = others(perSet)
			if k == largeRuleSets-1 {
				r.Clients.SourceCIDRs = append(r.Clients.SourceCIDRs, client.String())
				r.Destinations = append(others(perSet-1), origin)
			}
			s.RuleSets = append(s.RuleSets, r)
		}
	default:
		return s, fmt.Errorf("%w: size is small or large, not %q", errUsage, size)
	}
	return s, nil
}

// runDataplaneRender writes, in DIR, the squid.conf this project renders for one size of the benchmark, with
// its files: passwd (the large size logs in) and, with -tls, the proxy's certificate and key and ca.pem, the
// CA that signed it, for the clients. client-auth holds the login as a Proxy-Authorization value (empty when
// there is none), for the load generators; it is a throwaway password, made for this run.
func runDataplaneRender(_ context.Context, args []string, _ io.Reader, _ io.Writer) error {
	fs := newFlagSet("dataplane-render")
	size := fs.String("size", "", "small or large")
	useTLS := fs.Bool("tls", false, "TLS on the proxy port")
	dir := fs.String("dir", "", "where the files go")
	listen := fs.String("listen", "", "the address Squid listens on")
	port := fs.Int("port", proxyconf.DefaultPort, "the proxy port")
	health := fs.Int("health-port", proxyconf.DefaultHealthPort, "the health port")
	origin := fs.String("origin", "", "the origin's host name, which the allow-list names")
	hosts := fs.String("hosts", "", "the hosts file Squid resolves the origin with")
	client := fs.String("client", "", "the benchmark client's range")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 || *dir == "" || *listen == "" || *origin == "" || *client == "" {
		return fmt.Errorf("%w: dataplane-render takes -size, -dir, -listen, -origin and -client", errUsage)
	}
	addr, err := netip.ParseAddr(*listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	clientRange, err := netip.ParsePrefix(*client)
	if err != nil {
		return fmt.Errorf("-client: %w", err)
	}
	s, err := renderedSettings(*size, *origin, clientRange, *port)
	if err != nil {
		return err
	}
	opts := proxyconf.RenderOptions{
		ListenAddress: addr,
		HealthPort:    *health,
		HtpasswdPath:  filepath.Join(*dir, "passwd"),
		PidFile:       "none",
		AccessLog:     "stdio:" + filepath.Join(*dir, "access.log"),
		CacheLog:      filepath.Join(*dir, "cache.log"),
		CoredumpDir:   *dir,
		HostsFile:     *hosts,
		TLSCertPath:   filepath.Join(*dir, "proxy.crt"),
		TLSKeyPath:    filepath.Join(*dir, "proxy.key"),
	}
	auth := ""
	if *size == "large" {
		password, err := randomText(16)
		if err != nil {
			return err
		}
		s.Users = []proxyconf.BasicAuth{{Username: benchUser, Password: password}}
		passwd, err := proxyconf.RenderHtpasswd(s.Users)
		if err != nil {
			return err
		}
		// Squid's helper reads it after Squid dropped to its own user; the password is this run's alone.
		if err := writeFiles(*dir, map[string][]byte{"passwd": passwd}, 0o644); err != nil {
			return err
		}
		auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(benchUser+":"+password))
	}
	if *useTLS {
		ca, cert, key, err := proxyCertificate(addr)
		if err != nil {
			return err
		}
		s.TLS = &proxyconf.TLSSettings{CertificatePEM: string(cert), PrivateKeyPEM: string(key)}
		// Squid reads its key as root before it drops to its user, as on a VM (root:proxy 0640 there).
		if err := writeFiles(*dir, map[string][]byte{"proxy.crt": cert, "ca.pem": ca}, 0o644); err != nil {
			return err
		}
		if err := writeFiles(*dir, map[string][]byte{"proxy.key": key}, 0o600); err != nil {
			return err
		}
	}
	if opts.OwnAddressesFile, err = writeOwnAddresses(*dir, addr); err != nil {
		return err
	}
	conf, err := proxyconf.RenderSquidConf(s, opts)
	if err != nil {
		return err
	}
	if err := writeFiles(*dir, map[string][]byte{"squid.conf": conf}, 0o644); err != nil {
		return err
	}
	return writeFiles(*dir, map[string][]byte{"client-auth": []byte(auth)}, 0o600)
}

// writeOwnAddresses writes the file of the guard every backend renders (a VM's prestart, a pod's init
// container write it): no request to the proxy's own addresses, which Squid checks on the resolved addresses of
// every allowed destination (a dst ACL). Here the namespace's one address. It returns the file's path.
func writeOwnAddresses(dir string, addr netip.Addr) (string, error) {
	return filepath.Join(dir, "own-addresses"), writeFiles(dir, map[string][]byte{"own-addresses": []byte(addr.String() + "\n")}, 0o644)
}

func writeFiles(dir string, files map[string][]byte, mode os.FileMode) error {
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), content, mode); err != nil {
			return err
		}
	}
	return nil
}

func randomText(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// proxyCertificate makes a CA and a certificate for the proxy's address (when valid) and dnsNames signed by
// it, both ECDSA P-256, the key type most certificates are issued with today: the TLS figures are those of
// such a certificate (an RSA key costs the proxy more per handshake). A pod's address is known only once it
// runs, after its certificate is made, so the pods' benchmark names its proxy instead. It returns the CA's and
// the proxy's certificates and the proxy's key, PEM.
func proxyCertificate(addr netip.Addr, dnsNames ...string) (caPEM, certPEM, keyPEM []byte, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egress data-plane benchmark CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		NotBefore:    now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: dnsNames,
	}
	if addr.IsValid() {
		tmpl.Subject.CommonName = addr.String()
		tmpl.IPAddresses = []net.IP{net.IP(addr.AsSlice())}
	} else if len(dnsNames) > 0 {
		tmpl.Subject.CommonName = dnsNames[0]
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}
