package proxyconf

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

func TestValidators(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 63)
	tests := map[string]struct {
		validate func(string) error
		valid    []string
		invalid  []string
	}{
		"destination": {
			validate: ValidateDestination,
			valid: []string{
				"example.com", ".example.com", "a-b.c0", "localhost", "xn--bcher-kva.example", "1.example.com", long + ".io",
				// Hex-looking labels that are not the last, or not hex numbers: names, not addresses.
				"0x7f.example.com", "0x7f000001.example", "a.0xg", "a.0x7fz", "a.x7f", "a.00x1",
			},
			invalid: []string{
				"", ".", "..a", "a..b", "a.", ".a.", "-a.com", "a-.com", "A.com", "a_b.com", "*.example.com", "a.com:443",
				"a.com/path", "a com", "a.com\n", "a.com#", "a.com\"", "a\\.com", "a.com;", "1.2.3.4", ".0.1", "10", "::1", "[::1]",
				long + "a.io", strings.Repeat(long+".", 4) + "io", "é.com", "a.com\x00",
				// A last label in hex or octal: resolvers and browsers read the name as an IPv4 address.
				"0x7f000001", "1.0x7f", "127.0x1", "0177.0.0.1", "017700000001", "a.0x", "a.0xff", ".0x7f", "www.example.0x1f",
			},
		},
		"client CIDR": {
			validate: ValidateClientCIDR,
			valid:    []string{"10.0.0.0/8", "0.0.0.0/0", "192.168.1.7/32", "::/0", "2001:db8::/32", "fe80::/10"},
			invalid:  []string{"", "10.0.0.1/8", "10.0.0.0", "10.0.0.0/33", "all", "10.0.0.0/8 ", "10.0.0.0/8\n", "::ffff:10.0.0.0/104", "fe80::1%eth0/128", "010.0.0.0/8"},
		},
		"username": {
			validate: ValidateUsername,
			valid:    []string{"a", "Egress.User_1-x", strings.Repeat("u", 64)},
			invalid:  []string{"", "-a", ".a", "a:b", "a b", "a\nb", "a#b", "a%41", strings.Repeat("u", 65), "é"},
		},
		"allowed private CIDR": {
			validate: ValidateAllowedPrivateCIDR,
			valid:    []string{"10.0.0.0/8", "10.1.2.3/32", "172.16.0.0/12", "172.31.0.0/16", "192.168.0.0/16", "100.64.0.0/10", "100.127.0.0/16", "fc00::/7", "fd00::/8", "fd12:3456::/32"},
			invalid: []string{
				"", "10.0.0.1/8", "0.0.0.0/0", "10.0.0.0/7", "172.32.0.0/16", "127.0.0.0/8", "169.254.169.254/32", "100.128.0.0/16",
				"8.8.8.8/32", "::/0", "::1/128", "fe80::/10", "2001:db8::/32", "fc00::/6", "::ffff:10.0.0.0/104",
			},
		},
		"password": {
			validate: ValidatePassword,
			valid:    []string{"password", "pass word:#%\"'\\", strings.Repeat("x", 72), "pässwört"},
			invalid:  []string{"", "short", strings.Repeat("x", 73), "pass\nword", "pass\tword", "password\x7f", "password\x00"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, v := range tc.valid {
				if err := tc.validate(v); err != nil {
					t.Errorf("%q: %v, want valid", v, err)
				}
			}
			for _, v := range tc.invalid {
				if tc.validate(v) == nil {
					t.Errorf("%q: valid, want an error", v)
				}
			}
		})
	}
}

