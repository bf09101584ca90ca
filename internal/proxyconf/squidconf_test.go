package proxyconf

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// testHosts all resolve to 127.0.0.1 through the test's hosts file; which of them Squid lets through is
// decided by the allow-list alone.
var testHosts = []string{
	"allowed.test", "denied.test", "example.com", "www.example.com", "deep.sub.example.com",
	"evilexample.com", "example.com.evil.test",
}

// request is one exchange with the proxy and what must come back.
type request struct {
	name       string
	from       string // source address; 127.0.0.1 when empty
	user, pass string
	via        string // "health" sends it to the health port instead of the proxy port
	connect    string // CONNECT host:port; otherwise GET url
	url, host  string
	want       int
	wantBody   string
}

func runRequests(t *testing.T, b squidtest.Upstreams, sq *squidtest.Squid, reqs []request) {
	t.Helper()
	for _, r := range reqs {
		from := r.from
		if from == "" {
			from = "127.0.0.1"
		}
		c := b.Client(sq, from)
		c.User, c.Pass = r.user, r.pass
		if r.via == "health" {
			c.Proxy = sq.Health
		}
		var got squidtest.Result
		if r.connect != "" {
			got = c.Connect(t, r.connect)
		} else {
			host := r.host
			if host == "" {
				host = strings.Split(strings.TrimPrefix(r.url, "http://"), "/")[0]
			}
			got = c.Get(t, r.url, host)
		}
		if got.Status != r.want || (r.wantBody != "" && got.Body != r.wantBody) {
			body := got.Body
			if len(body) > 80 {
				body = body[:80] + "..."
			}
			t.Errorf("%s: got %d %q, want %d %q", r.name, got.Status, body, r.want, r.wantBody)
		}
	}
}

