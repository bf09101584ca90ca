// Package squidtest runs the real Squid for tests: it finds the binary, makes the directories and files
// Squid's own user reads after it drops from root, starts Squid and waits for its ports, and speaks to it as a
// client. It knows nothing of how a config is rendered, so the tests of internal/proxyconf and those of each
// backend's guest package run Squid alike.
package squidtest

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// Path finds the squid binary: $SQUID, then /usr/sbin/squid, then $PATH. Squid is part of the test
// environment (CI installs the Debian package), so a missing binary fails the test; only -short skips it.
func Path(t testing.TB) string {
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

// Dir makes a temporary directory Squid can use after it drops from root to its effective user: that user
// writes its logs there and its auth helper reads the htpasswd file, as on a real VM.
func Dir(t testing.TB) string {
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
	if uid, gid, ok := ProxyUser(); ok {
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// ProxyUser is the account Squid runs as when started by root; ok is false when no switch happens.
func ProxyUser() (uid, gid int, ok bool) {
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

// WriteSecretFile writes a file the way cloud-init does on a VM: root:proxy, 0640.
func WriteSecretFile(t testing.TB, path string, content []byte) {
	t.Helper()
	if err := os.WriteFile(path, content, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, gid, ok := ProxyUser(); ok {
		if err := os.Chown(path, 0, gid); err != nil {
			t.Fatal(err)
		}
	}
}

// HostsFile writes dir/hosts, which maps every one of hosts to 127.0.0.1, and returns its path: a config
// that names it as its hosts file resolves the test's names without any DNS server.
func HostsFile(t testing.TB, dir string, hosts []string) string {
	t.Helper()
	hostsFile := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hostsFile, []byte("127.0.0.1 "+strings.Join(hosts, " ")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return hostsFile
}

// AppendFile appends text to the file name, which must exist.
func AppendFile(t testing.TB, name, text string) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// FreePort is a TCP port of 127.0.0.1 that nothing listened on a moment ago, that FreePort has not given
// before in this process, and that lies below the kernel's ephemeral range. A test binds the port some time
// after FreePort returns it (Squid takes a while to start), and in that window any outgoing connection of a
// test running alongside could take an ephemeral port as its local port: Squid's bind then fails with
// "Address already in use". A port below the range is one that connect never picks. givenPorts keeps this
// process from handing one port to two tests (a proxy port and a manager port, or two parallel tests).
func FreePort(t testing.TB) int {
	t.Helper()
	low, high := unrequestedPorts(t)
	span := high - low + 1
	start := low + rand.IntN(span) // random, so other processes (with their own givenPorts) rarely try the same port
	for i := range span {
		port := low + (start-low+i)%span
		if _, given := givenPorts.LoadOrStore(port, true); given {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // something else listens there: leave it marked given and try the next
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return port
	}
	t.Fatalf("no free port of 127.0.0.1 left in %d-%d", low, high)
	return 0
}

// unrequestedPorts is the range FreePort draws from: from 16384 up to just below the ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range, 32768 by default on Linux), so 16,384 ports by default.
func unrequestedPorts(t testing.TB) (low, high int) {
	t.Helper()
	const floor = 16384
	ephemeralLow := 32768
	if raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if fields := strings.Fields(string(raw)); len(fields) == 2 {
			if n, err := strconv.Atoi(fields[0]); err == nil {
				ephemeralLow = n
			}
		}
	}
	if ephemeralLow-1 < floor+1024 {
		t.Fatalf("the ephemeral port range starts at %d, which leaves too few ports below it above %d for tests' listeners", ephemeralLow, floor)
	}
	return floor, ephemeralLow - 1
}

// givenPorts holds every port FreePort has returned or found taken.
var givenPorts sync.Map

// Squid is one Squid process started by a test.
type Squid struct {
	Proxy, Health string // host:port
	Dir           string
	Output        *testutil.LockedBuffer // stdout and stderr
	Exited        <-chan struct{}        // closed when the process has exited
}

// File is the content of the file name in the Squid's directory (its logs), or "" when there is none.
func (sq *Squid) File(name string) string {
	b, _ := os.ReadFile(filepath.Join(sq.Dir, name))
	return string(b)
}

var serviceCount atomic.Int64

// ServiceName gives each Squid its own service name. Squid names its shared memory segments in /dev/shm after
// it, so two Squids of one name refuse to start side by side; a killed Squid leaves its segments behind, which
// the test removes.
func ServiceName(t testing.TB) string {
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

// Start starts cmd, a Squid whose files are in dir, kills it when the test ends, and waits until both its
// ports (proxy and health, host:port) accept connections.
func Start(t testing.TB, cmd *exec.Cmd, proxy, health, dir string) *Squid {
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
	sq := &Squid{Proxy: proxy, Health: health, Dir: dir, Output: out, Exited: exited}
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
				t.Fatalf("squid exited before listening on %s:\n%s\n%s", addr, out, sq.File("cache.log"))
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("squid did not listen on %s within 30s:\n%s\n%s", addr, out, sq.File("cache.log"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return sq
}

// Parse runs `squid -k parse` on conf and returns its output; Squid reports problems there.
func Parse(t testing.TB, conf []byte) (string, error) {
	t.Helper()
	bin := Path(t)
	path := filepath.Join(t.TempDir(), "squid.conf")
	if err := os.WriteFile(path, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-k", "parse", "-f", path).CombinedOutput()
	return string(out), err
}

// Complaints runs `squid -k parse` on conf and returns its output, and the lines of it that warn or report an
// error: a config Squid warns about does not mean what it says. The one warning left out is the one "via off"
// earns, which the proxies write on purpose: they do not announce themselves to destinations.
func Complaints(t testing.TB, conf []byte) (out string, complaints []string, err error) {
	t.Helper()
	out, err = Parse(t, conf)
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "WARNING: HTTP requires the use of Via") {
			continue
		}
		if strings.Contains(line, "WARNING") || strings.Contains(line, "ERROR") || strings.Contains(line, "FATAL") {
			complaints = append(complaints, line)
		}
	}
	return out, complaints, err
}
