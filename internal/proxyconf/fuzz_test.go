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
	// The oracle below says what the lists must mean, in its own terms, without the renderer's helpers.
	wantPorts := map[string]map[int]bool{"connect_ports": {}, "http_ports": {80: true}}
	for _, p := range connect {
		wantPorts["connect_ports"][p], wantPorts["http_ports"][p] = true, true
	}
	checkPortACL(t, "connect_ports", got["connect_ports"], wantPorts["connect_ports"])
	checkPortACL(t, "http_ports", got["http_ports"], wantPorts["http_ports"])
	checkDestinationACL(t, s.AllowedDestinations, got["destinations"])
	checkClientACL(t, s.AllowedClientCIDRs, got["clients"])
	if len(s.AllowedDestinations) > 0 {
		checkRefusedACL(t, s.AllowedPrivateCIDRs, opts, got["refused_destinations"])
	} else if len(got["refused_destinations"]) > 0 {
		t.Fatalf("refused_destinations %q without an allow-list", got["refused_destinations"])
	}
}

// checkPortACL: the acl holds each wanted port once, as a valid port number, and nothing else.
func checkPortACL(t *testing.T, name string, got []string, want map[int]bool) {
	t.Helper()
	seen := map[int]bool{}
	for _, v := range got {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 || seen[n] || !want[n] {
			t.Fatalf("acl %s value %q: not one of %v once", name, v, want)
		}
		seen[n] = true
	}
	if len(seen) != len(want) {
		t.Fatalf("acl %s holds %q, want the ports %v", name, got, want)
	}
}

// squidMatchesName is Squid's dstdomain rule: ".example.com" matches example.com and every name below it,
// "example.com" only itself.
func squidMatchesName(entry, name string) bool {
	if domain, ok := strings.CutPrefix(entry, "."); ok {
		return name == domain || strings.HasSuffix(name, "."+domain)
	}
	return name == entry
}

// checkDestinationACL: the rendered names are the user's own, none covered by another (Squid refuses
// ".a.io" beside "a.io" and warns about "b.a.io"), and they match exactly the names the user's list
// matches, probed at every entry, one name below it and one beside it.
func checkDestinationACL(t *testing.T, user, got []string) {
	t.Helper()
	for i, g := range got {
		if !slices.Contains(user, g) {
			t.Fatalf("destination %q is not one the user gave", g)
		}
		for j, h := range got {
			if i != j && squidMatchesName(h, strings.TrimPrefix(g, ".")) {
				t.Fatalf("destination %q is covered by %q in one acl", g, h)
			}
		}
	}
	matches := func(list []string, name string) bool {
		return slices.ContainsFunc(list, func(e string) bool { return squidMatchesName(e, name) })
	}
	for _, d := range user {
		base := strings.TrimPrefix(d, ".")
		for _, probe := range []string{base, "x." + base, "x" + base, base + ".x"} {
			if matches(user, probe) != matches(got, probe) {
				t.Fatalf("name %q: the user's list %q matches it: %v, the rendered %q: %v", probe, user, matches(user, probe), got, matches(got, probe))
			}
		}
	}
}

// inSquidSpace reports whether prefix p holds address a the way Squid compares them: in one IPv6 space
// where an IPv4 address or range is its IPv4-mapped form.
func inSquidSpace(p netip.Prefix, a netip.Addr) bool {
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	return netip.PrefixFrom(netip.AddrFrom16(p.Addr().As16()), bits).Masked().Contains(netip.AddrFrom16(a.As16()))
}

// probes are addresses at the edges of each prefix and one public address of each family.
func probes(prefixes ...netip.Prefix) []netip.Addr {
	out := []netip.Addr{netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("2001:4860:4860::8888")}
	for _, p := range prefixes {
		p = p.Masked()
		first := p.Addr()
		last := first.As16()
		for bit := p.Bits() + (128 - first.BitLen()); bit < 128; bit++ {
			last[bit/8] |= 1 << (7 - bit%8)
		}
		lastAddr := netip.AddrFrom16(last)
		if first.Is4() {
			lastAddr = lastAddr.Unmap()
		}
		out = append(out, first, lastAddr, first.Prev(), lastAddr.Next())
	}
	return slices.DeleteFunc(out, func(a netip.Addr) bool { return !a.IsValid() })
}

func parsePrefixes(t *testing.T, what string, cidrs []string) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			t.Fatalf("%s value %q: %v", what, c, err)
		}
		out = append(out, p)
	}
	return out
}

