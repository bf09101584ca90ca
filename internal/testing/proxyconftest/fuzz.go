package proxyconftest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// FuzzSeed is one seed of the renderers' fuzz targets, proxyconf's FuzzRenderSquidConf and the kvm guest's
// FuzzRenderUserData, which take the same arguments.
type FuzzSeed struct {
	Name  string
	Valid bool // whether its settings pass validation
	In    FuzzInput
}

// FuzzInput is one input of the fuzz targets, their arguments in order.
type FuzzInput struct {
	D1, D2, CIDR      string
	Port, AllowedPort int
	User, Pass        string
	N                 uint8
	UID, Host         string
	PrivateCIDR       string
	MaxConn           int
	TLSMode           uint8
	CertPEM, KeyPEM   string
}

// Settings are the settings i stands for.
func (i FuzzInput) Settings() proxyconf.Settings {
	return FuzzSettings(i.D1, i.D2, i.CIDR, i.Port, i.AllowedPort, i.User, i.Pass, i.N, i.PrivateCIDR, i.MaxConn, i.TLSMode, i.CertPEM, i.KeyPEM)
}

// FuzzSeeds start the fuzzers, and run as plain tests under `go test`. The valid ones reach the renderer in
// every mode (proxyconf's TestFuzzSeedsReachEveryMode checks they do); the others are hostile strings
// validation refuses.
var FuzzSeeds = []FuzzSeed{
	{"plain with auth and a private range", true, FuzzInput{"api.example.com", ".example.com", "10.0.0.0/8", 3128, 443, "user", "password", uint8(0), "uid-1", "host", "10.1.0.0/16", 0, uint8(0), "", ""}},
	{"tls with a valid pair and auth", true, FuzzInput{"a.example.org", "b.example.org", "192.0.2.0/24", 3131, 8443, "ops", "correct horse battery", uint8(2), "uid-2", "proxy-2", "", 64, uint8(1), "", ""}},
	{"tls pair given as strings", true, FuzzInput{".corp.example", "api.corp.example", "2001:db8::/32", 8080, 0, "", "", uint8(0), "uid-3", "h3", "fd00:1::/48", 1, uint8(2), tlsCertPEM(), tlsKeyPEM()}},
	{"long lists that wrap", true, FuzzInput{"svc.example.net", ".cdn.example.net", "0.0.0.0/0", 3128, 0, "", "", uint8(200), "uid-4", "h4", "172.16.0.0/12", 16384, uint8(0), "", ""}},
	{"many names, a valid pair, auth", true, FuzzInput{"x.example", "y.example", "10.20.0.0/16", 3130, 65535, "u", "pass-word-123", uint8(40), "uid-5", "h5", "192.168.0.0/16", 8, uint8(1), "", ""}},
	{"injected lines", false, FuzzInput{"a.com\nhttp_access allow all", "a.com http_access", "0.0.0.0/0\nacl", 8080, 0, "u\n", "pass word#x", uint8(3), "a\nb: c", "h", "127.0.0.0/8", -1, uint8(1), "", ""}},
	{"squid words and a broken pem", false, FuzzInput{"acl", "all", "::/0", 1, 65535, "u:x", "p\x00ssword", uint8(200), "x'y", "a.b", "fd00::/8", 16384, uint8(2), "-----BEGIN CERTIFICATE-----\nx\n", "k"}},
	{"comments and escapes", false, FuzzInput{".co", "a.co", "::ffff:10.0.0.0/104", 3129, 80, "#u", "%41%42:x y z", uint8(255), "", "", "10.0.0.0/8\nhttp_access allow all", 1, uint8(1), "", ""}},
	{"out of range numbers", false, FuzzInput{"xn--bcher-kva.example", "1.2.3.4", "10.0.0.1/8", 65536, -1, "u u", strings.Repeat("é", 36), uint8(40), "i", "h-", "192.168.0.0/16", 16385, uint8(0), "", ""}},
}

// FuzzSettings builds the settings a fuzz input stands for.
func FuzzSettings(d1, d2, cidr string, port, allowedPort int, user, pass string, n uint8, privateCIDR string, maxConn int,
	tlsMode uint8, certPEM, keyPEM string) proxyconf.Settings {
	s := proxyconf.Settings{
		Port:                    port,
		AllowedClientCIDRs:      []string{cidr},
		AllowedDestinations:     []string{d1, d2},
		MaxConnectionsPerClient: maxConn,
	}
	if privateCIDR != "" {
		s.AllowedPrivateCIDRs = []string{privateCIDR}
	}
	// 1: a valid key pair; 2: whatever the fuzzer made of one.
	switch tlsMode % 3 {
	case 1:
		c, k := TLSPair()
		s.TLS = &proxyconf.TLSSettings{CertificatePEM: c, PrivateKeyPEM: k}
	case 2:
		s.TLS = &proxyconf.TLSSettings{CertificatePEM: certPEM, PrivateKeyPEM: keyPEM}
	}
	// Many generated names make the acl lines long enough to wrap.
	for i := range int(n) {
		s.AllowedDestinations = append(s.AllowedDestinations, fmt.Sprintf("d%d.%s", i, strings.TrimPrefix(d1, ".")))
	}
	if allowedPort != 0 {
		s.AllowedPorts = []int{allowedPort}
	}
	if user != "" {
		s.Users = []proxyconf.BasicAuth{{Username: user, Password: pass}}
	}
	return s
}

var (
	tlsOnce         sync.Once
	tlsCert, tlsKey string
)

func tlsCertPEM() string { c, _ := TLSPair(); return c }
func tlsKeyPEM() string  { _, k := TLSPair(); return k }

// TLSPair is one valid self-signed certificate for proxy.test and its key, made once: the fuzz targets need a
// pair that passes validation, and making one per input would be most of the fuzzing time.
func TLSPair() (certPEM, keyPEM string) {
	tlsOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"proxy.test"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			panic(err)
		}
		kder, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			panic(err)
		}
		tlsCert = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
		tlsKey = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
	})
	return tlsCert, tlsKey
}
