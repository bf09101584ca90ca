package proxyconf

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// metricsSettings are valid settings with metrics on the given ranges and ports.
func metricsSettings(port, squidPort int, cidrs ...string) Settings {
	return Settings{Port: 3128, AllowedDestinations: []string{"example.com"}, LogFormat: LogFormatJSON,
		Metrics: &MetricsSettings{Port: port, SquidPort: squidPort, AllowedClientCIDRs: cidrs}}
}

func TestRenderNftablesMetrics(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		settings Settings
		v4, v6   []string // the metrics sets' elements
		ports    string   // the ports the chain guards; "" for no chain
	}{
		"no metrics": {
			settings: Settings{Port: 3128, AllowedDestinations: []string{"example.com"}},
		},
		"default ports": {
			settings: metricsSettings(0, 0, "10.8.0.0/16"),
			v4:       []string{"10.8.0.0/16"},
			ports:    "{ 3903, 9301 }",
		},
		"own ports, both families": {
			settings: metricsSettings(9100, 9101, "192.168.7.0/24", "fd00:1::/64", "203.0.113.4/32"),
			v4:       []string{"192.168.7.0/24", "203.0.113.4/32"},
			v6:       []string{"fd00:1::/64"},
			ports:    "{ 9100, 9101 }",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := RenderNftables(tc.settings)
			if err != nil {
				t.Fatal(err)
			}
			prefixes := func(set string) []string {
				var out []string
				for _, p := range nftSetElements(t, b, set) {
					out = append(out, p.String())
				}
				return out
			}
			if got := prefixes(nftMetricsV4); !slices.Equal(got, tc.v4) {
				t.Errorf("IPv4 metrics clients %q, want %q", got, tc.v4)
			}
			if got := prefixes(nftMetricsV6); !slices.Equal(got, tc.v6) {
				t.Errorf("IPv6 metrics clients %q, want %q", got, tc.v6)
			}
			if tc.ports == "" {
				// Without metrics the ruleset is the one rendered before metrics existed: nothing on input.
				for _, no := range []string{NftablesMetricsChain, "hook input", "metrics"} {
					if bytes.Contains(b, []byte(no)) {
						t.Errorf("ruleset without metrics has %q:\n%s", no, b)
					}
				}
				return
			}
			for _, want := range []string{
				"chain " + NftablesMetricsChain + " {\n\t\ttype filter hook input priority filter; policy accept;\n",
				"tcp dport " + tc.ports + " ip saddr @" + nftMetricsV4 + " accept\n",
				"tcp dport " + tc.ports + " ip6 saddr @" + nftMetricsV6 + " accept\n",
				"tcp dport " + tc.ports + " counter reject with tcp reset\n",
			} {
				if !strings.Contains(string(b), want) {
					t.Errorf("ruleset lacks %q:\n%s", want, b)
				}
			}
			// The reject comes after both accepts.
			if strings.Index(string(b), "reject with tcp reset") < strings.Index(string(b), "ip6 saddr @"+nftMetricsV6) {
				t.Errorf("the metrics reject comes before an accept:\n%s", b)
			}
		})
	}
}

// The metrics chain in a real kernel: a client inside the metrics ranges reaches both metrics ports, one
// outside is reset on them while it still reaches the proxy's port, and overlapping ranges load.
func TestMetricsBackstopInKernel(t *testing.T) {
	t.Parallel()
	s := metricsSettings(9100, 9101, "198.18.5.0/24", "198.18.5.128/25", "fd00:5::/64")
	ruleset, err := RenderNftables(s)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "backstop.nft")
	if err := os.WriteFile(f, ruleset, 0o600); err != nil {
		t.Fatal(err)
	}
	const server = "198.18.0.9"
	cases := []struct {
		from string
		port int
		gets bool
	}{
		{"198.18.5.7", 9100, true},
		{"198.18.5.200", 9101, true},
		{"198.18.6.7", 9100, false},
		{"198.18.6.7", 9101, false},
		{"198.18.6.7", 3128, true}, // the proxy's port is not the metrics chain's
		{"198.18.6.7", 9102, true},
	}
	privateNetns(t, func() {
		for _, a := range []string{server, "198.18.5.7", "198.18.5.200", "198.18.6.7"} {
			if out, err := exec.Command("ip", "addr", "add", a+"/32", "dev", "lo").CombinedOutput(); err != nil {
				t.Errorf("ip addr add %s: %v: %s", a, err, out)
				return
			}
		}
		if out, err := exec.Command("nft", "-f", f).CombinedOutput(); err != nil {
			t.Errorf("nft -f: %v\n%s", err, out)
			return
		}
		for _, c := range cases {
			hostPort := net.JoinHostPort(server, strconv.Itoa(c.port))
			l, err := acceptAndClose(hostPort)
			if err != nil {
				t.Errorf("listen %s: %v", hostPort, err)
				continue
			}
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(c.from)}}
			conn, err := d.Dial("tcp", hostPort)
			if err == nil {
				_ = conn.Close()
			}
			_ = l.Close()
			if got := err == nil; got != c.gets {
				t.Errorf("from %s to port %d: connected %v, want %v (%v)", c.from, c.port, got, c.gets, err)
			}
		}
		out, err := exec.Command("nft", "list", "set", "inet", NftablesTable, nftMetricsV4).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "198.18.5.0/24") {
			t.Errorf("metrics set after loading: %v\n%s", err, out)
		}
	})
}