// noneNested fails when one range of an acl holds another (Squid ignores it with a warning).
func noneNested(t *testing.T, what string, ps []netip.Prefix) {
	t.Helper()
	for i, p := range ps {
		for j, q := range ps {
			if i != j && squidBits(q) <= squidBits(p) && inSquidSpace(q, p.Addr()) {
				t.Fatalf("%s: %s holds %s in one acl", what, q, p)
			}
		}
	}
}

// squidBits is the prefix length of p in Squid's one IPv6 space.
func squidBits(p netip.Prefix) int {
	if p.Addr().Is4() {
		return p.Bits() + 96
	}
	return p.Bits()
}

// checkClientACL: the rendered client ranges admit exactly the addresses the user's ranges admit, probed at
// the edges of both, and none holds another.
func checkClientACL(t *testing.T, user, got []string) {
	t.Helper()
	u, g := parsePrefixes(t, "client", user), parsePrefixes(t, "client", got)
	noneNested(t, "clients", g)
	admits := func(list []netip.Prefix, a netip.Addr) bool {
		return slices.ContainsFunc(list, func(p netip.Prefix) bool { return inSquidSpace(p, a) })
	}
	for _, a := range probes(append(slices.Clone(u), g...)...) {
		if admits(u, a) != admits(g, a) {
			t.Fatalf("client %s: the user's ranges %q admit it: %v, the rendered %q: %v", a, user, admits(u, a), got, admits(g, a))
		}
	}
}

// checkRefusedACL: every address of the always-refused ranges is refused; every address of a private range is
// refused unless the user allowed a range holding it; the proxy's own listen address is refused; public
// addresses are not. Probed at the edges of all those ranges and of the rendered ones.
func checkRefusedACL(t *testing.T, allowedPrivate []string, opts RenderOptions, got []string) {
	t.Helper()
	g := parsePrefixes(t, "refused destination", got)
	noneNested(t, "refused_destinations", g)
	always := parsePrefixes(t, "always-refused", AlwaysRefusedRanges)
	private := parsePrefixes(t, "private", PrivateRanges)
	allowed := parsePrefixes(t, "allowed private", allowedPrivate)
	in := func(list []netip.Prefix, a netip.Addr) bool {
		return slices.ContainsFunc(list, func(p netip.Prefix) bool { return inSquidSpace(p, a) })
	}
	var all []netip.Prefix
	for _, l := range [][]netip.Prefix{always, private, allowed, g} {
		all = append(all, l...)
	}
	for _, a := range probes(all...) {
		want := in(always, a) || (in(private, a) && !in(allowed, a))
		if opts.ListenAddress.IsValid() && !opts.ListenAddress.IsUnspecified() && a == opts.ListenAddress {
			want = true
		}
		if in(g, a) != want && !slices.Contains(opts.OwnAddresses, a) {
			t.Fatalf("destination %s: refused %v, want %v (allowed private %q, rendered %q)", a, in(g, a), want, allowedPrivate, got)
		}
	}
}

