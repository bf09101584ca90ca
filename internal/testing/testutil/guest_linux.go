package testutil

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The proxy VM image's root tree (scripts/build-guest-root.sh, make guest-root) booted as a container, for
// tests that prove a guest's boot-time configuration on the image's own Squid, systemd and nftables without a
// VM: systemd-nspawn boots an overlay of the test's own over the read-only tree, in a network namespace the
// test made. What the guest writes lands in the upper layer, where the test reads it.

// Guest is one boot of the guest root.
type Guest struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{} // closed once the container's process is reaped; err is its result
	err     error
}

// GuestRootPrerequisites checks what booting the guest root needs and returns the tree's path. Without TF_ACC
// the test is skipped, with the reason; with it, a missing prerequisite fails the test, since make test sets
// TF_ACC only where it built the tree.
func GuestRootPrerequisites(t testing.TB) string {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("boots the proxy image in a container: set TF_ACC (make testacc) to run it")
	}
	tree := os.Getenv("EGRESS_TEST_GUEST_ROOT")
	if tree == "" || os.Geteuid() != 0 {
		t.Fatal("needs root and EGRESS_TEST_GUEST_ROOT, the proxy image's root tree (make guest-root)")
	}
	for _, tool := range []string{"systemd-nspawn", "ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (make guest-root installs it)", tool, err)
		}
	}
	return tree
}

// BootGuest boots tree with upper as its writable layer, inside the network namespace netns (made with `ip
// netns add`), and returns at once; name tells this boot's console log from others. The guest gets
// CAP_NET_ADMIN, which root has on a VM and nspawn drops unless it makes the network itself: a guest loads
// nftables rules. It reaches no further than the namespace. The container is killed when the test ends if
// it still runs.
func BootGuest(t testing.TB, tree, upper, netns, name string) *Guest {
	t.Helper()
	g := &Guest{logPath: filepath.Join(t.TempDir(), name+".log"), exited: make(chan struct{})}
	logf, err := os.Create(g.logPath)
	if err != nil {
		t.Fatal(err)
	}
	g.cmd = exec.Command("systemd-nspawn", "--quiet", "--boot", "--directory", tree, "--capability=CAP_NET_ADMIN",
		"--overlay", tree+":"+upper+":/", "--network-namespace-path", "/run/netns/"+netns,
		"--register=no", "--keep-unit", "--resolv-conf=off", "--timezone=off", "--link-journal=no",
		"--machine", netns)
	g.cmd.Stdout, g.cmd.Stderr = logf, logf
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { g.err = g.cmd.Wait(); _ = logf.Close(); close(g.exited) }()
	t.Cleanup(func() {
		select {
		case <-g.exited:
		default:
			_ = g.cmd.Process.Kill()
			<-g.exited
		}
	})
	return g
}

// Log is the boot's console output so far (the last 4000 bytes: enough to see why a wait failed).
func (g *Guest) Log() string {
	s := g.FullLog()
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

// FullLog is the boot's whole console output so far.
func (g *Guest) FullLog() string {
	b, _ := os.ReadFile(g.logPath)
	return string(b)
}

// Stop shuts the container down as a poweroff would (nspawn turns SIGTERM into an orderly shutdown).
func (g *Guest) Stop(t testing.TB) {
	t.Helper()
	select {
	case <-g.exited:
		t.Fatalf("the container had stopped already: %v\n%s", g.err, g.Log())
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(3 * time.Minute):
		_ = g.cmd.Process.Kill()
		<-g.exited
		t.Errorf("the container did not shut down on SIGTERM\n%s", g.Log())
	}
}

// Exec runs a program inside the running container (its namespaces, its root) as root, and returns its
// combined output.
func (g *Guest) Exec(t testing.TB, argv ...string) (string, error) {
	t.Helper()
	// nspawn's child is the container's init.
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", g.cmd.Process.Pid, g.cmd.Process.Pid))
	initPID, _, _ := strings.Cut(strings.TrimSpace(string(kids)), " ")
	if err != nil || initPID == "" {
		t.Fatalf("finding the container's init under nspawn (pid %d): %v %q", g.cmd.Process.Pid, err, kids)
	}
	args := append([]string{"--target", initPID, "--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wd", "--"}, argv...)
	out, err := exec.Command("nsenter", args...).CombinedOutput()
	return string(out), err
}

// WaitFor polls cond until it holds, the container stops, or ctx ends. Booting takes seconds to minutes on a
// loaded machine: the deadline is the test's, not a guess at the boot time.
func (g *Guest) WaitFor(ctx context.Context, t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-g.exited:
			t.Fatalf("%s: the container stopped (%v)\n%s", what, g.err, g.Log())
		case <-ctx.Done():
			t.Fatalf("%s: %v\n%s", what, ctx.Err(), g.Log())
		case <-tick.C:
		}
	}
}

// WriteGuestFiles writes files (path relative to the root: content) into the guest's upper layer, with mode
// 0644, or 0755 for those under usr/local/sbin.
func WriteGuestFiles(t testing.TB, upper string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(upper, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(name, "usr/local/sbin/") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// EnableGuestUnit enables a unit of the upper layer (etc/systemd/system/UNIT) for multi-user.target, as
// systemctl enable would.
func EnableGuestUnit(t testing.TB, upper, unit string) {
	t.Helper()
	wants := filepath.Join(upper, "etc/systemd/system/multi-user.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/systemd/system/"+unit, filepath.Join(wants, unit)); err != nil {
		t.Fatal(err)
	}
}

// IPIn runs ip with args, inside the network namespace netns unless it is empty.
func IPIn(t testing.TB, netns string, args ...string) {
	t.Helper()
	if netns != "" {
		args = append([]string{"-n", netns}, args...)
	}
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// AddNetns makes a network namespace with its loopback up, deleted when the test ends.
func AddNetns(t testing.TB, netns string) {
	t.Helper()
	IPIn(t, "", "netns", "add", netns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", netns).Run() })
	IPIn(t, netns, "link", "set", "lo", "up")
}

// ServeInNetns serves h on address inside the network namespace: the listening socket is made there, and
// stays there whichever thread accepts on it, while the handlers run in the test's own namespace (so a
// handler may forward to a server on the test's loopback).
func ServeInNetns(t testing.TB, netns, address string, h http.Handler) {
	t.Helper()
	l, err := ListenInNetns(netns, "tcp", address)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// StatIn reads a file the guest wrote, from the upper layer, with its modification time; ok is false when
// the guest has not written it.
func StatIn(t testing.TB, upper, name string) (content string, mod time.Time, ok bool) {
	t.Helper()
	p := filepath.Join(upper, name)
	fi, err := os.Stat(p)
	if os.IsNotExist(err) {
		return "", time.Time{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), fi.ModTime(), true
}

// GuestContext is the context a guest test waits under: limit, cut short a minute before go test's own
// -timeout, so that a wait that never ends fails with the guest's console log instead of go test's bare
// goroutine dump.
func GuestContext(t testing.TB, limit time.Duration) context.Context {
	t.Helper()
	deadline := time.Now().Add(limit)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, set := d.Deadline(); set && end.Add(-time.Minute).Before(deadline) {
			deadline = end.Add(-time.Minute)
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}
