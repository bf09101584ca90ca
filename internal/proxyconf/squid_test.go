package proxyconf

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// squidPath finds the squid binary: $SQUID, then /usr/sbin/squid, then $PATH. Squid is part of the test
// environment (CI installs the Debian package), so a missing binary fails the test; only -short skips it.
func squidPath(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("SQUID"), "/usr/sbin/squid"}
	if p, err := exec.LookPath("squid"); err == nil {
		candidates = append(candidates, p)
	}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() {
			return c
		}
	}
	if testing.Short() {
		t.Skip("squid not installed; skipped in -short mode")
	}
	t.Fatal("squid not found at $SQUID, /usr/sbin/squid or in $PATH: install it (apt-get install squid) or run with -short")
	return ""
}

// squidDir makes a temporary directory Squid can use after it drops from root to its effective user: that
// user writes its logs there and its auth helper reads the htpasswd file, as on a real VM.
func squidDir(t *testing.T) string {
	t.Helper()
	// Not t.TempDir: its parent is private to the user running the test, so Squid's user could not reach it.
	dir, err := os.MkdirTemp("", "proxyconf-squid-") //nolint:usetesting // see above
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if uid, gid, ok := proxyUser(); ok {
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// proxyUser is the account Squid runs as when started by root; ok is false when no switch happens.
func proxyUser() (uid, gid int, ok bool) {
	if os.Geteuid() != 0 {
		return 0, 0, false
	}
	u, err := user.Lookup("proxy")
	if err != nil {
		return 0, 0, false
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid, true
}

// writeSecretFile writes a file the way cloud-init does on a VM: root:proxy, 0640.
func writeSecretFile(t *testing.T, path string, content []byte) {
	t.Helper()
	if err := os.WriteFile(path, content, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, gid, ok := proxyUser(); ok {
		if err := os.Chown(path, 0, gid); err != nil {
			t.Fatal(err)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr, ok := l.Addr().(*net.TCPAddr)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("listener address %v is not TCP", l.Addr())
	}
	return addr.Port
}

// testOptions points every file into dir and resolves names only through dir/hosts, which maps hosts to
// 127.0.0.1; the DNS server 127.0.0.1 does not exist, so no lookup leaves the machine. It lifts the loopback
// destination guard, and only that one.
func testOptions(t *testing.T, dir string, hosts []string) RenderOptions {
	t.Helper()
	hostsFile := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hostsFile, []byte("127.0.0.1 "+strings.Join(hosts, " ")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return RenderOptions{
		ListenAddress:  netip.MustParseAddr("127.0.0.1"),
		HealthPort:     freePort(t),
		HtpasswdPath:   filepath.Join(dir, "passwd"),
		PidFile:        filepath.Join(dir, "squid.pid"),
		AccessLog:      "stdio:" + filepath.Join(dir, "access.log"),
		CacheLog:       filepath.Join(dir, "cache.log"),
		CoredumpDir:    dir,
		TLSCertPath:    filepath.Join(dir, "tls.crt"),
		TLSKeyPath:     filepath.Join(dir, "tls.key"),
		HostsFile:      hostsFile,
		DNSNameservers: []netip.Addr{netip.MustParseAddr("127.0.0.1")},
		// The backends can only listen on loopback here; the guards are tested in a network namespace
		// (guards_test.go) without this exception.
		allowLoopbackDestinations: true,
	}
}

// runningSquid is one Squid process started by a test.
type runningSquid struct {
	proxy, health string // host:port
	dir           string
	output        *testutil.LockedBuffer // stdout and stderr
	exited        <-chan struct{}        // closed when the process has exited
}

var serviceCount atomic.Int64

// serviceName gives each Squid its own service name. Squid names its shared memory segments in /dev/shm after
// it, so two Squids of one name refuse to start side by side; a killed Squid leaves its segments behind, which
// the test removes.
func serviceName(t *testing.T) string {
	name := fmt.Sprintf("proxyconftest%d%d", os.Getpid(), serviceCount.Add(1))
	t.Cleanup(func() {
		leftovers, _ := filepath.Glob("/dev/shm/" + name + "-*")
		for _, f := range leftovers {
			if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("removing Squid's leftover shared memory: %v", err)
			}
		}
	})
	return name
}

// startSquidCmd starts cmd, kills it when the test ends, and waits until both ports accept connections.
func startSquidCmd(t *testing.T, cmd *exec.Cmd, proxy, health, dir string) *runningSquid {
	t.Helper()
	out := &testutil.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	// Only that it exited matters: how is in its output, which the failures below report.
	go func() { _ = cmd.Wait(); close(exited) }()
	// Killing squid closes its helpers' stdin, and they exit with it. A squid that exited already cannot be
	// killed: waiting for exited is what counts.
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	sq := &runningSquid{proxy: proxy, health: health, dir: dir, output: out, exited: exited}
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range []string{proxy, health} {
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				_ = c.Close() // only whether it accepts matters
				break
			}
			select {
			case <-exited:
				t.Fatalf("squid exited before listening on %s:\n%s\n%s", addr, out, sq.file("cache.log"))
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("squid did not listen on %s within 30s:\n%s\n%s", addr, out, sq.file("cache.log"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return sq
}

// startSquid renders s into a fresh directory and runs Squid on it in the foreground, as root would on a VM.
func startSquid(t *testing.T, s Settings, hosts []string) *runningSquid {
	t.Helper()
	dir := squidDir(t)
	return startSquidWith(t, s, testOptions(t, dir, hosts), dir)
}

// startSquidWith runs Squid on s rendered with opts, whose files are in dir, on a free port of 127.0.0.1.
func startSquidWith(t *testing.T, s Settings, opts RenderOptions, dir string) *runningSquid {
	t.Helper()
	return startSquidUnder(t, nil, s, opts, dir)
}

// startSquidUnder is startSquidWith with Squid started by the command line wrapper, such as nice, which must
// exec Squid in its own process so that killing it kills Squid.
func startSquidUnder(t *testing.T, wrapper []string, s Settings, opts RenderOptions, dir string) *runningSquid {
	t.Helper()
	bin := squidPath(t)
	s.Port = freePort(t)
	conf, err := RenderSquidConf(s, opts)
	if err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(dir, "squid.conf")
	writeSecretFile(t, confPath, conf)
	if s.Auth != nil {
		htpasswd, err := RenderHtpasswd(*s.Auth)
		if err != nil {
			t.Fatal(err)
		}
		writeSecretFile(t, opts.HtpasswdPath, htpasswd)
	}
	if s.TLS != nil {
		writeSecretFile(t, opts.TLSCertPath, []byte(s.TLS.CertificatePEM))
		writeSecretFile(t, opts.TLSKeyPath, []byte(s.TLS.PrivateKeyPEM))
	}
	args := append(slices.Clone(wrapper), bin, "-N", "-n", serviceName(t), "-f", confPath)
	cmd := exec.Command(args[0], args[1:]...) //nolint:gosec // the test's own Squid
	return startSquidCmd(t, cmd, fmt.Sprintf("127.0.0.1:%d", s.Port), fmt.Sprintf("127.0.0.1:%d", opts.HealthPort), dir)
}

func (sq *runningSquid) file(name string) string {
	b, _ := os.ReadFile(filepath.Join(sq.dir, name))
	return string(b)
}

// parseSquidConf runs `squid -k parse` on conf and returns its output; Squid reports problems there.
func parseSquidConf(t *testing.T, conf []byte) (string, error) {
	t.Helper()
	bin := squidPath(t)
	path := filepath.Join(t.TempDir(), "squid.conf")
	if err := os.WriteFile(path, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-k", "parse", "-f", path).CombinedOutput()
	return string(out), err
}

// proxyClient speaks to Squid by hand, so each test controls the source address, the request line and the
// credentials exactly.
type proxyClient struct {
	proxy       string
	from        string // source IP, on 127.0.0.0/8
	user, pass  string
	timeout     time.Duration // for the whole exchange; 15 s when zero
	tlsRoots    *x509.CertPool
	tlsHostname string // the name in the TLS server's certificate
}

// result is what came back: the proxy's status, or, through an established CONNECT tunnel, the status and
// body of the TLS server behind it.
type result struct {
	status int
	body   string
}

func (c proxyClient) dial() (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(c.from)}}
	conn, err := d.Dial("tcp", c.proxy)
	if err != nil {
		return nil, err
	}
	timeout := c.timeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	return conn, conn.SetDeadline(time.Now().Add(timeout))
}

func (c proxyClient) authHeader() string {
	if c.user == "" {
		return ""
	}
	return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(c.user+":"+c.pass)) + "\r\n"
}

// get sends a plain forward-proxy request for url (absolute form) or path (origin form, as a health check).
func (c proxyClient) get(t *testing.T, target, host string) result {
	t.Helper()
	r, err := c.tryGet(target, host)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tryGet is get for goroutines other than the test's, which must not call t.Fatal.
func (c proxyClient) tryGet(target, host string) (result, error) {
	conn, err := c.dial()
	if err != nil {
		return result{}, err
	}
	defer func() { _ = conn.Close() }() // by then the exchange is over (or failed): nothing is left to send
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n", target, host, c.authHeader()); err != nil {
		return result{}, fmt.Errorf("sending GET %s: %w", target, err)
	}
	return tryReadResult(bufio.NewReader(conn))
}

// connect opens a CONNECT tunnel to hostport and, when it is established, fetches / over TLS through it.
func (c proxyClient) connect(t *testing.T, hostport string) result {
	t.Helper()
	conn, err := c.dial()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }() // by then the exchange is over (or the test failed): nothing is left to send
	if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", hostport, hostport, c.authHeader()); err != nil {
		t.Fatalf("sending CONNECT %s: %v", hostport, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", hostport, err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close() // only the status is wanted; closing the connection discards the rest
		return result{status: resp.StatusCode}
	}
	tconn := tls.Client(conn, &tls.Config{RootCAs: c.tlsRoots, ServerName: c.tlsHostname})
	if err := tconn.Handshake(); err != nil {
		t.Fatalf("TLS through CONNECT %s: %v", hostport, err)
	}
	host, _, _ := net.SplitHostPort(hostport)
	if _, err := fmt.Fprintf(tconn, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host); err != nil {
		t.Fatalf("GET through CONNECT %s: %v", hostport, err)
	}
	return readResult(t, bufio.NewReader(tconn))
}

func readResult(t *testing.T, br *bufio.Reader) result {
	t.Helper()
	r, err := tryReadResult(br)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tryReadResult(br *bufio.Reader) (result, error) {
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return result{}, fmt.Errorf("reading response: %w", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close() // read to the end already: closing frees nothing the test needs
	return result{status: resp.StatusCode, body: string(body)}, nil
}
