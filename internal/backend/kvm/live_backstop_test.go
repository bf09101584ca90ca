package kvm

import (
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// Addresses the test namespace takes on its loopback, as the libvirt host's own: the guest reaches them
// through its default route, the namespace's bridge. hostPrivateAddr stands for the host's address on a
// usual libvirt network (192.168.122.1 on the default one): a private address, which the test network's
// 198.18.0.1 is not. metadataAddr is the cloud metadata servers' address.
const (
	hostPrivateAddr = "10.254.0.1"
	metadataAddr    = "169.254.169.254"
)

// TestLiveGuestHardening boots the proxy image with a password and TLS, and checks on the running guest:
//
//   - the domain's XML with its metadata, live and inactive, holds no secret: not the password, its htpasswd
//     hash, the TLS private key, nor any PRIVATE KEY block;
//   - the backstop below Squid: a program running as the proxy user cannot open a connection to the metadata
//     address or the host's private address, while root can (so the listeners are there), and the proxy
//     user still reaches the host's address on the test network, which no guard refuses;
//   - a private range allowed in place (Reconfigure) is let through by the backstop from then on, and
//     after a reboot;
//   - the own-address guard: the guest lists its own address, and a request through Squid for a name that
//     resolves to it is refused; after a reboot, with the list overwritten in between, the list is written
//     anew at boot and the request still refused, and the backstop is loaded again.
func TestLiveGuestHardening(t *testing.T) {
	parallelBoot(t)
	spec := bootedSpec(t, testOwner())
	b := probeFromNamespace(liveBackend(t))
	b.pollInterval = 2 * time.Second
	port := listenEverywhereInNetns(t)
	for _, a := range []string{hostPrivateAddr, metadataAddr} {
		addNetnsAddress(t, a)
	}
	password := "hardening-password-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	spec.Proxy.Users = []proxyconf.BasicAuth{{Username: "egress", Password: password}}
	spec.Proxy.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key}
	spec.Proxy.AllowedDestinations = []string{"upstream.test", "own.test"}
	spec.Proxy.AllowedPorts = []int{443, port}
	id := idOf(spec)
	inst, _ := createBooted(t, b, spec, 25*time.Minute)
	guestIP := inst.InternalAddress
	waitFor(t, 3*time.Minute, "Get to report the proxy reconfigurable (its agent answers)", func() bool {
		got, err := b.Get(ctxFor(t, callLimit), id)
		return err == nil && got.Reconfigurable
	})
	dom := lookupDomain(t, b, spec.Name)

	t.Run("no secret in the domain XML", func(t *testing.T) {
		var hash []byte
		inspect(t, b, func(l api) (err error) {
			hash, err = guestReadFile(l, dom, proxyconf.HtpasswdPath)
			return err
		})
		_, h, ok := strings.Cut(strings.TrimSpace(string(hash)), ":")
		if !ok || !strings.HasPrefix(h, "$2") {
			t.Fatalf("the guest's htpasswd %q holds no bcrypt hash", hash)
		}
		keyBody := pemBody(key)
		secrets := map[string]string{"the password": password, "its htpasswd hash": h, "the private key": keyBody, "a PRIVATE KEY block": "PRIVATE KEY"}
		bcryptRE := regexp.MustCompile(`\$2[aby]?\$\d\d\$[./A-Za-z0-9]{53}`)
		for _, flags := range []libvirt.DomainXMLFlags{libvirt.DomainXMLSecure, libvirt.DomainXMLSecure | libvirt.DomainXMLInactive} {
			var x string
			inspect(t, b, func(l api) (err error) {
				x, err = l.DomainGetXMLDesc(dom, flags)
				return err
			})
			if !strings.Contains(x, "<metadata>") {
				t.Errorf("domain XML (flags %d) has no metadata: the scan would prove nothing", flags)
			}
			for what, s := range secrets {
				if strings.Contains(x, s) {
					t.Errorf("the domain XML (flags %d) holds %s", flags, what)
				}
			}
			if m := bcryptRE.FindString(x); m != "" {
				t.Errorf("the domain XML (flags %d) holds a bcrypt hash %q", flags, m)
			}
		}
	})

	// Name the upstream and the guest itself in the guest's /etc/hosts, which Squid reads on every reload:
	// the libvirt network's DNS is shared with other tests' names.
	hosts := liveGateway + " upstream.test\n" + guestIP + " own.test\n"
	runInGuest(t, b, spec.Name, "/bin/sh", "-c", "grep -q upstream.test /etc/hosts || printf '"+hosts+"' >> /etc/hosts; "+squidBin+" -k reconfigure")
	proxy := net.JoinHostPort(guestIP, strconv.Itoa(inst.Port))
	creds := spec.Proxy.Users[0].Username + ":" + password
	upstream := fmt.Sprintf("http://upstream.test:%d/", port)
	own := fmt.Sprintf("http://own.test:%d/", port)
	waitFor(t, time.Minute, "upstream.test to answer 200 through the proxy", func() bool { return viaTLSProxy(t, proxy, creds, upstream) == "200" })

	// checkBoot checks the guards; hostAllowed: the host's private range is in allowed_private_cidrs.
	checkBoot := func(t *testing.T, boot string, hostAllowed bool) {
		// The own-address guard: Squid refuses its own address (without it, a 503: nothing listens there on
		// that port).
		if got := viaTLSProxy(t, proxy, creds, own); got != "403" {
			t.Errorf("%s: %s (the guest's own address) through the proxy answered %s, want 403", boot, own, got)
		}
		if got := viaTLSProxy(t, proxy, creds, upstream); got != "200" {
			t.Errorf("%s: %s through the proxy answered %s, want 200", boot, upstream, got)
		}
		var list []byte
		inspect(t, b, func(l api) (err error) {
			list, err = guestReadFile(l, dom, proxyconf.OwnAddressesPath)
			return err
		})
		if !strings.Contains("\n"+string(list), "\n"+guestIP+"\n") {
			t.Errorf("%s: the guest's own addresses %q lack its address %s", boot, list, guestIP)
		}

		// The backstop: the proxy user cannot reach the metadata address nor the host's private one; root
		// can, and the proxy user reaches the host on the test network.
		for _, c := range []struct {
			addr      string
			proxyGets bool
		}{{metadataAddr, false}, {hostPrivateAddr, hostAllowed}, {liveGateway, true}} {
			if err := connectFromGuest(t, b, dom, "", c.addr, port); err != nil {
				t.Errorf("%s: root in the guest could not connect to %s:%d: %v", boot, c.addr, port, err)
			}
			err := connectFromGuest(t, b, dom, "proxy", c.addr, port)
			if (err == nil) != c.proxyGets {
				t.Errorf("%s: the proxy user connecting to %s:%d: %v; want connected = %v", boot, c.addr, port, err, c.proxyGets)
			}
		}
		res := execInGuest(t, b, dom, "/usr/sbin/nft", "list", "chain", "inet", proxyconf.NftablesTable, "from_proxy")
		if !regexp.MustCompile(`daddr @refused_v4 counter packets [1-9]`).MatchString(res.stdout) {
			t.Errorf("%s: the backstop counted no refused packet: %s %s", boot, res.stdout, res.stderr)
		}
	}
	t.Run("first boot", func(t *testing.T) { checkBoot(t, "first boot", false) })

	// Allowing the host's private range in place changes the backstop in the running guest, and only there:
	// the metadata address stays refused.
	allowHost := spec.Proxy
	allowHost.AllowedPrivateCIDRs = []string{hostPrivateAddr + "/32"}
	// And a longer allow-list, so the seed's image outgrows the volume Create wrote and the rewrite grows it
	// behind the running QEMU: the reboot below checks that cloud-init reads the grown seed without an error.
	for i := range 300 {
		allowHost.AllowedDestinations = append(allowHost.AllowedDestinations, fmt.Sprintf("host-%03d.longer-allow-list.test", i))
	}
	reconfigured := time.Now()
	if _, err := b.Reconfigure(ctxFor(t, callLimit), id, allowHost); err != nil {
		t.Fatalf("Reconfigure allowing %s: %v", hostPrivateAddr, err)
	}
	t.Logf("Reconfigure (allow a private range): %s", time.Since(reconfigured).Round(10*time.Millisecond))
	t.Run("after allowing the host's range in place", func(t *testing.T) { checkBoot(t, "after Reconfigure", true) })

	// Overwrite the list with an address the guest does not have and reboot: the boot must list the guest's
	// own addresses anew (cloud-init runs its per-instance modules only once).
	bootID := strings.TrimSpace(execInGuest(t, b, dom, "/bin/cat", "/proc/sys/kernel/random/boot_id").stdout)
	inspect(t, b, func(l api) error { return guestWriteFile(l, dom, proxyconf.OwnAddressesPath, []byte("192.0.2.99\n")) })
	runInGuest(t, b, spec.Name, "/bin/sync")
	rebooted := time.Now()
	_, _ = guestExec(ctxFor(t, time.Minute), b.conns[liveHost], dom, "/bin/systemctl", "--no-block", "reboot") // the agent goes with the guest
	waitFor(t, 10*time.Minute, "the guest to boot again and its proxy to answer", func() bool {
		var id []byte
		err := b.conns[liveHost].do(ctxFor(t, 30*time.Second), func(l api) (err error) {
			id, err = guestReadFile(l, dom, "/proc/sys/kernel/random/boot_id")
			return err
		})
		return err == nil && strings.TrimSpace(string(id)) != bootID && viaTLSProxy(t, proxy, creds, upstream) == "200"
	})
	t.Logf("the proxy answered %s after the reboot", time.Since(rebooted).Round(time.Second))
	t.Run("after a reboot", func(t *testing.T) {
		var list []byte
		inspect(t, b, func(l api) (err error) {
			list, err = guestReadFile(l, dom, proxyconf.OwnAddressesPath)
			return err
		})
		if strings.Contains(string(list), "192.0.2.99") {
			t.Errorf("the own addresses %q still hold what was written before the reboot: not listed at boot", list)
		}
		// cloud-init read the rewritten seed at this boot too: its log shows each boot's run, and no user-data
		// it could not parse.
		runs := execInGuest(t, b, dom, "/bin/grep", "-c", "running 'init-local'", "/var/log/cloud-init.log")
		if n, _ := strconv.Atoi(strings.TrimSpace(runs.stdout)); n < 2 {
			t.Errorf("cloud-init's log shows %q runs, want one per boot (2): the check below would prove nothing", runs.stdout)
		}
		if bad := execInGuest(t, b, dom, "/bin/grep", "unacceptable character", "/var/log/cloud-init.log").stdout; bad != "" {
			t.Errorf("cloud-init could not read the rewritten seed's user-data at the reboot:\n%s", bad)
		}
		checkBoot(t, "after a reboot", true)
	})
}

