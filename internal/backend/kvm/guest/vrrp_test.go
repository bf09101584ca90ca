package guest

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
)

func testVRRP(healthPort int) VRRP {
	return VRRP{
		RouterID: 7, Self: netip.MustParseAddr("198.18.0.10"), Peers: []netip.Addr{netip.MustParseAddr("198.18.0.11")},
		Virtual: netip.MustParseAddr("198.18.0.9"), PrefixLen: 24, HealthPort: healthPort,
	}
}

func vrrpFile(t *testing.T, v VRRP, path string) []byte {
	t.Helper()
	files, err := VRRPFiles(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Path == path {
			return f.Content
		}
	}
	t.Fatalf("no %s among the VRRP files", path)
	return nil
}

// The track script, run by the bash it names, against a health endpoint that answers 200, one that answers
// 503 and a port where nothing listens: only the first keeps the address.
func TestVRRPCheckScript(t *testing.T) {
	t.Parallel()
	var status atomic.Int32 // the handler reads it while the test changes it
	status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != proxyconf.HealthPath {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	dir := t.TempDir()
	script, marker := filepath.Join(dir, "check"), filepath.Join(dir, "reloading")
	// The reload's mark in a folder of the test's own, not the machine's /run.
	body := bytes.ReplaceAll(vrrpFile(t, testVRRP(p), VRRPCheckPath), []byte(ReloadMarkerPath), []byte(marker))
	if err := os.WriteFile(script, body, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func() error { return exec.Command("bash", script).Run() }
	if err := run(); err != nil {
		t.Errorf("track script with Squid answering 200: %v, want success", err)
	}
	status.Store(http.StatusServiceUnavailable)
	if err := run(); err == nil {
		t.Error("track script with the health endpoint answering 503 succeeded")
	}
	srv.Close()
	if err := run(); err == nil {
		t.Error("track script with nothing listening succeeded")
	}
	// A reload marked: Squid's ports are closed for it, and the script keeps the address.
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(); err != nil {
		t.Errorf("track script with nothing listening during a marked reload: %v, want success", err)
	}
	// A mark older than the hold: a reload that never ended.
	stale := time.Now().Add(-(ReloadHoldSeconds + 5) * time.Second)
	if err := os.Chtimes(marker, stale, stale); err != nil {
		t.Fatal(err)
	}
	if err := run(); err == nil {
		t.Error("track script with nothing listening and a stale reload mark succeeded")
	}
}

// The reload hold loads (in a network namespace of the test's own), afresh when run again, and its release
// removes it, whether one runs or not.
func TestReloadHoldLoads(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace of its own (make test runs as root)")
	}
	nft := func(argv []string) (string, error) {
		if argv[0] != nftBin {
			return "", nil // the mark: a file, tested with the track script
		}
		out, err := exec.Command("nft", argv[1:]...).CombinedOutput()
		return string(out), err
	}
	inOwnNetns(t, func() {
		for _, step := range [][][]string{ReloadRelease(), ReloadHold(3128), ReloadHold(3128), ReloadRelease(), ReloadRelease()} {
			for _, argv := range step {
				if out, err := nft(argv); err != nil {
					t.Errorf("%q: %v\n%s", argv, err, out)
					return
				}
			}
		}
		if out, err := exec.Command("nft", "list", "table", "inet", ReloadHoldTable).CombinedOutput(); err == nil {
			t.Errorf("the hold's table is still there after its release:\n%s", out)
		}
		for _, argv := range ReloadHold(3128) {
			if out, err := nft(argv); err != nil {
				t.Errorf("%q: %v\n%s", argv, err, out)
				return
			}
		}
		out, err := exec.Command("nft", "list", "table", "inet", ReloadHoldTable).CombinedOutput()
		if err != nil {
			t.Errorf("nft list: %v\n%s", err, out)
			return
		}
		listed := string(out)
		if strings.Count(listed, "3128 timeout") != 1 || !strings.Contains(listed, "drop") || !strings.Contains(listed, `iifname != "lo"`) {
			t.Errorf("the hold's table does not drop new connections to port 3128 alone, from outside:\n%s", out)
		}
	})
}

// inOwnNetns runs fn in a network namespace of its own, on a thread that ends with it (namespace and all), and
// returns when fn does. fn reports with t.Errorf and returns, never t.Fatal: it runs on another goroutine.
func inOwnNetns(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked, see above
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		fn()
	}()
	<-done
}