// FuzzRenderSquidConf feeds hostile strings through the validators and every renderer. Whatever the
// validators accept must come out as the intended lines only: squid.conf lines the renderer always writes
// plus the user's values in their own acl lines, a one-line htpasswd of user and bcrypt hash, user-data that
// parses to the expected files, meta-data with exactly its two keys; and the password never in clear.
func FuzzRenderSquidConf(f *testing.F) {
	for _, seed := range fuzzSeeds {
		i := seed.in
		f.Add(i.d1, i.d2, i.cidr, i.port, i.allowedPort, i.user, i.pass, i.n, i.uid, i.host, i.privateCIDR, i.maxConn, i.tlsMode, i.certPEM, i.keyPEM)
	}
	f.Fuzz(func(t *testing.T, d1, d2, cidr string, port, allowedPort int, user, pass string, n uint8, uid, host string,
		privateCIDR string, maxConn int, tlsMode uint8, certPEM, keyPEM string) {
		s := fuzzSettings(d1, d2, cidr, port, allowedPort, user, pass, n, privateCIDR, maxConn, tlsMode, certPEM, keyPEM)
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

// fuzzSeeds start the fuzzer, and run as plain tests under `go test`. The valid ones reach the renderer in
// every mode (TestFuzzSeedsReachEveryMode checks they do); the others are hostile strings validation refuses.
var fuzzSeeds = []struct {
	name  string
	valid bool
	in    fuzzInput
}{
	{"plain with auth and a private range", true, fuzzInput{"api.example.com", ".example.com", "10.0.0.0/8", 3128, 443, "user", "password", uint8(0), "uid-1", "host", "10.1.0.0/16", 0, uint8(0), "", ""}},
	{"tls with a valid pair and auth", true, fuzzInput{"a.example.org", "b.example.org", "192.0.2.0/24", 3131, 8443, "ops", "correct horse battery", uint8(2), "uid-2", "proxy-2", "", 64, uint8(1), "", ""}},
	{"tls pair given as strings", true, fuzzInput{".corp.example", "api.corp.example", "2001:db8::/32", 8080, 0, "", "", uint8(0), "uid-3", "h3", "fd00:1::/48", 1, uint8(2), fuzzCertPEM(), fuzzKeyPEMValue()}},
	{"long lists that wrap", true, fuzzInput{"svc.example.net", ".cdn.example.net", "0.0.0.0/0", 3128, 0, "", "", uint8(200), "uid-4", "h4", "172.16.0.0/12", 16384, uint8(0), "", ""}},
	{"many names, a valid pair, auth", true, fuzzInput{"x.example", "y.example", "10.20.0.0/16", 3130, 65535, "u", "pass-word-123", uint8(40), "uid-5", "h5", "192.168.0.0/16", 8, uint8(1), "", ""}},
	{"injected lines", false, fuzzInput{"a.com\nhttp_access allow all", "a.com http_access", "0.0.0.0/0\nacl", 8080, 0, "u\n", "pass word#x", uint8(3), "a\nb: c", "h", "127.0.0.0/8", -1, uint8(1), "", ""}},
	{"squid words and a broken pem", false, fuzzInput{"acl", "all", "::/0", 1, 65535, "u:x", "p\x00ssword", uint8(200), "x'y", "a.b", "fd00::/8", 16384, uint8(2), "-----BEGIN CERTIFICATE-----\nx\n", "k"}},
	{"comments and escapes", false, fuzzInput{".co", "a.co", "::ffff:10.0.0.0/104", 3129, 80, "#u", "%41%42:x y z", uint8(255), "", "", "10.0.0.0/8\nhttp_access allow all", 1, uint8(1), "", ""}},
	{"out of range numbers", false, fuzzInput{"xn--bcher-kva.example", "1.2.3.4", "10.0.0.1/8", 65536, -1, "u u", strings.Repeat("é", 36), uint8(40), "i", "h-", "192.168.0.0/16", 16385, uint8(0), "", ""}},
}

// fuzzInput is one input of FuzzRenderSquidConf, its arguments in order.
type fuzzInput struct {
	d1, d2, cidr      string
	port, allowedPort int
	user, pass        string
	n                 uint8
	uid, host         string
	privateCIDR       string
	maxConn           int
	tlsMode           uint8
	certPEM, keyPEM   string
}

// fuzzSettings builds the settings a fuzz input stands for.
func fuzzSettings(d1, d2, cidr string, port, allowedPort int, user, pass string, n uint8, privateCIDR string, maxConn int,
	tlsMode uint8, certPEM, keyPEM string) Settings {
	s := Settings{
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
	return s
}

// The seeds marked valid pass validation, and between them render TLS, auth, private ranges and acl lines
// long enough to wrap: a plain `go test` reaches every part of the renderer through the fuzz target.
func TestFuzzSeedsReachEveryMode(t *testing.T) {
	t.Parallel()
	reached := map[string]bool{}
	for _, seed := range fuzzSeeds {
		i := seed.in
		s := fuzzSettings(i.d1, i.d2, i.cidr, i.port, i.allowedPort, i.user, i.pass, i.n, i.privateCIDR, i.maxConn, i.tlsMode, i.certPEM, i.keyPEM)
		err := s.Validate()
		if seed.valid != (err == nil) {
			t.Errorf("seed %q: validation says %v, the seed is marked valid=%v", seed.name, err, seed.valid)
			continue
		}
		if !seed.valid {
			continue
		}
		conf, err := RenderSquidConf(s, RenderOptions{OwnAddressesFile: OwnAddressesPath})
		if err != nil {
			t.Fatalf("seed %q: %v", seed.name, err)
		}
		reached["tls"] = reached["tls"] || s.TLS != nil
		reached["auth"] = reached["auth"] || s.Auth != nil
		reached["private ranges"] = reached["private ranges"] || len(s.AllowedPrivateCIDRs) > 0
		reached["wrapped lines"] = reached["wrapped lines"] || strings.Count(string(conf), "acl destinations ") > 1
	}
	for _, mode := range []string{"tls", "auth", "private ranges", "wrapped lines"} {
		if !reached[mode] {
			t.Errorf("no valid seed renders %s", mode)
		}
	}
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
