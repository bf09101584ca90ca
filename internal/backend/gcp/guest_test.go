package gcp

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// The startup script proved on the proxy image's own Squid and systemd, as Compute Engine's guest environment
// runs it: the image's root tree (make guest-root) boots as a container (systemd-nspawn, an overlay of the
// test's own over the read-only tree) in a network namespace the test makes, where the fake's metadata server
// answers on 169.254.169.254:80 and metadata.google.internal resolves to it. A unit of the test plays
// google-startup-scripts.service: at every boot it fetches the startup-script attribute and runs it as root.
// The proxy is made through the backend against the fake, so the metadata is exactly what Create writes.
//
// Nothing is made in the root network namespace: the guest's namespace holds the metadata server and the
// guest's address; a second namespace, joined to it by a veth pair, holds the upstream web server and the
// client, so that the upstream's address is not one of the guest's own.
//
// The guest lists its own addresses at every boot, and refuses them as destinations even when a name it may
// reach resolves to one: its interface's address, the external address the metadata server names (which is
// on no interface of the VM), and an address added to its interface between two boots.
func TestGuestStartupScriptOnRealSquid(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("boots the proxy image in a container: set TF_ACC (make testacc) to run it")
	}
	tree := os.Getenv("EGRESS_TEST_GUEST_ROOT")
	if tree == "" || os.Geteuid() != 0 {
		t.Fatal("needs root and EGRESS_TEST_GUEST_ROOT, the proxy image's root tree (make guest-root)")
	}
	for _, tool := range []string{"systemd-nspawn", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (make guest-root installs it)", tool, err)
		}
	}
	ctx := testutil.GuestContext(t, 15*time.Minute)

	// The proxy, made through the backend: its metadata holds the startup script and the rendered config, and
	// turns guest attributes on (boot 1 turns them off first, to see the report refused).
	fake, b := newTest(t, computefake.Options{})
	// A real guest takes seconds to apply: its reports are polled as in production, within the ration.
	b.guestPollInitial, b.guestPollMax = defaultGuestPollInitial, defaultGuestPollMax
	spec := testSpec("uid-guest", "us-central1-a")
	spec.Proxy.AllowedClientCIDRs = []string{"198.18.0.0/24"}
	spec.Proxy.AllowedDestinations = []string{"allowed.example", "own.example", "external.example", "later.example"}
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	fake.MetadataInstance(testProject, "us-central1-a", spec.Name)
	configID, _ := metadataValue(fake.Instance(testProject, "us-central1-a", spec.Name), proxyconf.MetadataConfigID)
	applied := func() string {
		return fake.GuestAttribute(testProject, "us-central1-a", spec.Name, proxyconf.GuestAttributeNamespace+"/"+proxyconf.GuestAttributeApplied)
	}

	ns, peer := testNetns(t)
	serveIn(t, ns, "169.254.169.254:80", fake.MetadataHandler())
	serveIn(t, peer, upstreamIP+":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "upstream "+r.Host)
	}))

	upper := t.TempDir()
	writeGuestFiles(t, upper, inst.EgressAddress)
	client := proxyClient{dial: netnsDialer(peer, clientIP), proxy: guestIP + ":3128", user: "u", password: "correct-horse-battery"}

	files := []string{proxyconf.ConfPath, proxyconf.HtpasswdPath, "/var/lib/egress-proxy/applied"}
	var first map[string]fileState
	for boot := 1; boot <= 2; boot++ {
		if boot == 2 {
			// An address the guest did not have at its first boot: the second boot must list it.
			ipIn(t, ns, "addr", "add", laterIP+"/24", "dev", guestLink)
		}
		start := time.Now()
		switch boot {
		case 1:
			// Guest attributes off, as on a VM whose metadata does not turn them on: the script's report is
			// refused by the metadata server, and nothing reaches the API.
			fake.SetInstanceMetadata(testProject, "us-central1-a", spec.Name, MetadataEnableGuestAttributes, "FALSE")
		case 2:
			// On for the whole project and not set on the instance: the project's metadata turns them on.
			fake.SetInstanceMetadata(testProject, "us-central1-a", spec.Name, MetadataEnableGuestAttributes, "")
			fake.SetProjectMetadata(testProject, MetadataEnableGuestAttributes, "TRUE")
		}
		guest := bootGuest(t, tree, upper, ns, boot)
		if boot == 1 {
			refused := func() bool {
				for _, w := range fake.RefusedGuestWrites() {
					if strings.HasSuffix(w, "/"+spec.Name+" "+proxyconf.GuestAttributeNamespace+"/"+proxyconf.GuestAttributeApplied) {
						return true
					}
				}
				return false
			}
			waitFor(ctx, t, guest, "boot 1: the guest's report refused while guest attributes are off", refused)
			if got := applied(); got != "" {
				t.Fatalf("boot 1: with guest attributes off the guest's report reached the API: %q", got)
			}
			t.Logf("boot 1: report refused with guest attributes off, %s after start; turning them on as Create does", time.Since(start).Round(time.Second))
			fake.SetInstanceMetadata(testProject, "us-central1-a", spec.Name, MetadataEnableGuestAttributes, "TRUE")
		}
		waitFor(ctx, t, guest, fmt.Sprintf("boot %d: the guest reports config %s applied", boot, configID), func() bool { return applied() == configID })
		t.Logf("boot %d: config applied and reported %s after start", boot, time.Since(start).Round(time.Second))

		// Without the guard, a request for one of the guest's own addresses would be a 503: nothing listens
		// there on port 80, or (the external address) there is no route to it.
		for _, c := range []struct {
			name     string
			url      string
			auth     bool
			want     int
			fromBoot int
		}{
			{name: "allowed destination", url: "http://allowed.example/", auth: true, want: http.StatusOK},
			{name: "denied destination", url: "http://denied.example/", auth: true, want: http.StatusForbidden},
			{name: "no credentials", url: "http://allowed.example/", want: http.StatusProxyAuthRequired},
			{name: "the guest's interface address", url: "http://own.example/", auth: true, want: http.StatusForbidden},
			{name: "the guest's external address", url: "http://external.example/", auth: true, want: http.StatusForbidden},
			{name: "an address added since the first boot", url: "http://later.example/", auth: true, want: http.StatusForbidden, fromBoot: 2},
		} {
			if boot < c.fromBoot {
				continue
			}
			if got := client.get(ctx, t, c.url, c.auth); got != c.want {
				t.Errorf("boot %d, %s: %s through the guest's Squid = %d, want %d\n%s", boot, c.name, c.url, got, c.want, guest.log())
			}
		}
		checkBackstop(t, guest, boot)

		// The 403s above are the own-address guard's: the list the guest wrote at this boot names them.
		own := " " + strings.Join(strings.Fields(statIn(t, upper, proxyconf.OwnAddressesPath).Content), " ") + " "
		want := []string{guestIP, inst.EgressAddress}
		if boot >= 2 {
			want = append(want, laterIP)
		}
		for _, a := range want {
			if !strings.Contains(own, " "+a+" ") {
				t.Errorf("boot %d: the guest's own addresses%slack %s", boot, own, a)
			}
		}

		states := map[string]fileState{}
		for _, f := range files {
			states[f] = statIn(t, upper, f)
		}
		if boot == 1 {
			first = states
		} else {
			// A reboot runs the script again: the config already applied and Squid running, it rewrites
			// nothing (same content, same modification time) and only reports the config again.
			for _, f := range files {
				if states[f] != first[f] {
					t.Errorf("the second boot changed %s: %+v, was %+v", f, states[f], first[f])
				}
			}
		}
		guest.stop(t)
		// The guest reports again at the next boot: clear what this boot reported.
		if err := fake.SetGuestAttribute(testProject, "us-central1-a", spec.Name, proxyconf.GuestAttributeNamespace+"/"+proxyconf.GuestAttributeApplied, ""); err != nil {
			t.Fatal(err)
		}
	}

	// Boot 3: TLS turned on in place while the guest runs. Its watch service applies the new metadata; the
	// proxy port then speaks TLS only, with the certificate and key the script installed from their own keys.
	guest := bootGuest(t, tree, upper, ns, 3)
	waitFor(ctx, t, guest, "boot 3: the guest reports config "+configID+" applied", func() bool { return applied() == configID })
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	withTLS := spec.Proxy
	withTLS.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key}
	// A private range allowed in the same change: the guest's backstop follows it.
	withTLS.AllowedPrivateCIDRs = []string{"10.1.0.0/16"}
	if _, err := b.Reconfigure(ctx, inst.ID, withTLS); err != nil {
		t.Fatalf("turning TLS on in place: %v\n%s", err, guest.log())
	}
	if set, err := guest.exec(t, "nft", "list", "set", "inet", proxyconf.NftablesTable, "refused_v4"); err != nil ||
		strings.Contains(set, "10.0.0.0/8") || !strings.Contains(set, "10.0.0.0/16") || !strings.Contains(set, "169.254.0.0/16") {
		t.Errorf("the guest's backstop after allowing 10.1.0.0/16 in place (%v): want 10.0.0.0/8 split around it\n%s", err, set)
	}
	checkBackstop(t, guest, 3)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(cert))
	tlsClient := client
	tlsClient.tls = &tls.Config{RootCAs: roots, ServerName: "proxy.test", MinVersion: tls.VersionTLS12}
	for url, want := range map[string]int{"http://allowed.example/": http.StatusOK, "http://denied.example/": http.StatusForbidden} {
		if got := tlsClient.get(ctx, t, url, true); got != want {
			t.Errorf("with TLS: %s through the guest's Squid = %d, want %d\n%s", url, got, want, guest.log())
		}
	}
	for _, f := range []struct {
		path, content string
		mode          os.FileMode
	}{{proxyconf.TLSCertPath, cert, 0o644}, {proxyconf.TLSKeyPath, key, 0o640}} {
		fi, err := os.Stat(filepath.Join(upper, f.path))
		if err != nil {
			t.Errorf("%s in the guest: %v", f.path, err)
			continue
		}
		if fi.Mode().Perm() != f.mode || statIn(t, upper, f.path).Content != f.content {
			t.Errorf("%s in the guest: mode %v, want the content from metadata with mode %v", f.path, fi.Mode().Perm(), f.mode)
		}
	}
	guest.stop(t)
}

