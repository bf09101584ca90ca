package proxyconf

import (
	"fmt"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// TestManagerPortAnswersOnlyLocalManagerRequests runs Squid with RenderOptions.ManagerPort, in both layouts
// (without and with a policy, whose every rule notes its decision), and checks that its cache manager answers a local client on that port
// and nobody else: not another client on the port, not a proxy request on the port, not the manager on the
// proxy port; and that the manager's requests stay out of the access log, which counts clients' requests.
func TestManagerPortAnswersOnlyLocalManagerRequests(t *testing.T) {
	t.Parallel()
	for name, denied := range map[string][]string{"without a policy": nil, "with a policy": {"denied.test"}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := squidtest.NewUpstreams(t)
			hp := squidtest.Port(t, b.HTTP)
			dir := squidtest.Dir(t)
			opts := testOptions(t, dir, []string{"allowed.test"})
			opts.ManagerPort = squidtest.FreePort(t)
			s := Settings{
				AllowedClientCIDRs:  []string{"127.0.0.0/8"},
				AllowedDestinations: []string{"allowed.test"},
				AllowedPorts:        []int{hp},
				DeniedDestinations:  denied,
			}
			sq := startSquidWith(t, s, opts, dir)
			manager := fmt.Sprintf("127.0.0.1:%d", opts.ManagerPort)
			allowed := fmt.Sprintf("http://allowed.test:%d/", hp)
			tests := map[string]struct {
				proxy, from, target string
				want                int
			}{
				// The two forms a cache manager client sends: the old scheme, and Squid's internal path.
				"manager, scheme form, from loopback":     {manager, "127.0.0.1", "cache_object://localhost/counters", 200},
				"manager, internal path, from loopback":   {manager, "127.0.0.1", "/squid-internal-mgr/counters", 200},
				"manager from another local address":      {manager, "127.0.0.2", "cache_object://localhost/counters", 403},
				"a proxy request on the manager port":     {manager, "127.0.0.1", allowed, 403},
				"manager on the proxy port":               {sq.Proxy, "127.0.0.1", "cache_object://localhost/counters", 403},
				"manager on the proxy port, internal URL": {sq.Proxy, "127.0.0.1", fmt.Sprintf("http://allowed.test:%d/squid-internal-mgr/counters", hp), 403},
				"the proxy port still serves":             {sq.Proxy, "127.0.0.1", allowed, 200},
			}
			proxyPortRequests := 0
			for name, tt := range tests {
				c := squidtest.Client{Proxy: tt.proxy, From: tt.from}
				got, err := c.TryGet(tt.target, "localhost")
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				if got.Status != tt.want {
					t.Errorf("%s: status %d, want %d: %s", name, got.Status, tt.want, got.Body)
				}
				if tt.want == 200 && tt.proxy == manager && !strings.Contains(got.Body, "client_http.requests") {
					t.Errorf("%s: no counters in the answer:\n%s", name, got.Body)
				}
				if tt.proxy == sq.Proxy {
					proxyPortRequests++
				}
			}
			// Only the proxy port's requests are logged; squidtest.Start's probes of the ports sent none.
			var logged []string
			for _, l := range waitForLogLines(t, sq, proxyPortRequests) {
				if !strings.Contains(l, " method=- ") {
					logged = append(logged, l)
				}
			}
			if len(logged) != proxyPortRequests {
				t.Errorf("%d access log lines, want %d (the proxy port's requests only):\n%s", len(logged), proxyPortRequests, strings.Join(logged, "\n"))
			}
		})
	}
}