// TestValidateDestinationNumericLastLabel: a name whose last label is a number is refused with a message that
// says which kind of number and why it matters.
func TestValidateDestinationNumericLastLabel(t *testing.T) {
	t.Parallel()
	tests := map[string]struct{ dest, want string }{
		"hex, one label":       {"0x7f000001", `its last label "0x7f000001" is a hexadecimal number`},
		"hex last label":       {"1.0x7f", `its last label "0x7f" is a hexadecimal number`},
		"hex, no digits":       {"a.0x", `its last label "0x" is a hexadecimal number`},
		"hex suffix domain":    {".example.0x1f", `its last label "0x1f" is a hexadecimal number`},
		"octal dotted":         {"0177.0.0.1", `its last label "1" is a decimal or octal number`},
		"octal, one label":     {"017700000001", `its last label "017700000001" is a decimal or octal number`},
		"decimal, one label":   {"2130706433", `its last label "2130706433" is a decimal or octal number`},
		"decimal dotted quad":  {"10.0.0.1", `its last label "1" is a decimal or octal number`},
		"decimal suffix range": {".0.1", `its last label "1" is a decimal or octal number`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := ValidateDestination(tc.dest)
			if err == nil {
				t.Fatalf("%q: valid, want an error", tc.dest)
			}
			for _, want := range []string{"must be a host name, not an IP address", tc.want, "read as an IPv4 address"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q: %v\nwant it to say %q", tc.dest, err, want)
				}
			}
		})
	}
}

func TestSettingsValidate(t *testing.T) {
	t.Parallel()
	many := func(n int, v string) []string { return strings.Split(strings.Repeat(v+",", n-1)+v, ",") }
	invalid := map[string]Settings{
		"port 0":                   {Port: 0},
		"port too high":            {Port: 65536},
		"health port":              {Port: DefaultHealthPort},
		"bad allowed port":         {Port: 3128, AllowedPorts: []int{0}},
		"bad destination":          {Port: 3128, AllowedDestinations: []string{"a b"}},
		"bad client":               {Port: 3128, AllowedClientCIDRs: []string{"10.0.0.1/8"}},
		"bad user":                 {Port: 3128, Users: []BasicAuth{{Username: "a b", Password: "password"}}},
		"bad password":             {Port: 3128, Users: []BasicAuth{{Username: "a", Password: "x"}}},
		"second user's password":   {Port: 3128, Users: []BasicAuth{{Username: "a", Password: "password"}, {Username: "b", Password: "x"}}},
		"same user twice":          {Port: 3128, Users: []BasicAuth{{Username: "a", Password: "password"}, {Username: "a", Password: "another-password"}}},
		"too many users":           {Port: 3128, Users: manyUsers(MaxUsers + 1)},
		"too many destinations":    {Port: 3128, AllowedDestinations: many(MaxAllowedDestinations+1, "a.io")},
		"too many client CIDRs":    {Port: 3128, AllowedClientCIDRs: many(MaxAllowedClientCIDRs+1, "10.0.0.0/8")},
		"too many ports":           {Port: 3128, AllowedPorts: manyPorts(MaxAllowedPorts + 1)},
		"second destination wrong": {Port: 3128, AllowedDestinations: []string{"a.io", "b.io\nx"}},
		"public range allowed":     {Port: 3128, AllowedPrivateCIDRs: []string{"8.8.8.0/24"}},
		"loopback allowed":         {Port: 3128, AllowedPrivateCIDRs: []string{"127.0.0.0/8"}},
		"too many private CIDRs":   {Port: 3128, AllowedPrivateCIDRs: many(MaxAllowedPrivateCIDRs+1, "10.0.0.0/8")},
		"negative max connections": {Port: 3128, MaxConnectionsPerClient: -1},
		"max connections too high": {Port: 3128, MaxConnectionsPerClient: MaxMaxConnectionsPerClient + 1},
		"timeout below a second":   {Port: 3128, Timeouts: Timeouts{Connect: time.Millisecond}},
		"timeout not whole":        {Port: 3128, Timeouts: Timeouts{Idle: 1500 * time.Millisecond}},
		"timeout over a day":       {Port: 3128, Timeouts: Timeouts{RequestHeaders: 25 * time.Hour}},
		"empty TLS":                {Port: 3128, TLS: &TLSSettings{}},
	}
	for name, s := range invalid {
		if s.Validate() == nil {
			t.Errorf("%s: valid, want an error", name)
		}
	}
	if err := (Settings{Port: 3128, AllowedDestinations: many(MaxAllowedDestinations, "a.io"), AllowedPorts: manyPorts(MaxAllowedPorts), Users: manyUsers(MaxUsers)}).Validate(); err != nil {
		t.Errorf("settings at the limits: %v", err)
	}
}