// TestSquidEnforcesSettings runs the real Squid on each rendered config and checks, request by request, that
// it allows exactly what the settings say.
func TestSquidEnforcesSettings(t *testing.T) {
	t.Parallel()
	b := squidtest.NewUpstreams(t)
	hp, tp, op := squidtest.Port(t, b.HTTP), squidtest.Port(t, b.TLS), squidtest.Port(t, b.Other)
	httpURL := func(host string) string { return fmt.Sprintf("http://%s:%d/", host, hp) }
	tlsAddr := func(host string) string { return fmt.Sprintf("%s:%d", host, tp) }
	ok := func(host string) string { return "backend " + host }
	user, pass := "Egress.User", "s3cret pass:%word é"

	tests := map[string]struct {
		settings Settings
		requests []request
		logged   []string // substrings the access log must show
	}{
		"allow-list, client range and ports": {
			settings: Settings{
				AllowedClientCIDRs: []string{"127.0.0.1/32"},
				// Redundant on purpose: Squid refuses ".example.com" next to "example.com" unless collapsed.
				AllowedDestinations: []string{"allowed.test", "example.com", ".example.com", "www.example.com"},
				AllowedPorts:        []int{tp, hp},
			},
			requests: []request{
				{name: "allowed host over HTTP", url: httpURL("allowed.test"), want: 200, wantBody: ok("allowed.test")},
				{name: "allowed host over CONNECT", connect: tlsAddr("allowed.test"), want: 200, wantBody: ok("allowed.test")},
				{name: "host outside the list over HTTP", url: httpURL("denied.test"), want: 403},
				{name: "host outside the list over CONNECT", connect: tlsAddr("denied.test"), want: 403},
				{name: "suffix domain itself", url: httpURL("example.com"), want: 200, wantBody: ok("example.com")},
				{name: "subdomain of suffix", url: httpURL("www.example.com"), want: 200, wantBody: ok("www.example.com")},
				{name: "deep subdomain of suffix over CONNECT", connect: tlsAddr("deep.sub.example.com"), want: 200},
				{name: "look-alike of suffix", url: httpURL("evilexample.com"), want: 403},
				{name: "look-alike of suffix over CONNECT", connect: tlsAddr("evilexample.com"), want: 403},
				{name: "suffix as a prefix", url: httpURL("example.com.evil.test"), want: 403},
				{name: "IP literal of an allowed backend", url: fmt.Sprintf("http://127.0.0.1:%d/", hp), want: 403},
				{name: "CONNECT to a port not allowed", connect: fmt.Sprintf("allowed.test:%d", op), want: 403},
				{name: "HTTP to a port not allowed", url: fmt.Sprintf("http://allowed.test:%d/", op), want: 403},
				{name: "client outside allowed CIDRs over HTTP", from: "127.0.0.2", url: httpURL("allowed.test"), want: 403},
				{name: "client outside allowed CIDRs over CONNECT", from: "127.0.0.2", connect: tlsAddr("allowed.test"), want: 403},
				{name: "health check from anywhere", from: "127.0.0.2", via: "health", url: HealthPath, host: "10.1.2.3:3129", want: 200},
				{name: "health port is no proxy", via: "health", url: httpURL("allowed.test"), want: 403},
				{name: "health port is no tunnel", via: "health", connect: tlsAddr("allowed.test"), want: 403},
				// Squid serves its static objects itself whatever the host: the request never leaves.
				{name: "health path on another host is not forwarded", via: "health", url: fmt.Sprintf("http://allowed.test:%d%s", hp, HealthPath), want: 200, wantBody: healthBody},
				{name: "health path is not served on the proxy port", url: HealthPath, host: "allowed.test", want: 403},
				{name: "cache manager", url: fmt.Sprintf("http://allowed.test:%d/squid-internal-mgr/info", hp), want: 403},
				{name: "ftp scheme", url: "ftp://allowed.test/", host: "allowed.test", want: 403},
			},
			logged: []string{
				fmt.Sprintf("client=127.0.0.1 user=- method=CONNECT host=allowed.test port=%d status=200", tp),
				fmt.Sprintf("client=127.0.0.1 user=- method=GET host=allowed.test port=%d status=200", hp),
				fmt.Sprintf("client=127.0.0.1 user=- method=GET host=denied.test port=%d status=403", hp),
			},
		},
		"basic auth": {
			settings: Settings{
				AllowedClientCIDRs:  []string{"127.0.0.0/30"},
				AllowedDestinations: []string{"allowed.test"},
				AllowedPorts:        []int{tp, hp},
				Users:               []BasicAuth{{Username: user, Password: pass}},
			},
			requests: []request{
				{name: "no credentials over HTTP", url: httpURL("allowed.test"), want: 407},
				{name: "no credentials over CONNECT", connect: tlsAddr("allowed.test"), want: 407},
				{name: "wrong password", user: user, pass: pass + "x", url: httpURL("allowed.test"), want: 407},
				{name: "wrong password over CONNECT", user: user, pass: "wrong-password", connect: tlsAddr("allowed.test"), want: 407},
				{name: "user name in other case", user: strings.ToLower(user), pass: pass, url: httpURL("allowed.test"), want: 407},
				{name: "unknown user", user: "nobody", pass: pass, url: httpURL("allowed.test"), want: 407},
				{name: "no credentials, host outside the list", url: httpURL("denied.test"), want: 407},
				{name: "right credentials over HTTP", user: user, pass: pass, url: httpURL("allowed.test"), want: 200, wantBody: ok("allowed.test")},
				{name: "right credentials over CONNECT", user: user, pass: pass, connect: tlsAddr("allowed.test"), want: 200, wantBody: ok("allowed.test")},
				{name: "right credentials from a second address in range", from: "127.0.0.2", user: user, pass: pass, url: httpURL("allowed.test"), want: 200},
				{name: "right credentials, host outside the list", user: user, pass: pass, url: httpURL("denied.test"), want: 403},
				{name: "right credentials, client outside range", from: "127.0.0.5", user: user, pass: pass, url: httpURL("allowed.test"), want: 403},
				{name: "health check needs no credentials", via: "health", url: HealthPath, host: "127.0.0.1", want: 200},
			},
			logged: []string{fmt.Sprintf("client=127.0.0.1 user=%s method=CONNECT host=allowed.test port=%d status=200", user, tp)},
		},
		"empty allow-list denies everything": {
			settings: Settings{AllowedClientCIDRs: []string{"127.0.0.1/32"}, AllowedPorts: []int{tp, hp}},
			requests: []request{
				{name: "HTTP", url: httpURL("allowed.test"), want: 403},
				{name: "CONNECT", connect: tlsAddr("allowed.test"), want: 403},
				{name: "health still answers", via: "health", url: HealthPath, host: "127.0.0.1", want: 200},
			},
		},
		"default ports allow CONNECT to 443 only": {
			settings: Settings{AllowedClientCIDRs: []string{"127.0.0.0/8", "::1/128"}, AllowedDestinations: []string{".test"}},
			requests: []request{
				{name: "CONNECT to another port", connect: tlsAddr("allowed.test"), want: 403},
				{name: "HTTP to another port than 80", url: httpURL("allowed.test"), want: 403},
			},
		},
		"IPv6 ranges admit no IPv4 client": {
			// Squid alone would let "::/80" admit every IPv4 client.
			settings: Settings{AllowedClientCIDRs: []string{"::/0", "::/80", "::1/128"}, AllowedDestinations: []string{"allowed.test"}, AllowedPorts: []int{hp}},
			requests: []request{{name: "IPv4 client", url: httpURL("allowed.test"), want: 403}},
		},
		"overlapping ranges admit their union": {
			// Squid alone would drop 0.0.0.0/0 and ::/0 next to a range inside them.
			settings: Settings{AllowedClientCIDRs: []string{"127.0.0.1/32", "0.0.0.0/0", "::/0"}, AllowedDestinations: []string{"allowed.test"}, AllowedPorts: []int{hp}},
			requests: []request{{name: "client outside the narrow range", from: "127.0.0.2", url: httpURL("allowed.test"), want: 200}},
		},
		"no client ranges refuses every client": {
			settings: Settings{AllowedDestinations: []string{"allowed.test"}, AllowedPorts: []int{tp, hp}},
			requests: []request{
				{name: "HTTP", url: httpURL("allowed.test"), want: 403},
				{name: "CONNECT", connect: tlsAddr("allowed.test"), want: 403},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sq := startSquid(t, tc.settings, testHosts)
			runRequests(t, b, sq, tc.requests)
			for _, want := range tc.logged {
				waitForLog(t, sq, want)
			}
		})
		// The JSON log renders these settings in the annotated layout (accesslog.go#Settings.annotated), whose
		// rules must judge every request as the plain layout does.
		t.Run(name+" json", func(t *testing.T) {
			t.Parallel()
			s := tc.settings
			s.LogFormat = LogFormatJSON
			runRequests(t, b, startSquid(t, s, testHosts), tc.requests)
		})
	}
}

