package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
)

// startOrigin runs bench origin on two free ports of 127.0.0.1 until the test ends; it returns their
// addresses.
func startOrigin(t *testing.T) (plain, tunnel string) {
	t.Helper()
	plain = fmt.Sprintf("127.0.0.1:%d", squidtest.FreePort(t))
	tunnel = fmt.Sprintf("127.0.0.1:%d", squidtest.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"origin", plain, tunnel}, nil, &bytes.Buffer{}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("origin: %v", err)
		}
	})
	if err := run(context.Background(), []string{"wait", "-timeout", "10s", plain, tunnel}, nil, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	return plain, tunnel
}

// startPlainSquid runs Squid on loopback with the config given (its listening and file lines are added).
func startPlainSquid(t *testing.T, rules string) (proxy string, pid int) {
	t.Helper()
	dir := squidtest.Dir(t)
	proxy = fmt.Sprintf("127.0.0.1:%d", squidtest.FreePort(t))
	health := fmt.Sprintf("127.0.0.1:%d", squidtest.FreePort(t))
	conf := fmt.Sprintf("http_port %s\nhttp_port %s\n%s\ncache deny all\naccess_log stdio:%s/access.log\ncache_log %s/cache.log\npid_filename none\ncoredump_dir %s\ndns_nameservers 127.0.0.1\nshutdown_lifetime 1 seconds\n",
		proxy, health, rules, dir, dir, dir)
	path := filepath.Join(dir, "squid.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(squidtest.Path(t), "-N", "-n", squidtest.ServiceName(t), "-f", path) //nolint:gosec // the test's own Squid
	squidtest.Start(t, cmd, proxy, health, dir)
	return proxy, cmd.Process.Pid
}

// TestTunnelsAndHold runs the CONNECT client against the real Squid: tunnels at saturation and at a rate,
// the same straight to the origin, and the memory of Squid with tunnels held open. A proxy that refuses is
// reported, not measured.
func TestTunnelsAndHold(t *testing.T) {
	t.Parallel()
	_, target := startOrigin(t)
	proxy, pid := startPlainSquid(t, "http_access allow all")
	refusing, _ := startPlainSquid(t, "http_access deny all")
	tests := map[string]struct {
		args []string
		want string // a prefix of the output, or of the error when fail
		fail bool
	}{
		"saturation":         {args: []string{"tunnels", "-proxy", proxy, "-c", "4", "-duration", "300ms"}, want: "tunnels="},
		"at a rate":          {args: []string{"tunnels", "-proxy", proxy, "-c", "4", "-duration", "500ms", "-rate", "40"}, want: "tunnels="},
		"straight":           {args: []string{"tunnels", "-c", "2", "-duration", "200ms"}, want: "tunnels="},
		"held":               {args: []string{"hold", "-proxy", proxy, "-n", "40", "-pid", fmt.Sprint(pid)}, want: "held=40 "},
		"refused":            {args: []string{"tunnels", "-proxy", refusing, "-duration", "1s"}, want: "CONNECT " + target + ": 403", fail: true},
		"refused while held": {args: []string{"hold", "-proxy", refusing, "-n", "5", "-pid", fmt.Sprint(pid)}, want: "after 0 tunnels", fail: true},
		"no such process":    {args: []string{"hold", "-proxy", proxy, "-n", "1", "-pid", "999999999"}, want: "", fail: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			err := run(context.Background(), append(tc.args, "-target", target), nil, &out)
			if tc.fail {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v (%s), want an error saying %q", err, out.String(), tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(out.String(), tc.want) {
				t.Fatalf("printed %q, want it to start with %q", out.String(), tc.want)
			}
			res, err := readDataplaneResults(strings.NewReader("s m " + out.String()))
			if err != nil {
				t.Fatal(err)
			}
			switch tc.args[0] {
			case "tunnels":
				if n, _ := res.figure("s", "m", "tunnels"); n < 1 {
					t.Errorf("no tunnel completed: %s", out.String())
				}
			case "hold":
				idle, _ := res.figure("s", "m", "rss_idle_kib")
				held, _ := res.figure("s", "m", "rss_held_kib")
				if idle <= 0 || held <= 0 {
					t.Errorf("no memory read: %s", out.String())
				}
			}
		})
	}
}

// TestOriginAnswersItsBody: what the tunnels check they got through is what the origin sends.
func TestOriginAnswersItsBody(t *testing.T) {
	t.Parallel()
	plain, _ := startOrigin(t)
	c := &tunnelClient{target: plain}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.once(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestOriginAnswersDNS: a resolver pointed at the origin's DNS gets "no such name" for any name and type.
func TestOriginAnswersDNS(t *testing.T) {
	t.Parallel()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- answerNXDOMAIN(pc) }()
	t.Cleanup(func() {
		_ = pc.Close()
		if err := <-done; err != nil {
			t.Errorf("answerNXDOMAIN: %v", err)
		}
	})
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", pc.LocalAddr().String())
	}}
	tests := map[string]func(context.Context) error{
		"A and AAAA": func(ctx context.Context) error { _, err := r.LookupHost(ctx, "nothing.bench.example"); return err },
		"PTR":        func(ctx context.Context) error { _, err := r.LookupAddr(ctx, "198.18.0.11"); return err },
	}
	for name, lookup := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			var dnsErr *net.DNSError
			if err := lookup(ctx); !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
				t.Errorf("got %v, want a not-found answer", err)
			}
		})
	}
	for name, q := range map[string][]byte{
		"too short":   {0, 1, 0},
		"an answer":   {0, 1, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1},
		"no question": {0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"cut name":    {0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 5, 'a'},
	} {
		if _, ok := nxdomain(q); ok {
			t.Errorf("%s: nxdomain answered", name)
		}
	}
}
