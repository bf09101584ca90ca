package proxyconf_test

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/proxyconftest"
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
func fixedLines(user proxyconf.Settings, opts proxyconf.RenderOptions) map[string]bool {
	lines := map[string]bool{}
	cert, key := proxyconftest.TLSPair()
	for _, s := range []proxyconf.Settings{
		{},
		{AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"a.io"}, Users: []proxyconf.BasicAuth{{Username: "u", Password: "password"}}},
		{TLS: &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key}},
	} {
		s.Port, s.MaxConnectionsPerClient, s.Timeouts = user.Port, user.MaxConnectionsPerClient, user.Timeouts
		conf, err := proxyconf.RenderSquidConf(s, opts)
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
func checkSquidConf(t *testing.T, s proxyconf.Settings, opts proxyconf.RenderOptions, conf []byte) {
	t.Helper()
	fixed := fixedLines(s, opts)
	got := map[string][]string{}
	for i, l := range strings.Split(strings.TrimSuffix(string(conf), "\n"), "\n") {
		if len(l) > proxyconf.MaxLineLen+260 {
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
		connect = proxyconf.DefaultConnectPorts
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
func checkRefusedACL(t *testing.T, allowedPrivate []string, opts proxyconf.RenderOptions, got []string) {
	t.Helper()
	g := parsePrefixes(t, "refused destination", got)
	noneNested(t, "refused_destinations", g)
	always := parsePrefixes(t, "always-refused", proxyconf.AlwaysRefusedRanges)
	private := parsePrefixes(t, "private", proxyconf.PrivateRanges)
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

// FuzzRenderSquidConf feeds hostile strings through the validators and the shared renderers. Whatever the
// validators accept must come out as the intended lines only: squid.conf lines the renderer always writes
// plus the user's values in their own acl lines, and a one-line htpasswd of user and bcrypt hash. The guest
// renderers take the same inputs in their own fuzz targets (the kvm guest's FuzzRenderUserData); uid and host
// are theirs.
func FuzzRenderSquidConf(f *testing.F) {
	for _, seed := range proxyconftest.FuzzSeeds {
		i := seed.In
		f.Add(i.D1, i.D2, i.CIDR, i.Port, i.AllowedPort, i.User, i.Pass, i.N, i.UID, i.Host, i.PrivateCIDR, i.MaxConn, i.TLSMode, i.CertPEM, i.KeyPEM)
	}
	f.Fuzz(func(t *testing.T, d1, d2, cidr string, port, allowedPort int, user, pass string, n uint8, _, _ string,
		privateCIDR string, maxConn int, tlsMode uint8, certPEM, keyPEM string) {
		s := proxyconftest.FuzzSettings(d1, d2, cidr, port, allowedPort, user, pass, n, privateCIDR, maxConn, tlsMode, certPEM, keyPEM)
		// The VM form.
		opts := proxyconf.RenderOptions{OwnAddressesFile: proxyconf.OwnAddressesPath}
		conf, err := proxyconf.RenderSquidConf(s, opts)
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

		if len(s.Users) > 0 {
			htpasswd, err := proxyconf.RenderHtpasswd(s.Users)
			if err != nil {
				t.Fatalf("htpasswd: %v", err)
			}
			line, ok := strings.CutSuffix(string(htpasswd), "\n")
			u, hash, _ := strings.Cut(line, ":")
			if !ok || strings.Contains(line, "\n") || u != user || bcrypt.CompareHashAndPassword([]byte(hash), []byte(pass)) != nil {
				t.Fatalf("htpasswd %q is not one line of the user and the password's hash", htpasswd)
			}
		}
	})
}

// The seeds marked valid pass validation, and between them render TLS, auth, private ranges and acl lines
// long enough to wrap: a plain `go test` reaches every part of the renderer through the fuzz target.
func TestFuzzSeedsReachEveryMode(t *testing.T) {
	t.Parallel()
	reached := map[string]bool{}
	for _, seed := range proxyconftest.FuzzSeeds {
		s := seed.In.Settings()
		err := s.Validate()
		if seed.Valid != (err == nil) {
			t.Errorf("seed %q: validation says %v, the seed is marked valid=%v", seed.Name, err, seed.Valid)
			continue
		}
		if !seed.Valid {
			continue
		}
		conf, err := proxyconf.RenderSquidConf(s, proxyconf.RenderOptions{OwnAddressesFile: proxyconf.OwnAddressesPath})
		if err != nil {
			t.Fatalf("seed %q: %v", seed.Name, err)
		}
		reached["tls"] = reached["tls"] || s.TLS != nil
		reached["auth"] = reached["auth"] || len(s.Users) > 0
		reached["private ranges"] = reached["private ranges"] || len(s.AllowedPrivateCIDRs) > 0
		reached["wrapped lines"] = reached["wrapped lines"] || strings.Count(string(conf), "acl destinations ") > 1
	}
	for _, mode := range []string{"tls", "auth", "private ranges", "wrapped lines"} {
		if !reached[mode] {
			t.Errorf("no valid seed renders %s", mode)
		}
	}
}
