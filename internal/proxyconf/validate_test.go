package proxyconf

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
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
			valid:    []string{"example.com", ".example.com", "a-b.c0", "localhost", "xn--bcher-kva.example", "1.example.com", long + ".io"},
			invalid: []string{
				"", ".", "..a", "a..b", "a.", ".a.", "-a.com", "a-.com", "A.com", "a_b.com", "*.example.com", "a.com:443",
				"a.com/path", "a com", "a.com\n", "a.com#", "a.com\"", "a\\.com", "a.com;", "1.2.3.4", ".0.1", "10", "::1", "[::1]",
				long + "a.io", strings.Repeat(long+".", 4) + "io", "é.com", "a.com\x00",
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
		"bad user":                 {Port: 3128, Auth: &BasicAuth{Username: "a b", Password: "password"}},
		"bad password":             {Port: 3128, Auth: &BasicAuth{Username: "a", Password: "x"}},
		"too many destinations":    {Port: 3128, AllowedDestinations: many(MaxAllowedDestinations+1, "a.io")},
		"too many client CIDRs":    {Port: 3128, AllowedClientCIDRs: many(MaxAllowedClientCIDRs+1, "10.0.0.0/8")},
		"too many ports":           {Port: 3128, AllowedPorts: manyPorts(MaxAllowedPorts + 1)},
		"second destination wrong": {Port: 3128, AllowedDestinations: []string{"a.io", "b.io\nx"}},
	}
	for name, s := range invalid {
		if s.Validate() == nil {
			t.Errorf("%s: valid, want an error", name)
		}
	}
	if err := (Settings{Port: 3128, AllowedDestinations: many(MaxAllowedDestinations, "a.io"), AllowedPorts: manyPorts(MaxAllowedPorts)}).Validate(); err != nil {
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
