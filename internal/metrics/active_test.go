package metrics

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/metricstest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/squidtest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// TestActiveRequestsGauges is the in-flight gauges' check on real parts: real Squid, ActiveScript run by bash
// as a proxy runs it (every second here, every ActiveInterval on a proxy), and real mtail with Program, fed
// both ways a proxy feeds it: the file a VM's mtail tails, replaced whole each time, and the UDP port a pod's
// mtail reads. Through Squid: 3 CONNECT tunnels held open from 127.0.0.1, slow plain requests (held by their
// server) 1 from 127.0.0.1, 2 from 127.0.0.2 and 1 from 127.0.0.3, and a keep-alive connection from
// 127.0.0.4 idle after its request. The gauges must read 7 requests (the idle connection has none; the
// report's own request on the manager port is not a client's, else 8), 3 tunnels and 4 for the busiest client
// (127.0.0.1, else 5 with the report's own request); then, all closed, 0, 0 and 0. The line counts as no access
// log line, read or unreadable.
func TestActiveRequestsGauges(t *testing.T) {
	t.Parallel()
	slow := newHeldServer(t)
	tunnels := newTunnelServer(t)
	s := proxyconf.Settings{
		AllowedClientCIDRs:  []string{"127.0.0.0/29"},
		AllowedDestinations: []string{"allowed.test"},
		AllowedPorts:        []int{slow.port, tunnels.port},
	}
	dir := squidtest.Dir(t)
	sq, opts := startSquid(t, dir, s, "stdio:"+filepath.Join(dir, "access.log"))

	progs := filepath.Join(t.TempDir(), "progs")
	if err := os.Mkdir(progs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(progs, ProgramFile), Program, 0o644); err != nil {
		t.Fatal(err)
	}
	// The file does not exist before the script's first round, as on a VM whose service starts after mtail.
	file := filepath.Join(t.TempDir(), "active")
	udp := fmt.Sprintf("udp://127.0.0.1:%d", squidtest.FreePort(t))
	mtails := map[string]*metricstest.Process{file: metricstest.Mtail(t, progs, file), udp: metricstest.Mtail(t, progs, udp)}
	for to := range mtails {
		runActiveScript(t, ActiveScript(opts.ManagerPort, opts.HealthPort, 1, to))
	}
	start := time.Now()
	want := func(requests, tunnels, busiest float64) {
		t.Helper()
		for to, m := range mtails {
			m.WaitFor(t, 30*time.Second, fmt.Sprintf("serve %v requests, %v tunnels, busiest client %v (from %s)", requests, tunnels, busiest, to), func() (bool, string) {
				got, err := metricstest.TryScrape(m.URL+"/metrics", "prog")
				if err != nil {
					return false, err.Error()
				}
				last := fmt.Sprintf("%v %v %v", got[ActiveRequests], got[ActiveTunnels], got[ClientActiveRequestsMax])
				_, known := got[ActiveRequests]
				return known && got[ActiveRequests] == requests && got[ActiveTunnels] == tunnels && got[ClientActiveRequestsMax] == busiest, last
			})
		}
		t.Logf("%v: %v requests, %v tunnels, busiest client %v", time.Since(start), requests, tunnels, busiest)
	}

	var held []net.Conn
	hold := func(from string) net.Conn {
		c, err := (squidtest.Client{Proxy: sq.Proxy, From: from, Timeout: 2 * time.Minute}).Dial()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		return c
	}
	for range 3 {
		c := hold("127.0.0.1")
		target := fmt.Sprintf("allowed.test:%d", tunnels.port)
		if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT %s: %v %v", target, resp, err)
		}
	}
	for _, from := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.2", "127.0.0.3"} {
		if _, err := fmt.Fprintf(hold(from), "GET http://allowed.test:%d/slow HTTP/1.1\r\nHost: allowed.test\r\n\r\n", slow.port); err != nil {
			t.Fatal(err)
		}
	}
	// Every slow request is in flight once its server holds it.
	for i := range 4 {
		select {
		case <-slow.arrived:
		case <-time.After(30 * time.Second):
			t.Fatalf("the slow server got %d of 4 requests", i)
		}
	}
	idle := hold("127.0.0.4")
	if _, err := fmt.Fprintf(idle, "GET http://allowed.test:%d/fast HTTP/1.1\r\nHost: allowed.test\r\n\r\n", slow.port); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("the keep-alive request: %v %v", resp, err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	want(7, 3, 4)
	if b, err := os.ReadFile(file); err != nil || string(b) != ActiveLinePrefix+" requests=7 tunnels=3 busiest_client=4\n" {
		t.Errorf("the file mtail reads: %q, %v", b, err)
	}

	slow.release()
	for _, c := range held {
		_ = c.Close() // the client's side going away is the point
	}
	want(0, 0, 0)
	for to, m := range mtails {
		got := metricstest.Scrape(t, m.URL+"/metrics", "prog")
		if got[LogLinesTotal] != 0 || got[LogLinesUnparsedTotal] != 0 {
			t.Errorf("from %s: %v log lines, %v unparsed, want none", to, got[LogLinesTotal], got[LogLinesUnparsedTotal])
		}
	}
}

// runActiveScript runs script with bash, as a proxy does, until the test ends, and then checks that it stops
// at SIGTERM by itself (a pod's first process gets nothing else) with status 0.
func runActiveScript(t *testing.T, script string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "active.sh")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", path)
	out := &testutil.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // it may have exited: then done says so
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the script ended with %v at SIGTERM:\n%s", err, out)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("the script did not stop at SIGTERM:\n%s", out)
		}
		// Its last sleep, if any.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
}

// heldServer answers /slow only once released, and anything else at once.
type heldServer struct {
	port    int
	arrived chan struct{}
	release func()
}

func newHeldServer(t *testing.T) *heldServer {
	t.Helper()
	released := make(chan struct{})
	h := &heldServer{arrived: make(chan struct{}, 16)}
	h.release = sync.OnceFunc(func() { close(released) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Minute, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			h.arrived <- struct{}{}
			<-released
		}
		_, _ = io.WriteString(w, "ok") // a failed write fails the client's read
	})}
	go func() { _ = srv.Serve(l) }() // ends at Close
	// Released first, so that Close does not wait for held handlers.
	t.Cleanup(func() { h.release(); _ = srv.Close() })
	h.port = listenerPort(t, l)
	return h
}

// tunnelServer accepts connections and keeps them open until the client closes its side.
type tunnelServer struct{ port int }

func newTunnelServer(t *testing.T) tunnelServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			go func() { _, _ = io.Copy(io.Discard, c); _ = c.Close() }() // until the tunnel's far end closes
		}
	}()
	return tunnelServer{port: listenerPort(t, l)}
}

func listenerPort(t *testing.T, l net.Listener) int {
	t.Helper()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("listener address %v is not TCP", l.Addr())
	}
	return addr.Port
}
