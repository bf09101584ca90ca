package proxyconf

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// TestCredentialsOnTheWire: what a client sends to a TLS listener crosses the network without its proxy
// credentials in any readable form, while the same capture of a plain listener shows them: the control that
// proves the capture would catch a leak. tcpdump records loopback, so the test runs in a network namespace of
// its own, where it sees the test's traffic and nobody else's.
func TestCredentialsOnTheWire(t *testing.T) {
	t.Parallel()
	if os.Getenv(netnsEnv) == "" {
		runInOwnNetns(t, "TestCredentialsOnTheWire")
		return
	}
	mustBeOwnNetns(t)
	run(t, "ip", "link", "set", "lo", "up")

	b := squidtest.NewUpstreams(t)
	hp, tp := squidtest.Port(t, b.HTTP), squidtest.Port(t, b.TLS)
	ca := testutil.NewCA(t)
	chain, key := ca.Leaf(t)
	rootFile := filepath.Join(t.TempDir(), "root.pem")
	if err := os.WriteFile(rootFile, []byte(ca.RootPEM), 0o644); err != nil {
		t.Fatal(err)
	}
	user, pass := "wire-user", "wire-pass-Zq81x"
	basic := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	// What must not be readable: the header's name, the password, and the header's value, which is as good as
	// the password.
	secrets := [][]byte{[]byte("proxy-authorization"), []byte(pass), []byte(basic)}

	for name, tc := range map[string]struct {
		tls bool
	}{
		"tls listener":                 {tls: true},
		"plain listener (the control)": {tls: false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := Settings{
				AllowedClientCIDRs:  []string{"127.0.0.0/8"},
				AllowedDestinations: []string{"allowed.test"},
				AllowedPorts:        []int{tp, hp},
				Users:               []BasicAuth{{Username: user, Password: pass}},
			}
			if tc.tls {
				s.TLS = &TLSSettings{CertificatePEM: chain, PrivateKeyPEM: key}
			}
			squid := startSquid(t, s, testHosts)
			proxyArgs := []string{"--proxy", "http://" + squid.Proxy}
			if tc.tls {
				proxyArgs = []string{"--proxy", "https://" + squid.Proxy, "--proxy-cacert", rootFile}
			}
			port := netip.MustParseAddrPort(squid.Proxy).Port()
			// Started after Squid: the connections that waited for it to listen are not the test's.
			capture := testutil.StartCapture(t, nil, "lo", fmt.Sprintf("tcp port %d", port))

			// Both ways clients use the proxy: an http:// URL the proxy fetches, and a CONNECT tunnel. curl sends
			// the credentials with the first request on each connection.
			targets := []string{fmt.Sprintf("http://allowed.test:%d/", hp), fmt.Sprintf("https://allowed.test:%d/", tp)}
			for _, target := range targets {
				args := append([]string{"-sS", "-k", "--max-time", "30", "--proxy-user", user + ":" + pass}, proxyArgs...)
				out, err := exec.Command("curl", append(args, target)...).CombinedOutput()
				if err != nil || string(out) != "backend allowed.test" {
					t.Fatalf("curl %s through %s: %v\n%s\n%s", target, squid.Proxy, err, out, squid.File("cache.log"))
				}
			}

			conns := capture.WaitConns(t, port, len(targets), time.Minute)
			if len(conns) != len(targets) {
				t.Fatalf("the capture holds %d connections to the proxy, want one per curl (%d)", len(conns), len(targets))
			}
			for i, cn := range conns {
				if len(cn.ClientBytes) == 0 || len(cn.ServerBytes) == 0 {
					t.Fatalf("connection %d (%s): the capture holds %d bytes from the client, %d from Squid; want both",
						i, cn.Client, len(cn.ClientBytes), len(cn.ServerBytes))
				}
				found := append(testutil.Readable(cn.ClientBytes, secrets), testutil.Readable(cn.ServerBytes, secrets)...)
				if !tc.tls {
					// The control: over the plain listener the very search below finds the header and its
					// value in what curl sent, so it would find them over TLS too, were they there.
					if want := "Proxy-Authorization: Basic " + basic + "\r\n"; len(found) < 2 || !bytes.Contains(cn.ClientBytes, []byte(want)) {
						t.Errorf("connection %d: the plain listener's capture shows %q, want the header and its value (%q); the capture would miss a leak. It holds:\n%.300q",
							i, found, want, cn.ClientBytes)
					}
					continue
				}
				// Both sides speak TLS from the first byte (a handshake record), so nothing went before it in clear.
				for side, b := range map[string][]byte{"client": cn.ClientBytes, "proxy": cn.ServerBytes} {
					if b[0] != 0x16 || b[1] != 0x03 {
						t.Errorf("connection %d: the %s's first bytes are %.40q, not a TLS handshake record", i, side, b)
					}
				}
				if len(found) > 0 {
					t.Errorf("connection %d to the TLS listener carries %q in clear", i, found)
				}
			}
			// Every captured byte, packet headers included, packet by packet: this also covers any packet the
			// reassembly above left out.
			found := testutil.Readable(capture.Raw(), secrets)
			switch {
			case tc.tls && len(found) > 0:
				t.Errorf("the capture of the TLS listener holds %q in clear", found)
			case !tc.tls && len(found) < 2:
				t.Errorf("the raw capture of the plain listener shows only %q, want the header and its value", found)
			}
		})
	}
}