// The VRRP table loads (in a network namespace of the test's own) and admits the peers alone.
func TestVRRPNftablesLoads(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace of its own (make test runs as root)")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nft: %v (scripts/install-deps.sh installs nftables)", err)
	}
	v := testVRRP(0)
	v.Peers = append(v.Peers, netip.MustParseAddr("198.18.0.12"))
	f := filepath.Join(t.TempDir(), "vrrp.nft")
	if err := os.WriteFile(f, vrrpFile(t, v, VRRPNftablesPath), 0o644); err != nil {
		t.Fatal(err)
	}
	inOwnNetns(t, func() {
		// Twice: the guest loads it before every start of keepalived.
		for range 2 {
			if out, err := exec.Command("nft", "-f", f).CombinedOutput(); err != nil {
				t.Errorf("nft -f: %v\n%s", err, out)
				return
			}
		}
		out, err := exec.Command("nft", "list", "table", "ip", VRRPTable).CombinedOutput()
		if err != nil {
			t.Errorf("nft list: %v\n%s", err, out)
			return
		}
		if !strings.Contains(string(out), "198.18.0.11, 198.18.0.12") || strings.Count(string(out), "} accept") != 1 ||
			!strings.Contains(string(out), "drop") {
			t.Errorf("the loaded table does not admit the two peers alone:\n%s", out)
		}
	})
}

func TestVRRPRefusesBadGroups(t *testing.T) {
	t.Parallel()
	for name, mutate := range map[string]func(*VRRP){
		"router id 0":         func(v *VRRP) { v.RouterID = 0 },
		"no peer":             func(v *VRRP) { v.Peers = nil },
		"virtual is a peer":   func(v *VRRP) { v.Virtual = v.Peers[0] },
		"self is a peer":      func(v *VRRP) { v.Peers = append(v.Peers, v.Self) },
		"ipv6 virtual":        func(v *VRRP) { v.Virtual = netip.MustParseAddr("fd00::9") },
		"prefix length of 33": func(v *VRRP) { v.PrefixLen = 33 },
	} {
		v := testVRRP(0)
		mutate(&v)
		if _, err := VRRPFiles(v); err == nil {
			t.Errorf("%s: VRRPFiles accepted %+v", name, v)
		}
	}
}

// The user-data of a member writes the VRRP files and starts keepalived after Squid; without VRRP it is
// RenderUserDataWith's, byte for byte.
func TestUserDataForVRRP(t *testing.T) {
	t.Parallel()
	s := proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"example.com"}}
	plain, err := RenderUserDataWith(s, vmguest.RenderOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	none, err := RenderUserDataFor(s, vmguest.RenderOptions(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(plain) != string(none) || strings.Contains(string(plain), "keepalived") {
		t.Error("user-data without VRRP differs from RenderUserDataWith's, or names keepalived")
	}
	v := testVRRP(0)
	ud, err := RenderUserDataFor(s, vmguest.RenderOptions(), nil, &v)
	if err != nil {
		t.Fatal(err)
	}
	text := string(ud)
	for _, path := range []string{KeepalivedTemplatePath, VRRPCheckPath, VRRPNftablesPath, VRRPPrestartPath, KeepalivedDropInPath} {
		if !strings.Contains(text, "path: '"+path+"'") {
			t.Errorf("user-data does not write %s", path)
		}
	}
	// Debian's keepalived.service runs only with a keepalived.conf, which the drop-in's ExecStartPre writes.
	if dropIn := string(vrrpFile(t, v, KeepalivedDropInPath)); !strings.Contains(dropIn, "[Unit]\nConditionFileNotEmpty=\n") {
		t.Errorf("the keepalived drop-in does not reset Debian's ConditionFileNotEmpty:\n%s", dropIn)
	}
	squid, keepalived := strings.Index(text, "[systemctl, restart, squid]"), strings.Index(text, KeepalivedIfMissing)
	if squid < 0 || keepalived < squid {
		t.Errorf("keepalived starts at %d, Squid at %d: want keepalived after Squid", keepalived, squid)
	}
}

// inOwnLoopback runs fn in a network namespace of the test's own with its loopback up; without root, which
// that needs, the test is skipped.
func inOwnLoopback(t *testing.T, fn func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace of its own (make test runs as root)")
	}
	inOwnNetns(t, func() {
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Errorf("ip link set lo up: %v\n%s", err, out)
			return
		}
		fn()
	})
}

