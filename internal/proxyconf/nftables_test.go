package proxyconf

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// nftSetElements reads the elements of one set back from a rendered ruleset.
func nftSetElements(t *testing.T, ruleset []byte, set string) []netip.Prefix {
	t.Helper()
	m := regexp.MustCompile(`(?s)set ` + set + ` \{.*?elements = \{(.*?)\}`).FindSubmatch(ruleset)
	if m == nil {
		return nil
	}
	var out []netip.Prefix
	for _, f := range strings.Split(string(m[1]), ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, netip.MustParsePrefix(f))
		}
	}
	return out
}

func inAny(ps []netip.Prefix, a netip.Addr) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
}

func TestRenderNftables(t *testing.T) {
	t.Parallel()
	// Addresses every backstop refuses, whatever allowed_private_cidrs says.
	always := []string{"169.254.169.254", "127.0.0.1", "0.0.0.0", "192.0.2.1", "224.0.0.1", "::1", "::", "fe80::1",
		"64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1", "fd00:ec2::254", "fd00:ec2::253", "fd20:ce::254", "ff02::1",
		"100.100.100.200", "168.63.129.16"}
	tests := map[string]struct {
		allowedPrivate []string
		refused        []string // besides always
		notRefused     []string
	}{
		"no private range allowed": {
			refused:    []string{"10.0.0.1", "10.1.2.3", "100.64.0.1", "172.16.0.1", "192.168.122.1", "fc00::1", "fd00::5"},
			notRefused: []string{"198.18.0.1", "8.8.8.8", "2606:4700::1111"},
		},
		"a private range allowed": {
			allowedPrivate: []string{"10.1.0.0/16", "fd00::/8"},
			refused:        []string{"10.0.0.1", "10.2.0.1", "192.168.122.1", "fc00::1"},
			notRefused:     []string{"10.1.2.3", "fd00::5", "198.18.0.1"},
		},
		// The metadata servers' IPv6 addresses lie in fc00::/7: always refused, so the allowed range has
		// holes, and the sets' intervals must not overlap for nft to take them.
		"all of fc00::/7 allowed": {
			allowedPrivate: []string{"fc00::/7"},
			notRefused:     []string{"fd00::5", "fc00::1", "fd00:ec2:0:1::1"},
		},
		"every private range allowed": {
			allowedPrivate: []string{"10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"},
			notRefused:     []string{"10.0.0.1", "100.64.0.1", "100.100.100.199", "172.16.0.1", "192.168.122.1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := Settings{Port: 3128, AllowedDestinations: []string{"example.com"}, AllowedPrivateCIDRs: tc.allowedPrivate}
			b, err := RenderNftables(s)
			if err != nil {
				t.Fatal(err)
			}
			v4, v6 := nftSetElements(t, b, nftRefusedV4), nftSetElements(t, b, nftRefusedV6)
			refused := slices.Concat(v4, v6)
			for _, a := range slices.Concat(always, tc.refused) {
				if !inAny(refused, netip.MustParseAddr(a)) {
					t.Errorf("%s is not refused", a)
				}
			}
			for _, a := range tc.notRefused {
				if inAny(refused, netip.MustParseAddr(a)) {
					t.Errorf("%s is refused", a)
				}
			}
			for _, p := range v4 {
				if !p.Addr().Is4() {
					t.Errorf("%s in the IPv4 set", p)
				}
			}
			for _, p := range v6 {
				if !p.Addr().Is6() || p.Addr().Is4In6() {
					t.Errorf("%s in the IPv6 set", p)
				}
			}
			// What Squid refuses by address, less the own addresses the guest adds: the two layers agree.
			conf, err := RenderSquidConf(s, RenderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var acl []string
			for _, line := range strings.Split(string(conf), "\n") {
				if v, ok := strings.CutPrefix(line, "acl refused_destinations dst "); ok {
					acl = append(acl, strings.Fields(v)...)
				}
			}
			var set []string
			for _, p := range refused {
				set = append(set, p.String())
			}
			// Squid's list also holds the listening address (unspecified here: none).
			slices.Sort(acl)
			slices.Sort(set)
			if !slices.Equal(acl, set) {
				t.Errorf("backstop refuses %q, squid.conf's refused_destinations %q", set, acl)
			}
			// Only the proxy user's traffic is looked at, and only what it starts; refused packets are rejected.
			for _, want := range []string{
				"table inet " + NftablesTable + "\ndelete table inet " + NftablesTable + "\n",
				"type filter hook output priority filter; policy accept;",
				`meta skuid "proxy" jump from_proxy`,
				"tcp flags & (syn | ack) != syn accept",
				"th dport 53 ip daddr @" + nftResolversV4 + " accept",
				"th dport 53 ip6 daddr @" + nftResolversV6 + " accept",
				"ip daddr @" + nftRefusedV4 + " " + nftReject, "ip6 daddr @" + nftRefusedV6 + " " + nftReject,
				"ip daddr @" + nftOwnV4 + " " + nftReject, "ip6 daddr @" + nftOwnV6 + " " + nftReject,
			} {
				if !strings.Contains(string(b), want) {
					t.Errorf("ruleset lacks %q", want)
				}
			}
		})
	}
	if _, err := RenderNftables(Settings{Port: 3128, AllowedPrivateCIDRs: []string{"8.8.8.0/24"}}); err == nil {
		t.Error("rendered a backstop for settings that fail validation")
	}
}

// privateNetns runs fn on a thread of its own in a new, empty network namespace (loopback up); programs fn
// starts there inherit it. Nothing of the machine's network is touched: the namespace goes with the thread,
// which is never reused. Making one needs root.
func privateNetns(t *testing.T, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace of its own (make test runs as root)")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nft: %v (scripts/install-deps.sh installs nftables)", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine, namespace and all
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Errorf("ip link set lo up: %v: %s", err, out)
			return
		}
		fn()
	}()
	<-done
}

