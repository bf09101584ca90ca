package proxyconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"gopkg.in/yaml.v3"
)

// listACLs are the acl lines whose values come from the user; every other directive line must be one the
// renderer writes for any settings (checked against fixedLines).
var listACLs = map[string]string{
	"destinations":         "dstdomain -n",
	"clients":              "src",
	"connect_ports":        "port",
	"http_ports":           "port",
	"refused_destinations": "dst",
}

// fixedLines are every line but the user's list values that the renderer can write with this port, limit and
// timeouts and these options, collected from settings that switch every optional part on and off.
func fixedLines(user Settings, opts RenderOptions) map[string]bool {
	lines := map[string]bool{}
	cert, key := fuzzTLSPair()
	for _, s := range []Settings{
		{},
		{AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"a.io"}, Auth: &BasicAuth{Username: "u", Password: "password"}},
		{TLS: &TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key}},
	} {
		s.Port, s.MaxConnectionsPerClient, s.Timeouts = user.Port, user.MaxConnectionsPerClient, user.Timeouts
		conf, err := RenderSquidConf(s, opts)
		if err != nil {
			panic(err)
		}
		for _, l := range strings.Split(string(conf), "\n") {
			if f := strings.Fields(l); len(f) < 2 || f[0] != "acl" || listACLs[f[1]] == "" {
				lines[l] = true
			}
		}
	}
	return lines
}

// checkSquidConf fails unless conf consists only of the renderer's fixed lines and acl lines carrying the
// user's values, each value exactly once where it belongs.
func checkSquidConf(t *testing.T, s Settings, opts RenderOptions, conf []byte) {
	t.Helper()
	fixed := fixedLines(s, opts)
	got := map[string][]string{}
	for i, l := range strings.Split(strings.TrimSuffix(string(conf), "\n"), "\n") {
		if len(l) > maxLineLen+260 {
			t.Fatalf("line %d is %d bytes, Squid would split it", i+1, len(l))
		}
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "acl" && listACLs[f[1]] != "" {
			head := "acl " + f[1] + " " + listACLs[f[1]] + " "
			if !strings.HasPrefix(l, head) {
				t.Fatalf("line %d: %q is not %q", i+1, l, head)
			}
			got[f[1]] = append(got[f[1]], strings.Fields(strings.TrimPrefix(l, head))...)
			continue
		}
		if !fixed[l] {
			t.Fatalf("line %d: %q is not a line the renderer writes", i+1, l)
		}
	}
	connect := s.AllowedPorts
	if len(connect) == 0 {
		connect = DefaultConnectPorts
	}
	want := map[string][]string{
		"destinations":  collapseDestinations(s.AllowedDestinations),
		"clients":       squidClientPrefixes(s.AllowedClientCIDRs),
		"connect_ports": portList(connect),
		"http_ports":    portList(append([]int{80}, connect...)),
	}
	if len(s.AllowedDestinations) > 0 {
		want["refused_destinations"] = refusedDestinations(s.AllowedPrivateCIDRs, append([]netip.Addr{opts.ListenAddress}, opts.OwnAddresses...), false)
	}
	for name, w := range want {
		g := slices.Clone(got[name])
		slices.Sort(g)
		w = slices.Clone(w)
		slices.Sort(w)
		if !slices.Equal(g, w) {
			t.Fatalf("acl %s holds %q, want %q", name, g, w)
		}
	}
	for _, d := range got["destinations"] {
		if ValidateDestination(d) != nil {
			t.Fatalf("destination value %q was never valid", d)
		}
	}
	for _, c := range append(got["clients"], got["refused_destinations"]...) {
		if _, err := netip.ParsePrefix(c); err != nil {
			t.Fatalf("client value %q: %v", c, err)
		}
	}
	for _, p := range append(got["connect_ports"], got["http_ports"]...) {
		if n, err := strconv.Atoi(p); err != nil || ValidatePort(n) != nil {
			t.Fatalf("port value %q", p)
		}
	}
}