// healthBody is what the health check returns: Squid's own logo.
var healthBody = func() string {
	b, err := os.ReadFile("/usr/share/squid/icons/SN.png")
	if err != nil {
		return "(squid icons missing)"
	}
	return string(b)
}()

// waitForLog waits for an access log line; Squid writes the log after the response.
func waitForLog(t *testing.T, sq *squidtest.Squid, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if strings.Contains(sq.File("access.log"), want) {
			return
		}
	}
	t.Errorf("access log lacks %q:\n%s", want, sq.File("access.log"))
}

func TestCollapseDestinations(t *testing.T) {
	t.Parallel()
	tests := map[string]struct{ in, want []string }{
		"empty":                        {nil, nil},
		"sorted and deduplicated":      {[]string{"b.io", "a.io", "b.io"}, []string{"a.io", "b.io"}},
		"apex covered by suffix":       {[]string{"example.com", ".example.com"}, []string{".example.com"}},
		"subdomain covered by suffix":  {[]string{"a.example.com", ".example.com"}, []string{".example.com"}},
		"inner suffix covered":         {[]string{".a.example.com", ".example.com", "x.a.example.com"}, []string{".example.com"}},
		"look-alike kept":              {[]string{"evilexample.com", ".example.com"}, []string{".example.com", "evilexample.com"}},
		"exact parent does not cover":  {[]string{"example.com", "a.example.com", ".b.example.com"}, []string{".b.example.com", "a.example.com", "example.com"}},
		"top-level suffix covers all":  {[]string{".com", "example.com", ".a.com", "b.org"}, []string{".com", "b.org"}},
		"suffix of a suffix string":    {[]string{".ample.com", "example.com"}, []string{".ample.com", "example.com"}},
		"same name exact and suffixed": {[]string{".io", "io"}, []string{".io"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := collapseDestinations(tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("collapseDestinations(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestRenderSquidConfRejects(t *testing.T) {
	t.Parallel()
	ok := Settings{Port: 3128}
	tests := map[string]struct {
		s    Settings
		opts RenderOptions
	}{
		"invalid destination":        {s: Settings{Port: 3128, AllowedDestinations: []string{"a.com\nhttp_access allow all"}}},
		"health port as proxy port":  {s: Settings{Port: DefaultHealthPort}},
		"custom health port clashes": {s: ok, opts: RenderOptions{HealthPort: 3128}},
		"space in a path":            {s: ok, opts: RenderOptions{HtpasswdPath: "/etc/squid/pass wd"}},
		"newline in a path":          {s: ok, opts: RenderOptions{AccessLog: "stdio:/x\nhttp_access allow all"}},
		"comment in a path":          {s: ok, opts: RenderOptions{PidFile: "/run/x#y"}},
		"invalid nameserver":         {s: ok, opts: RenderOptions{DNSNameservers: []netip.Addr{{}}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if conf, err := RenderSquidConf(tc.s, tc.opts); err == nil {
				t.Errorf("rendered, want an error:\n%s", conf)
			}
		})
	}
}