// checkBackstop: the backstop below Squid, which the guest loaded at this boot before Squid started, keeps a
// program running as the proxy user (Squid's) from the metadata server, which root in the guest reaches (the
// startup script itself reads it there), and counts what it refused. The programs run inside the container,
// with its own tools, through nsenter.
func checkBackstop(t *testing.T, g *guestContainer, boot int) {
	t.Helper()
	metadata := "http://169.254.169.254/computeMetadata/v1/instance/attributes/"
	curl := []string{"curl", "-sS", "-o", "/dev/null", "--max-time", "20", "-H", "Metadata-Flavor: Google", metadata}
	if out, err := g.exec(t, curl...); err != nil {
		t.Errorf("boot %d: root in the guest could not reach the metadata server: %v\n%s", boot, err, out)
	}
	out, err := g.exec(t, append([]string{"runuser", "-u", "proxy", "--"}, curl...)...)
	if err == nil || !strings.Contains(out, "Failed to connect") {
		t.Errorf("boot %d: the proxy user reaching the metadata server: %v %s; want it refused", boot, err, out)
	}
	rules, err := g.exec(t, "nft", "list", "chain", "inet", proxyconf.NftablesTable, "from_proxy")
	if err != nil || !strings.Contains(rules, "@refused_v4 counter packets") || strings.Contains(rules, "@refused_v4 counter packets 0 ") {
		t.Errorf("boot %d: the backstop's chain in the guest (%v):\n%s", boot, err, rules)
	}
}