// FuzzRenderSquidConf feeds hostile strings through the validators and every renderer. Whatever the
// validators accept must come out as the intended lines only: squid.conf lines the renderer always writes
// plus the user's values in their own acl lines, a one-line htpasswd of user and bcrypt hash, user-data that
// parses to the expected files, meta-data with exactly its two keys; and the password never in clear.
func FuzzRenderSquidConf(f *testing.F) {
	f.Add("api.example.com", ".example.com", "10.0.0.0/8", 3128, 443, "user", "password", uint8(0), "uid-1", "host", "10.1.0.0/16", 0, uint8(0), "", "")
	f.Add("a.com\nhttp_access allow all", "a.com http_access", "0.0.0.0/0\nacl", 8080, 0, "u\n", "pass word#x", uint8(3), "a\nb: c", "h", "127.0.0.0/8", -1, uint8(1), "", "")
	f.Add("acl", "all", "::/0", 1, 65535, "u:x", "p\x00ssword", uint8(200), "x'y", "a.b", "fd00::/8", 16384, uint8(2), "-----BEGIN CERTIFICATE-----\nx\n", "k")
	f.Add(".co", "a.co", "::ffff:10.0.0.0/104", 3129, 80, "#u", "%41%42:x y z", uint8(255), "", "", "10.0.0.0/8\nhttp_access allow all", 1, uint8(1), "", "")
	f.Add("xn--bcher-kva.example", "1.2.3.4", "10.0.0.1/8", 65536, -1, "u u", strings.Repeat("é", 36), uint8(40), "i", "h-", "192.168.0.0/16", 16385, uint8(0), "", "")
	f.Fuzz(func(t *testing.T, d1, d2, cidr string, port, allowedPort int, user, pass string, n uint8, uid, host string,
		privateCIDR string, maxConn int, tlsMode uint8, certPEM, keyPEM string) {
		s := Settings{
			Port:                    port,
			AllowedClientCIDRs:      []string{cidr},
			AllowedDestinations:     []string{d1, d2},
			AllowedPrivateCIDRs:     []string{privateCIDR},
			MaxConnectionsPerClient: maxConn,
		}
		// 1: a valid key pair; 2: whatever the fuzzer made of one.
		switch tlsMode % 3 {
		case 1:
			c, k := fuzzTLSPair()
			s.TLS = &TLSSettings{CertificatePEM: c, PrivateKeyPEM: k}
		case 2:
			s.TLS = &TLSSettings{CertificatePEM: certPEM, PrivateKeyPEM: keyPEM}
		}
		// Many generated names make the acl lines long enough to wrap.
		for i := range int(n) {
			s.AllowedDestinations = append(s.AllowedDestinations, fmt.Sprintf("d%d.%s", i, strings.TrimPrefix(d1, ".")))
		}
		if allowedPort != 0 {
			s.AllowedPorts = []int{allowedPort}
		}
		if user != "" {
			s.Auth = &BasicAuth{Username: user, Password: pass}
		}
		// The VM form, as RenderUserData renders it.
		opts := RenderOptions{OwnAddressesFile: OwnAddressesPath}
		conf, err := RenderSquidConf(s, opts)
		if s.Validate() != nil {
			if err == nil {
				t.Fatal("rendered settings that fail validation")
			}
			return
		}
		if err != nil {
			t.Fatalf("valid settings did not render: %v", err)
		}
		checkSquidConf(t, s, opts, conf)

		ud, err := RenderUserData(s, opts)
		if err != nil {
			t.Fatalf("user-data: %v", err)
		}
		_, files := parseUserData(t, ud)
		if string(files[ConfPath]) != string(conf) {
			t.Fatal("user-data carries another squid.conf")
		}
		if s.TLS != nil && (string(files[TLSCertPath]) != s.TLS.CertificatePEM || string(files[TLSKeyPath]) != s.TLS.PrivateKeyPEM) {
			t.Fatal("user-data carries another TLS certificate or key")
		}
		if s.TLS == nil && (files[TLSCertPath] != nil || files[TLSKeyPath] != nil) {
			t.Fatal("user-data carries TLS files without TLS")
		}
		if s.Auth != nil {
			if strings.Contains(string(ud), pass) && !strings.Contains(string(conf), pass) {
				t.Fatal("user-data holds the password in clear")
			}
			htpasswd := string(files[HtpasswdPath])
			line, ok := strings.CutSuffix(htpasswd, "\n")
			u, hash, _ := strings.Cut(line, ":")
			if !ok || strings.Contains(line, "\n") || u != user || bcrypt.CompareHashAndPassword([]byte(hash), []byte(pass)) != nil {
				t.Fatalf("htpasswd %q is not one line of the user and the password's hash", htpasswd)
			}
		}

		if md, err := RenderMetaData(uid, host); err == nil {
			var m map[string]string
			if err := yaml.Unmarshal(md, &m); err != nil || len(m) != 2 || m["instance-id"] != uid || m["local-hostname"] != host {
				t.Fatalf("meta-data %q reads back as %v (%v)", md, m, err)
			}
		}
	})
}

var (
	fuzzTLSOnce          sync.Once
	fuzzCert, fuzzKeyPEM string
)

func fuzzCertPEM() string     { c, _ := fuzzTLSPair(); return c }
func fuzzKeyPEMValue() string { _, k := fuzzTLSPair(); return k }

// fuzzTLSPair is one valid self-signed certificate and key, made once: the fuzz target needs a pair that
// passes validation, and making one per input would be most of the fuzzing time.
func fuzzTLSPair() (certPEM, keyPEM string) {
	fuzzTLSOnce.Do(func() {
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
		fuzzCert = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
		fuzzKeyPEM = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
	})
	return fuzzCert, fuzzKeyPEM
}