// ReloadDrain's script, run with the host's ss and awk (the image's are the same Debian packages) in a network
// namespace of the test's own: it waits while connections wait in the port's accept queue, gives up after its
// tries, and ends as soon as the queue is empty.
func TestReloadDrainWaitsForTheAcceptQueue(t *testing.T) {
	t.Parallel()
	inOwnLoopback(t, func() {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Errorf("listen: %v", err)
			return
		}
		defer func() { _ = l.Close() }()
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			t.Errorf("listener address %v is not TCP", l.Addr())
			return
		}
		port := addr.Port
		drain := func(tries int) error { return exec.Command("sh", "-c", drainScript(port, tries)).Run() }
		if err := drain(5); err != nil {
			t.Errorf("with an empty accept queue: %v, want exit 0", err)
		}
		// Three handshakes the kernel completes and nobody accepts.
		const waiting = 3
		for range waiting {
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Errorf("dial: %v", err)
				return
			}
			defer func() { _ = c.Close() }()
		}
		if err := drain(5); err == nil {
			t.Errorf("with %d connections in the accept queue: exit 0, want 1 after its tries", waiting)
		}
		// The queue empties while the script waits: it ends at once, within its tries.
		accepted := make(chan error, 1)
		go func() {
			for range waiting {
				c, err := l.Accept()
				if err != nil {
					accepted <- err
					return
				}
				defer func() { _ = c.Close() }()
			}
			accepted <- nil
		}()
		if err := drain(600); err != nil {
			t.Errorf("with the queue accepted: %v, want exit 0", err)
		}
		if err := <-accepted; err != nil {
			t.Errorf("accept: %v", err)
		}
	})
}

// Retire's drain, run with the host's ss in a network namespace of the test's own: it ends at once with no
// connection established to the port, waits while one is, gives up after its tries, and ends once the last one
// closes. A connection to another port does not hold it.
func TestRetireDrainWaitsForEstablishedConnections(t *testing.T) {
	t.Parallel()
	inOwnLoopback(t, func() {
		listen := func() (net.Listener, int) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatalf("listen: %v", err)
			}
			addr, ok := l.Addr().(*net.TCPAddr)
			if !ok {
				t.Fatalf("listener address %v is not TCP", l.Addr())
			}
			return l, addr.Port
		}
		proxy, port := listen()
		defer func() { _ = proxy.Close() }()
		other, _ := listen()
		defer func() { _ = other.Close() }()
		drain := func(tries int) error { return exec.Command("sh", "-c", retireDrainScript(port, tries)).Run() }
		if err := drain(5); err != nil {
			t.Errorf("with nothing established: %v, want exit 0", err)
		}
		elsewhere, err := net.Dial("tcp", other.Addr().String())
		if err != nil {
			t.Errorf("dial: %v", err)
			return
		}
		defer func() { _ = elsewhere.Close() }()
		if err := drain(5); err != nil {
			t.Errorf("with a connection to another port only: %v, want exit 0", err)
		}
		client, err := net.Dial("tcp", proxy.Addr().String())
		if err != nil {
			t.Errorf("dial: %v", err)
			return
		}
		served, err := proxy.Accept()
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		if err := drain(5); err == nil {
			t.Error("with a connection established to the port: exit 0, want 1 after its tries")
		}
		// The connection closes while the script waits: it ends within its tries.
		go func() { _ = client.Close(); _ = served.Close() }()
		if err := drain(600); err != nil {
			t.Errorf("with the connection closed: %v, want exit 0", err)
		}
	})
}

// Retire holds the port as a reload does, drains, then stops keepalived: in that order, since the address
// moving first would reset the connections the drain waits for.
func TestRetireOrder(t *testing.T) {
	t.Parallel()
	cmds := Retire(3130)
	if len(cmds) != 3 {
		t.Fatalf("Retire = %q, want three commands", cmds)
	}
	if hold := ReloadHold(3130)[1]; strings.Join(cmds[0], " ") != strings.Join(hold, " ") {
		t.Errorf("first command %q, want the reload's hold %q", cmds[0], hold)
	}
	if !strings.Contains(cmds[1][2], "sport = :3130") {
		t.Errorf("second command %q does not drain port 3130", cmds[1])
	}
	if got := strings.Join(cmds[2], " "); got != "/bin/systemctl stop keepalived.service" {
		t.Errorf("last command %q, want keepalived stopped", got)
	}
}