// The kernel checks each rendered ruleset as the guest loads it (nft -c: nothing is applied), with sets of
// every size the settings can make.
func TestNftablesRulesetLoads(t *testing.T) {
	t.Parallel()
	many := Settings{Port: 3128}
	for i := range MaxAllowedPrivateCIDRs {
		many.AllowedPrivateCIDRs = append(many.AllowedPrivateCIDRs, fmt.Sprintf("fd00:ffff:ffff:ffff:ffff:ffff:ffff:%x/128", 0xf000+2*i))
	}
	dir := t.TempDir()
	var files []string
	for i, s := range []Settings{
		{Port: 3128},
		{Port: 3128, AllowedPrivateCIDRs: []string{"10.1.0.0/16", "fd00::/8"}},
		{Port: 3128, AllowedPrivateCIDRs: []string{"fc00::/7", "10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.168.0.0/16"}},
		many,
	} {
		b, err := RenderNftables(s)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, strconv.Itoa(i)+".nft")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	privateNetns(t, func() {
		for _, f := range files {
			if out, err := exec.Command("nft", "-c", "-f", f).CombinedOutput(); err != nil {
				t.Errorf("nft -c -f %s: %v\n%s", filepath.Base(f), err, out)
			}
		}
	})
}

// The backstop in a real kernel, loaded as the guest loads it (BackstopLoader, with a resolv.conf and an own
// address list of the test's): a program running as the proxy user cannot open a connection to a refused or
// own address, while root can (so the listeners are there and the test can fail); the proxy user still
// reaches an allowed private address, an address outside every refused range, and its resolver on port 53.
func TestBackstopInKernel(t *testing.T) {
	t.Parallel()
	proxyUID, proxyGID := lookupProxyUser(t)
	dir := t.TempDir()
	s := Settings{Port: 3128, AllowedDestinations: []string{"example.com"}, AllowedPrivateCIDRs: []string{"10.1.0.0/16", "fd00::/8"}}
	ruleset, err := RenderNftables(s)
	if err != nil {
		t.Fatal(err)
	}
	nftPath, own, resolv := filepath.Join(dir, "backstop.nft"), filepath.Join(dir, "own"), filepath.Join(dir, "resolv.conf")
	for name, content := range map[string]string{
		nftPath: string(ruleset),
		own:     "198.18.0.9\nfd00::9\n",
		resolv:  "search example\nnameserver 10.53.0.53\nnameserver fd00:53::53%lo\noptions edns0\n",
	} {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The directory is the test's (mode 0700): the proxy user only connects, it reads nothing here.
	loader := BackstopLoader(nftPath, own, resolv) + "\nload_backstop\n"

	cases := []struct {
		addr      string
		port      int
		proxyGets bool
	}{
		{"169.254.169.254", 80, false}, // the metadata server
		{"127.0.0.1", 8080, false},
		{"10.2.0.1", 80, false},      // a private address outside allowed_private_cidrs: the host's, say
		{"192.168.122.1", 80, false}, // libvirt's default network's host address
		{"198.18.0.9", 80, false},    // an own address, from the guest's list
		{"fd00:ec2::254", 80, false}, // always refused, though inside the allowed fd00::/8
		{"fd00::9", 80, false},       // an own address inside the allowed range
		{"10.53.0.53", 80, false},    // the resolver, on another port
		{"10.53.0.53", 53, true},     // the resolver
		{"fd00:53::53", 80, true},    // inside the allowed fd00::/8 anyway
		{"10.1.2.3", 80, true},       // inside allowed_private_cidrs
		{"198.18.0.1", 80, true},     // in no refused range
		{"fd00::5", 80, true},
	}
	privateNetns(t, func() {
		for _, c := range cases {
			bits := "/32"
			if strings.Contains(c.addr, ":") {
				bits = "/128"
			}
			if c.addr == "127.0.0.1" {
				continue // lo has it
			}
			if out, err := exec.Command("ip", "addr", "replace", c.addr+bits, "dev", "lo").CombinedOutput(); err != nil {
				t.Errorf("ip addr add %s: %v: %s", c.addr, err, out)
				return
			}
		}
		if out, err := exec.Command("sh", "-c", loader).CombinedOutput(); err != nil {
			t.Errorf("load_backstop: %v\n%s", err, out)
			return
		}
		for _, set := range []string{nftResolversV4, nftResolversV6, nftOwnV4, nftOwnV6} {
			out, _ := exec.Command("nft", "list", "set", "inet", NftablesTable, set).CombinedOutput()
			if !strings.Contains(string(out), "elements = {") {
				t.Errorf("load_backstop left set %s empty:\n%s", set, out)
			}
		}
		for _, c := range cases {
			hostPort := net.JoinHostPort(c.addr, strconv.Itoa(c.port))
			l, err := acceptAndClose(hostPort)
			if err != nil {
				t.Errorf("listen %s: %v", hostPort, err)
				continue
			}
			rootErr := connectAs(hostPort, 0, 0)
			proxyErr := connectAs(hostPort, proxyUID, proxyGID)
			_ = l.Close()
			if rootErr != nil {
				t.Errorf("root could not connect to %s: %v", hostPort, rootErr)
			}
			if got := proxyErr == nil; got != c.proxyGets {
				t.Errorf("the proxy user connecting to %s: %v; want connected = %v", hostPort, proxyErr, c.proxyGets)
			}
		}
		out, _ := exec.Command("nft", "list", "chain", "inet", NftablesTable, "from_proxy").CombinedOutput()
		if !regexp.MustCompile(`@` + nftRefusedV4 + ` counter packets [1-9]`).Match(out) {
			t.Errorf("no packet counted as refused:\n%s", out)
		}
	})
}

// acceptAndClose listens on hostPort and closes each connection it accepts until the listener is closed: a
// port a client connects to unless a rule refuses it.
func acceptAndClose(hostPort string) (net.Listener, error) {
	l, err := net.Listen("tcp", hostPort)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	return l, nil
}

// connectAs opens one TCP connection to hostPort from a program running as uid and gid (bash's /dev/tcp:
// bash is essential on Debian). A refused packet is rejected at once, so the program ends either way.
func connectAs(hostPort string, uid, gid uint32) error {
	host, port, _ := net.SplitHostPort(hostPort)
	cmd := exec.Command("bash", "-c", `exec 3<>"/dev/tcp/$1/$2"`, "connect", host, port)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

func lookupProxyUser(t *testing.T) (uid, gid uint32) {
	t.Helper()
	u, err := user.Lookup(squidUser)
	if err != nil {
		t.Fatalf("user %s: %v (Debian's base-passwd makes it)", squidUser, err)
	}
	uid64, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid64, _ := strconv.ParseUint(u.Gid, 10, 32)
	return uint32(uid64), uint32(gid64)
}