// pemBody is the base64 of a PEM block, without its armour lines: what would show of a key stored another way.
func pemBody(p string) string {
	var body []string
	for _, line := range strings.Split(strings.TrimSpace(p), "\n") {
		if !strings.HasPrefix(line, "-----") {
			body = append(body, line)
		}
	}
	return strings.Join(body, "\n")
}

// viaTLSProxy sends one plain HTTP request through the proxy's TLS port from inside the test namespace, with
// credentials, and returns the status curl saw ("000" for none). The proxy's certificate is the test's own.
func viaTLSProxy(t *testing.T, proxy, credentials, url string) string {
	t.Helper()
	out, _ := inNetns(t, "curl", "-s", "-o", "/dev/null", "-m", "20", "-w", "%{http_code}", "--proxy-insecure",
		"-x", "https://"+proxy, "--proxy-user", credentials, url) // curl's status is the answer
	return strings.TrimSpace(out)
}

// connectFromGuest opens one TCP connection from a program in the guest, running as user (root when empty).
// A refused connection fails at once (the backstop rejects, it does not drop); the program's own timeout
// bounds the rest.
func connectFromGuest(t *testing.T, b *Backend, dom libvirt.Domain, user, addr string, port int) error {
	t.Helper()
	argv := []string{"/usr/bin/python3", "-c", `import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), 20).close()`, addr, strconv.Itoa(port)}
	if user != "" {
		argv = append([]string{"/usr/sbin/runuser", "-u", user, "--"}, argv...)
	}
	res := execInGuest(t, b, dom, argv...)
	if res.exitCode != 0 {
		return fmt.Errorf("exit %d: %s", res.exitCode, strings.TrimSpace(lastLine(res.stderr)))
	}
	return nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// execInGuest runs a program in the guest through its agent and returns how it ended; the test fails when
// the agent could not run it.
func execInGuest(t *testing.T, b *Backend, dom libvirt.Domain, argv ...string) execResult {
	t.Helper()
	res, err := guestExec(ctxFor(t, time.Minute), b.conns[liveHost], dom, argv[0], argv[1:]...)
	if err != nil {
		t.Fatalf("%v in the guest: %v", argv, err)
	}
	return res
}

func lookupDomain(t *testing.T, b *Backend, name string) libvirt.Domain {
	t.Helper()
	var dom libvirt.Domain
	inspect(t, b, func(l api) (err error) {
		dom, err = l.DomainLookupByName(name)
		return err
	})
	return dom
}

// addNetnsAddress puts addr on the test namespace's loopback for the test's duration.
func addNetnsAddress(t *testing.T, addr string) {
	t.Helper()
	ip := func(args ...string) error {
		out, err := exec.Command("ip", append([]string{"-n", liveNetns(), "addr"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip addr %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := ip("replace", addr+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ip("del", addr+"/32", "dev", "lo"); err != nil {
			t.Errorf("removing the test's address: %v", err)
		}
	})
}

// listenEverywhereInNetns serves HTTP on every IPv4 address of the test namespace, on one port, answering
// every request with 200; it returns the port.
func listenEverywhereInNetns(t *testing.T) int {
	t.Helper()
	return serveUpstreamInNetnsOn(t, "tcp4", "0.0.0.0:0")
}