func TestSquidClientPrefixes(t *testing.T) {
	t.Parallel()
	tests := map[string]struct{ in, want []string }{
		"ipv4 kept":            {[]string{"10.0.0.0/8"}, []string{"10.0.0.0/8"}},
		"ipv4 all split":       {[]string{"0.0.0.0/0"}, []string{"0.0.0.0/1", "128.0.0.0/1"}},
		"nested dropped":       {[]string{"10.1.0.0/16", "10.0.0.0/8", "10.1.2.3/32"}, []string{"10.0.0.0/8"}},
		"duplicates dropped":   {[]string{"10.0.0.0/8", "10.0.0.0/8"}, []string{"10.0.0.0/8"}},
		"ipv6 outside mapped":  {[]string{"2001:db8::/32", "2001:db8::1/128"}, []string{"2001:db8::/32"}},
		"ipv6 /95 over mapped": {[]string{"::fffe:0:0/95"}, []string{"::fffe:0:0/96"}},
		"ipv6 all": {[]string{"::/0"}, func() []string {
			var out []string
			for _, p := range aroundV4Mapped(mustPrefix("::/0")) {
				out = append(out, p.String())
			}
			return out
		}()},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := squidClientPrefixes(tc.in)
			want := append([]string(nil), tc.want...)
			sortStrings(want)
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
	// The split of ::/0 covers every IPv6 address but the IPv4-mapped block, and nothing twice.
	parts := aroundV4Mapped(mustPrefix("::/0"))
	if len(parts) != 96 {
		t.Fatalf("::/0 split into %d ranges, want 96", len(parts))
	}
	for _, a := range []string{"::", "::1", "2001:db8::1", "ffff::", "::fffe:0:0", "::1:0:0:0", "::ffff:0:0"} {
		n := 0
		for _, p := range parts {
			if p.Contains(mustAddr(a)) {
				n++
			}
		}
		want := 1
		if a == "::ffff:0:0" {
			want = 0
		}
		if n != want {
			t.Errorf("%s is in %d of the ranges, want %d", a, n, want)
		}
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func mustAddr(s string) netip.Addr     { return netip.MustParseAddr(s) }
func sortStrings(s []string)           { slices.Sort(s) }

func TestValidateTLS(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	chain, key := ca.Leaf(t)
	otherChain, otherKey := ca.Leaf(t)
	leafOnly := chain[:strings.Index(chain, "-----END CERTIFICATE-----")+len("-----END CERTIFICATE-----\n")]
	clientKey, _, clientCert := testutil.SignedCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: "client"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca.Inter, ca.InterKey)
	clientKeyDER, err := x509.MarshalPKCS8PrivateKey(clientKey)
	if err != nil {
		t.Fatal(err)
	}
	encrypted := string(pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte("x")}))
	tests := map[string]struct {
		cert, key string
		valid     bool
	}{
		"chain and key":                  {chain, key, true},
		"leaf alone":                     {leafOnly, key, true},
		"key of another certificate":     {chain, otherKey, false},
		"chain in the wrong order":       {ca.InterPEM + leafOnly, key, false},
		"key in the certificate field":   {chain + key, key, false},
		"no certificate":                 {"", key, false},
		"no key":                         {chain, "", false},
		"two keys":                       {chain, key + otherKey, false},
		"encrypted key":                  {chain, encrypted, false},
		"text before the PEM":            {"Certificate:\n    Data: ...\n" + chain, key, true},
		"text after the PEM":             {chain + "trailing", key, false},
		"a client certificate":           {clientCert, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: clientKeyDER})), false},
		"too long":                       {chain + strings.Repeat(otherChain, 40), key, false},
		"garbage in a certificate block": {string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("x")})), key, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := ValidateTLS(tc.cert, tc.key)
			if (err == nil) != tc.valid {
				t.Errorf("ValidateTLS: %v, want valid=%v", err, tc.valid)
			}
		})
	}
}

