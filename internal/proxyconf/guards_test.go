package proxyconf

import (
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// The destination guards can only be proved where the proxy could otherwise reach what they refuse, and
// where an address the user allows is reachable. Outside a network namespace only loopback is, and private
// addresses must never be a test's target. So TestDestinationGuards runs itself again inside a network
// namespace of its own (unshare --net), whose loopback interface carries a stand-in public address, a private
// one and "the proxy's own" one; nothing sent there can leave it.
const (
	netnsEnv = "PROXYCONF_TEST_IN_NETNS"
	// publicAddr stands in for the internet. It is in AS112's block (192.175.48.0/24, RFC 7534), which IANA
	// marks globally reachable, so no guard refuses it; the documentation ranges, once used here, are refused.
	// Nothing sent to it leaves the test's network namespace.
	publicAddr  = "192.175.48.10"
	privateAddr = "10.1.2.3"
	ownAddr     = "192.175.48.20"
	ownFileAddr = "192.175.48.21" // listed in the own-addresses file, as a VM lists its interfaces
)

// specialRangeNames resolve into the special-purpose ranges refused whatever the settings: with the names in
// guardRecords for loopback, link-local, unspecified and the metadata servers, at least one name for each of
// AlwaysRefusedRanges (TestEveryRefusedRangeHasAGuardCase checks that none is missed).
var specialRangeNames = map[string][]string{
	"ietf-protocol.allowed.test":  {"192.0.0.170"},     // NAT64 discovery, inside 192.0.0.0/24
	"pcp-anycast.allowed.test":    {"192.0.0.9"},       // marked globally reachable, refused with its block
	"test-net-1.allowed.test":     {"192.0.2.10"},      // documentation
	"6to4-relay.allowed.test":     {"192.88.99.1"},     // deprecated 6to4 relay anycast
	"test-net-2.allowed.test":     {"198.51.100.10"},   // documentation
	"test-net-3.allowed.test":     {"203.0.113.10"},    // documentation
	"multicast.allowed.test":      {"224.0.0.1"},       // all hosts on the link
	"reserved.allowed.test":       {"240.0.0.1"},       // reserved
	"broadcast.allowed.test":      {"255.255.255.255"}, // limited broadcast, inside 240.0.0.0/4
	"nat64.allowed.test":          {"64:ff9b::7f00:1"}, // 127.0.0.1 through a NAT64 gateway
	"nat64-local.allowed.test":    {"64:ff9b:1::a9fe:a9fe"},
	"discard.allowed.test":        {"100::1"},
	"dummy-prefix.allowed.test":   {"100:0:0:1::1"},
	"teredo.allowed.test":         {"2001::1"},        // inside 2001::/23
	"pcp-anycast-v6.allowed.test": {"2001:1::1"},      // marked globally reachable, refused with its block
	"doc-v6.allowed.test":         {"2001:db8::1"},    // documentation
	"6to4.allowed.test":           {"2002:7f00:1::1"}, // 127.0.0.1's 6to4 prefix
	"doc-v6-new.allowed.test":     {"3fff::1"},        // documentation
	"srv6.allowed.test":           {"5f00::1"},
	"v6-multicast.allowed.test":   {"ff02::1"}, // all nodes on the link
}

// guardRecords are the names TestDestinationGuards resolves, and their addresses.
var guardRecords = union(specialRangeNames, map[string][]string{
	"public.allowed.test":        {publicAddr},
	"loopback.allowed.test":      {"127.0.0.1"},
	"loopback2.allowed.test":     {"127.8.9.10"},
	"metadata.allowed.test":      {"169.254.169.254"},
	"unspecified.allowed.test":   {"0.0.0.0"},
	"private.allowed.test":       {privateAddr},
	"other-private.allowed.test": {"192.168.7.7"},
	"cgnat.allowed.test":         {"100.64.1.1"},
	"own.allowed.test":           {ownAddr},
	"own-file.allowed.test":      {ownFileAddr},
	"mixed-private.allowed.test": {publicAddr, privateAddr},
	// Many addresses, one of them refused whatever the settings, in the middle.
	"many.allowed.test": {publicAddr, "192.175.48.11", "192.175.48.12", "169.254.169.254", "192.175.48.13", privateAddr},
	// IPv6 forms of refused IPv4 addresses, and IPv6's own loopback and metadata addresses.
	"mapped-loopback.allowed.test":        {"::ffff:127.0.0.1"},
	"mapped-metadata.allowed.test":        {"::ffff:169.254.169.254"},
	"v6-loopback.allowed.test":            {"::1"},
	"v6-linklocal.allowed.test":           {"fe80::1"},
	"v6-metadata.allowed.test":            {"fd00:ec2::254"},
	"v6-gce-metadata.allowed.test":        {"fd20:ce::254"},
	"v6-aws-resolver.allowed.test":        {"fd00:ec2::253"},
	"alibaba-metadata.allowed.test":       {"100.100.100.200"},
	"azure-wireserver.allowed.test":       {"168.63.129.16"},
	"v6-unspecified.allowed.test":         {"::"},
	"public-and-v6-loopback.allowed.test": {publicAddr, "::1"},
	"public.other.test":                   {publicAddr},
})

// union is a copy of the maps, later ones winning.
func union[K comparable, V any](ms ...map[K]V) map[K]V {
	out := map[K]V{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// TestEveryRefusedRangeHasAGuardCase: each range refused whatever the settings has a name in
// TestDestinationGuards that resolves into it, so a range added to the list is proved on the real Squid too.
func TestEveryRefusedRangeHasAGuardCase(t *testing.T) {
	t.Parallel()
	for _, r := range AlwaysRefusedRanges {
		p := netip.MustParsePrefix(r)
		// A name with all its addresses in the range: its refusal can only come from this range.
		found := false
		for _, addrs := range guardRecords {
			inside := true
			for _, a := range addrs {
				inside = inside && p.Contains(netip.MustParseAddr(a))
			}
			found = found || inside
		}
		if !found {
			t.Errorf("no name in TestDestinationGuards resolves into %s: add one to specialRangeNames", r)
		}
	}
}

func TestDestinationGuards(t *testing.T) {
	t.Parallel()
	if os.Getenv(netnsEnv) == "" {
		runInOwnNetns(t, "TestDestinationGuards")
		return
	}
	mustBeOwnNetns(t)
	for _, a := range []string{publicAddr, privateAddr, ownAddr, ownFileAddr} {
		run(t, "ip", "addr", "add", a+"/32", "dev", "lo")
	}
	run(t, "ip", "link", "set", "lo", "up")

	b := newNamespaceBackends(t)
	hp, tp := squidtest.Port(t, b.http), squidtest.Port(t, b.tls)
	resolver := startResolver(t, "127.0.0.1:53", guardRecords)

	base := Settings{
		AllowedClientCIDRs:  []string{"127.0.0.0/8"},
		AllowedDestinations: []string{".allowed.test"},
		AllowedPorts:        []int{tp, hp},
	}
	listed := base
	// Two private ranges listed; fd00::/8 is listed too, yet its metadata address stays refused.
	listed.AllowedPrivateCIDRs = []string{"10.1.2.0/24", "fd00::/8"}
	// Every private range listed: the metadata and host services inside them stay refused (issue 35 item 6).
	everyPrivate := base
	everyPrivate.AllowedPrivateCIDRs = slices.Clone(PrivateRanges)
	// Report mode forwards every destination, so its guards apply to every name, not only allowed ones: the
	// client's rule set allows nothing, and the same names must be refused as without it (issue 39).
	reported := base
	reported.RuleSets = []RuleSet{{Name: "watched", Clients: RuleSetClients{SourceCIDRs: []string{"127.0.0.0/8"}}, Ports: []int{tp, hp}, Mode: RuleSetReport}}

	refused, passes := 403, 200
	specialRefused := map[string]int{}
	for name := range specialRangeNames {
		specialRefused[name] = refused
	}
	noPrivateWant := union(specialRefused, map[string]int{
		"public.allowed.test": passes, "loopback.allowed.test": refused, "loopback2.allowed.test": refused,
		"metadata.allowed.test": refused, "unspecified.allowed.test": refused, "private.allowed.test": refused,
		"other-private.allowed.test": refused, "cgnat.allowed.test": refused, "own.allowed.test": refused,
		"own-file.allowed.test":      refused,
		"mixed-private.allowed.test": refused, "many.allowed.test": refused,
		"mapped-loopback.allowed.test": refused, "mapped-metadata.allowed.test": refused,
		"v6-loopback.allowed.test": refused, "v6-linklocal.allowed.test": refused, "v6-metadata.allowed.test": refused,
		"v6-gce-metadata.allowed.test": refused, "v6-unspecified.allowed.test": refused,
		"public-and-v6-loopback.allowed.test": refused, "v6-aws-resolver.allowed.test": refused,
		"alibaba-metadata.allowed.test": refused, "azure-wireserver.allowed.test": refused,
	})
	tests := map[string]struct {
		settings Settings
		// want is the status for each name, over HTTP and CONNECT alike.
		want map[string]int
	}{
		"no private range listed": {settings: base, want: noPrivateWant},
		"report mode":             {settings: reported, want: noPrivateWant},
		"private range listed": {
			settings: listed,
			want: map[string]int{
				"public.allowed.test": passes, "private.allowed.test": passes, "mixed-private.allowed.test": passes,
				// Listing 10.1.2.0/24 lifts nothing else.
				"other-private.allowed.test": refused, "cgnat.allowed.test": refused, "loopback.allowed.test": refused,
				"metadata.allowed.test": refused, "own.allowed.test": refused, "own-file.allowed.test": refused, "many.allowed.test": refused,
				"v6-metadata.allowed.test": refused, "mapped-loopback.allowed.test": refused,
				// Nor any special-purpose range.
				"nat64.allowed.test": refused, "test-net-1.allowed.test": refused, "doc-v6.allowed.test": refused,
			},
		},
		"every private range listed": {
			settings: everyPrivate,
			want: map[string]int{
				"v6-metadata.allowed.test": refused, "v6-aws-resolver.allowed.test": refused, "v6-gce-metadata.allowed.test": refused,
				"alibaba-metadata.allowed.test": refused, "azure-wireserver.allowed.test": refused,
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := squidtest.Dir(t)
			hosts := filepath.Join(dir, "hosts")
			// An empty hosts file: every name comes from the test's resolver.
			if err := os.WriteFile(hosts, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			ownFile := filepath.Join(dir, "own-addresses")
			if err := os.WriteFile(ownFile, []byte("127.0.0.1\n"+ownFileAddr+"\n::1\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			opts := RenderOptions{
				ListenAddress:    netip.MustParseAddr("127.0.0.1"),
				HealthPort:       squidtest.FreePort(t),
				HtpasswdPath:     filepath.Join(dir, "passwd"),
				PidFile:          filepath.Join(dir, "squid.pid"),
				AccessLog:        "stdio:" + filepath.Join(dir, "access.log"),
				CacheLog:         filepath.Join(dir, "cache.log"),
				CoredumpDir:      dir,
				HostsFile:        hosts,
				DNSNameservers:   []netip.Addr{netip.MustParseAddr("127.0.0.1")},
				OwnAddresses:     []netip.Addr{netip.MustParseAddr(ownAddr)},
				OwnAddressesFile: ownFile,
			}
			sq := startSquidWith(t, tc.settings, opts, dir)
			report := len(tc.settings.RuleSets) > 0
			c := squidtest.Client{Proxy: sq.Proxy, From: "127.0.0.1", TLSRoots: b.roots(), TLSHostname: "example.com"}
			names := make([]string, 0, len(tc.want))
			for n := range tc.want {
				names = append(names, n)
			}
			slices.Sort(names)
			for _, host := range names {
				want := tc.want[host]
				for _, method := range []string{"GET", "CONNECT"} {
					var got squidtest.Result
					port := hp
					if method == "CONNECT" {
						port = tp
						got = c.Connect(t, fmt.Sprintf("%s:%d", host, port))
					} else {
						got = c.Get(t, fmt.Sprintf("http://%s:%d/", host, port), fmt.Sprintf("%s:%d", host, port))
					}
					if got.Status != want {
						t.Errorf("%s %s: got %d, want %d\n%s", method, host, got.Status, want, got.Body)
						continue
					}
					// What a refusal logs: the guard's reason and no server address, since none was connected to.
					// In report mode what passes was outside the rule set: forwarded, and logged as would_deny.
					server, reason, decision := "-", "-", ""
					switch want {
					case passes:
						server = `[0-9a-f.:]+`
						if report {
							reason, decision = ReasonDestinationNotAllowed, " ruleset=watched decision=would_deny"
						}
					case refused:
						reason = ReasonDestinationAddress
						if report {
							decision = " ruleset=watched decision=deny"
						}
					}
					line := fmt.Sprintf(`method=%s host=%s port=%d status=%d .* server=%s reason=%s%s$`, method, regexp.QuoteMeta(host), port, want, server, reason, decision)
					waitForLogMatch(t, sq, line)
					if want == passes {
						// The backend names the address it was reached at: one the name resolves to, never another.
						addr := strings.TrimPrefix(got.Body, "backend ")
						if !slices.Contains(resolver.records[host+"."], addr) {
							t.Errorf("%s %s reached %q, not one of %q", method, host, got.Body, resolver.records[host+"."])
						}
					}
				}
			}
			// A name that does not resolve gets Squid's usual error (502 for GET, 500 for CONNECT), not a
			// guard's refusal.
			for method, got := range map[string]squidtest.Result{
				"GET":     c.Get(t, fmt.Sprintf("http://nxdomain.allowed.test:%d/", hp), "nxdomain.allowed.test"),
				"CONNECT": c.Connect(t, fmt.Sprintf("nxdomain.allowed.test:%d", tp)),
			} {
				if got.Status < 500 {
					t.Errorf("%s nxdomain.allowed.test: got %d, want Squid's 5xx for a failed lookup", method, got.Status)
				}
				waitForLogMatch(t, sq, `method=`+method+` host=nxdomain\.allowed\.test .* status=5[0-9][0-9] .* reason=(-|`+ReasonDestinationNotAllowed+` ruleset=watched decision=would_deny)$`)
			}
			// IP literals never match the allow-list, in any spelling: refused before any lookup.
			for _, lit := range []string{"[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::1]", "127.0.0.1", "2130706433", "169.254.169.254", "[fe80::1]"} {
				if got := c.Get(t, fmt.Sprintf("http://%s:%d/", lit, hp), fmt.Sprintf("%s:%d", lit, hp)); got.Status != refused {
					t.Errorf("GET literal %s: got %d, want 403", lit, got.Status)
				}
				if got := c.Connect(t, fmt.Sprintf("%s:%d", lit, tp)); got.Status != refused {
					t.Errorf("CONNECT literal %s: got %d, want 403", lit, got.Status)
				}
			}
			if report {
				return // report mode forwards names outside its list, so it looks them up
			}
			// A name outside the allow-list is refused without being looked up.
			if got := c.Get(t, fmt.Sprintf("http://public.other.test:%d/", hp), "public.other.test"); got.Status != refused {
				t.Errorf("GET public.other.test: got %d, want 403", got.Status)
			}
			if resolver.wasAsked("public.other.test.") {
				t.Errorf("Squid looked up public.other.test, a name the allow-list refuses")
			}
		})
	}
}

// runInOwnNetns runs the test named test again, in a new network namespace, and fails with its output when it
// fails there.
func runInOwnNetns(t *testing.T, test string) {
	t.Helper()
	squidtest.Path(t) // fails or skips as every Squid test does
	if os.Geteuid() != 0 {
		t.Fatal("this test runs Squid in a network namespace of its own, which needs root (or run with -short)")
	}
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--net", "--", os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v") //nolint:gosec // the test binary itself
	cmd.Env = append(os.Environ(), netnsEnv+"="+self)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in its network namespace: %v\n%s", test, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+test) {
		t.Fatalf("%s did not pass in its network namespace:\n%s", test, out)
	}
	t.Logf("in its network namespace:\n%s", out)
}

// mustBeOwnNetns refuses to go on in the network namespace the test was started in: the test adds addresses
// to the loopback interface, which it may do only in a namespace it made. The parent passes its namespace in
// the environment variable.
func mustBeOwnNetns(t *testing.T) {
	t.Helper()
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if parent := os.Getenv(netnsEnv); self == parent || !strings.HasPrefix(parent, "net:") {
		t.Fatalf("%s=%q: this process is in %s, not a namespace of its own", netnsEnv, parent, self)
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// namespaceBackends listen on every address of the namespace and answer with the address they were reached at.
type namespaceBackends struct{ http, tls *httptest.Server }

func newNamespaceBackends(t *testing.T) namespaceBackends {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		host, _, _ := net.SplitHostPort(local.String())
		_, _ = fmt.Fprintf(w, "backend %s", host) // a failed write shows as a wrong body
	})
	listen := func() net.Listener {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	b := namespaceBackends{http: httptest.NewUnstartedServer(h), tls: httptest.NewUnstartedServer(h)}
	b.http.Listener, b.tls.Listener = listen(), listen()
	b.http.Start()
	b.tls.StartTLS()
	t.Cleanup(func() { b.http.Close(); b.tls.Close() })
	return b
}

func (b namespaceBackends) roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(b.tls.Certificate())
	return p
}

// testResolver is a DNS server for the test's names: A and AAAA answers with TTL 0, NXDOMAIN for other
// names. It records what it was asked.
type testResolver struct {
	conn    net.PacketConn
	records map[string][]string // fully qualified name -> addresses
	mu      sync.Mutex
	asked   map[string]bool
}

func startResolver(t *testing.T, addr string, records map[string][]string) *testResolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &testResolver{conn: pc, records: map[string][]string{}, asked: map[string]bool{}}
	for name, addrs := range records {
		r.records[name+"."] = addrs
	}
	done := make(chan struct{})
	go func() { defer close(done); r.serve() }()
	t.Cleanup(func() { _ = pc.Close(); <-done }) // closing is what stops serve
	return r
}

func (r *testResolver) wasAsked(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked[name]
}

func (r *testResolver) serve() {
	buf := make([]byte, 4096)
	for {
		n, from, err := r.conn.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		if resp, err := r.answer(buf[:n]); err == nil {
			_, _ = r.conn.WriteTo(resp, from) // a lost answer shows as Squid's lookup failure
		}
	}
}

func (r *testResolver) answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	name := strings.ToLower(q.Name.String())
	r.mu.Lock()
	r.asked[name] = true
	addrs, known := r.records[name]
	r.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	bld := dnsmessage.NewBuilder(nil, rh)
	errs := []error{bld.StartQuestions(), bld.Question(q), bld.StartAnswers()}
	for _, s := range addrs {
		a := netip.MustParseAddr(s)
		hdr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET}
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			errs = append(errs, bld.AResource(hdr, dnsmessage.AResource{A: a.As4()}))
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			errs = append(errs, bld.AAAAResource(hdr, dnsmessage.AAAAResource{AAAA: a.As16()}))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return bld.Finish()
}

// waitForLogMatch waits for an access log line matching the regular expression re.
func waitForLogMatch(t *testing.T, sq *squidtest.Squid, re string) {
	t.Helper()
	rx := regexp.MustCompile("(?m)" + re)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if rx.MatchString(sq.File("access.log")) {
			return
		}
	}
	t.Errorf("access log lacks a line matching %q:\n%s", re, sq.File("access.log"))
}