// exec runs a program inside the running container (its namespaces, its root) as root, and returns its output.
func (g *guestContainer) exec(t *testing.T, argv ...string) (string, error) {
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

// writeGuestFiles puts into the container's upper layer what a GCE VM has and the image has not: the metadata
// server's name, the guest environment's unit running the startup script, and no cloud-init (which would look
// for a data source in vain and only slow the boot).
func writeGuestFiles(t *testing.T, upper, externalIP string) {
	t.Helper()
	unit := `[Unit]
Description=Run the startup-script metadata attribute, as the GCE guest environment does
Wants=network-online.target
# On a VM the guest environment and Squid start in either order; here Squid comes first, so that a reboot
# with the config already applied shows the script changing nothing at all.
After=network-online.target squid.service

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'curl -fsS -H "Metadata-Flavor: Google" http://metadata.google.internal/computeMetadata/v1/instance/attributes/startup-script >/run/startup-script && exec /bin/sh /run/startup-script'
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
`
	for name, content := range map[string]string{
		"etc/hosts": "127.0.0.1 localhost\n169.254.169.254 metadata.google.internal\n" + upstreamIP + " allowed.example denied.example\n" +
			guestIP + " own.example\n" + externalIP + " external.example\n" + laterIP + " later.example\n",
		"etc/systemd/system/google-startup-scripts.service": unit,
		"etc/cloud/cloud-init.disabled":                     "",
	} {
		p := filepath.Join(upper, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wants := filepath.Join(upper, "etc/systemd/system/multi-user.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/systemd/system/google-startup-scripts.service", filepath.Join(wants, "google-startup-scripts.service")); err != nil {
		t.Fatal(err)
	}
}

type fileState struct {
	Content string
	ModTime time.Time
}

// statIn reads a file of the guest from the upper layer, where everything the guest wrote is.
func statIn(t *testing.T, upper, name string) fileState {
	t.Helper()
	p := filepath.Join(upper, name)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatalf("the guest did not write %s: %v", name, err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return fileState{Content: string(b), ModTime: fi.ModTime()}
}

type guestContainer struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{} // closed once the container's process is reaped; err is its result
	err     error
}

func (g *guestContainer) log() string {
	b, _ := os.ReadFile(g.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// stop shuts the container down as a poweroff would (nspawn turns SIGTERM into an orderly shutdown).
func (g *guestContainer) stop(t *testing.T) {
	t.Helper()
	select {
	case <-g.exited:
		t.Fatalf("the container had stopped already: %v\n%s", g.err, g.log())
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(3 * time.Minute):
		_ = g.cmd.Process.Kill()
		<-g.exited
		t.Errorf("the container did not shut down on SIGTERM\n%s", g.log())
	}
}

func bootGuest(t *testing.T, tree, upper, ns string, boot int) *guestContainer {
	t.Helper()
	g := &guestContainer{logPath: filepath.Join(t.TempDir(), fmt.Sprintf("boot%d.log", boot)), exited: make(chan struct{})}
	logf, err := os.Create(g.logPath)
	if err != nil {
		t.Fatal(err)
	}
	// CAP_NET_ADMIN, which root has on a VM and nspawn drops unless it makes the network itself: the guest
	// loads its backstop below Squid with nft. It reaches no further than the test's namespace.
	g.cmd = exec.Command("systemd-nspawn", "--quiet", "--boot", "--directory", tree, "--capability=CAP_NET_ADMIN",
		"--overlay", tree+":"+upper+":/", "--network-namespace-path", "/run/netns/"+ns,
		"--register=no", "--keep-unit", "--resolv-conf=off", "--timezone=off", "--link-journal=no",
		"--machine", ns)
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

// waitFor polls cond until it holds, the container stops, or ctx ends. Booting takes seconds to minutes on
// a loaded machine: the deadline is the test's, not a guess at the boot time.
func waitFor(ctx context.Context, t *testing.T, g *guestContainer, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-g.exited:
			t.Fatalf("%s: the container stopped (%v)\n%s", what, g.err, g.log())
		case <-ctx.Done():
			t.Fatalf("%s: %v\n%s", what, ctx.Err(), g.log())
		case <-tick.C:
		}
	}
}

// The guest test's addresses, all in 198.18.0.0/24, a benchmarking range the proxy's guards do not refuse.
const (
	guestIP    = "198.18.0.1" // the guest's interface, where Squid listens
	clientIP   = "198.18.0.2"
	upstreamIP = "198.18.0.3"
	laterIP    = "198.18.0.9" // added to the guest's interface between its first and second boot
	guestLink  = "eg0"
)

// testNetns makes two network namespaces of the test's own joined by a veth pair: the guest's, with its
// address on the link and the metadata server's on loopback, and the peer, with the client's and the
// upstream's addresses.
func testNetns(t *testing.T) (guest, peer string) {
	t.Helper()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	guest = "egress-gcp-" + hex.EncodeToString(suffix)
	peer = guest + "-peer"
	for _, ns := range []string{guest, peer} {
		ipIn(t, "", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		ipIn(t, ns, "link", "set", "lo", "up")
	}
	ipIn(t, guest, "link", "add", guestLink, "type", "veth", "peer", "name", "eg1", "netns", peer)
	ipIn(t, guest, "addr", "add", "169.254.169.254/32", "dev", "lo")
	ipIn(t, guest, "addr", "add", guestIP+"/24", "dev", guestLink)
	ipIn(t, guest, "link", "set", guestLink, "up")
	for _, a := range []string{clientIP, upstreamIP} {
		ipIn(t, peer, "addr", "add", a+"/24", "dev", "eg1")
	}
	ipIn(t, peer, "link", "set", "eg1", "up")
	return guest, peer
}

// ipIn runs ip with args, inside namespace ns unless it is empty.
func ipIn(t *testing.T, ns string, args ...string) {
	t.Helper()
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// inNetns runs fn on a thread moved into the namespace; the thread is never moved back, and ends with its
// goroutine (a locked thread is not reused), so no other goroutine ever runs in the namespace by accident.
func inNetns(ns string, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			ch <- err
			return
		}
		defer func() { _ = f.Close() }()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- fmt.Errorf("entering network namespace %s: %w", ns, err)
			return
		}
		ch <- fn()
	}()
	return <-ch
}

// serveIn serves h on addr inside the namespace: the listening socket is made there, and stays there
// whichever thread accepts on it.
func serveIn(t *testing.T, ns, addr string, h http.Handler) {
	t.Helper()
	var l net.Listener
	if err := inNetns(ns, func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

func netnsDialer(ns, localIP string) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		var c net.Conn
		err := inNetns(ns, func() (err error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(localIP)}}
			c, err = d.DialContext(ctx, "tcp", guestIP+":3128")
			return err
		})
		return c, err
	}
}

type proxyClient struct {
	dial           func(ctx context.Context) (net.Conn, error)
	proxy          string
	user, password string
	tls            *tls.Config // set when the proxy port speaks TLS
}

// get sends one proxied GET and returns the status Squid answers with.
func (c proxyClient) get(ctx context.Context, t *testing.T, url string, auth bool) int {
	t.Helper()
	conn, err := c.dial(ctx)
	if err != nil {
		t.Fatalf("dialing the guest's Squid: %v", err)
	}
	defer func() { _ = conn.Close() }()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	if c.tls != nil {
		tc := tls.Client(conn, c.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			t.Fatalf("TLS handshake with the guest's Squid: %v", err)
		}
		conn = tc
	}
	host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", url, host)
	if auth {
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(c.user+":"+c.password)) + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading Squid's answer to %s: %v", url, err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && !strings.HasPrefix(string(body), "upstream "+host) {
		t.Errorf("200 for %s did not come from the upstream: %q", url, body)
	}
	return resp.StatusCode
}