func TestRefusedDestinations(t *testing.T) {
	t.Parallel()
	always := []string{"0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "::/128", "::1/128", "fe80::/10"}
	tests := map[string]struct {
		allowed []string
		own     []netip.Addr
		want    []string // besides always
		lifted  []string // addresses the list must not refuse
		kept    []string // addresses it must refuse
	}{
		"nothing allowed": {
			want: []string{"10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"},
			kept: []string{
				"10.1.2.3", "192.168.1.1", "fd00::1", "fd00:ec2::254",
				// Special-purpose ranges, including the anycast rows marked globally reachable inside a refused
				// block, multicast, and IPv4 addresses embedded in NAT64 and 6to4.
				"192.0.0.9", "192.0.2.1", "192.88.99.1", "198.51.100.1", "203.0.113.7", "224.0.0.1", "239.255.255.250",
				"240.0.0.1", "255.255.255.255", "64:ff9b::7f00:1", "64:ff9b:1::1", "100::1", "100:0:0:1::1", "2001::1",
				"2001:1::1", "2001:db8::1", "2002:a9fe:a9fe::1", "3fff::1", "5f00::1", "ff02::1", "ff0e::1",
			},
		},
		"a whole private range": {
			allowed: []string{"192.168.0.0/16", "fc00::/7"},
			want:    []string{"10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "fd00:ec2::/64", "fd20:ce::254/128"},
			lifted:  []string{"192.168.1.1", "fd00::1"},
			kept:    []string{"fd00:ec2::254", "fd00:ec2::253", "fd20:ce::254"},
		},
		"a part of one": {
			allowed: []string{"10.1.2.0/24"},
			lifted:  []string{"10.1.2.0", "10.1.2.255"},
			kept:    []string{"10.1.1.255", "10.1.3.0", "10.0.0.1", "10.255.255.255"},
		},
		"own addresses, one inside an allowed range": {
			allowed: []string{"10.0.0.0/8"},
			own:     []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("::ffff:192.175.48.7"), netip.MustParseAddr("2620:4f:8000::7"), {}, netip.IPv4Unspecified()},
			lifted:  []string{"10.0.0.4", "10.0.0.6", "192.175.48.8", "2620:4f:8000::8"},
			kept:    []string{"10.0.0.5", "192.175.48.7", "2620:4f:8000::7"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := refusedDestinations(tc.allowed, tc.own, false)
			var ps []netip.Prefix
			for _, g := range got {
				p := netip.MustParsePrefix(g)
				for _, q := range ps {
					if p.Overlaps(q) {
						t.Errorf("%s overlaps %s: Squid would drop one", p, q)
					}
				}
				ps = append(ps, p)
			}
			refused := func(a string) bool {
				for _, p := range ps {
					if p.Contains(netip.MustParseAddr(a).Unmap()) {
						return true
					}
				}
				return false
			}
			for _, a := range always {
				if !slices.Contains(got, a) {
					t.Errorf("%s missing from %q", a, got)
				}
			}
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("%s missing from %q", w, got)
				}
			}
			for _, a := range append(tc.kept, "127.0.0.1", "169.254.169.254", "::1", "fe80::1") {
				if !refused(a) {
					t.Errorf("%s is not refused by %q", a, got)
				}
			}
			// Public addresses, special-purpose ones the registry marks globally reachable (AS112), and the
			// benchmarking range the project's test networks use (see AlwaysRefusedRanges).
			for _, a := range append(tc.lifted, "8.8.8.8", "2001:4860::8888", "192.175.48.1", "192.31.196.1", "2620:4f:8000::1", "198.18.0.1") {
				if refused(a) {
					t.Errorf("%s is refused by %q", a, got)
				}
			}
		})
	}
}

// manyUsers are n users of distinct names, each with a valid password.
func manyUsers(n int) []BasicAuth {
	var out []BasicAuth
	for i := range n {
		out = append(out, BasicAuth{Username: fmt.Sprintf("user-%d", i), Password: "a valid password"})
	}
	return out
}

// manyPorts are n ports from 10000 up: proxyconftest.ManyPorts, which the package's own tests cannot import
// (it imports proxyconf).
func manyPorts(n int) []int {
	var out []int
	for i := range n {
		out = append(out, 10000+i)
	}
	return out
}
