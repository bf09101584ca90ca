package kvm

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// liveGateway is the test network's bridge address in the test namespace (scripts/libvirt-env.sh): the
// upstream server listens there, and the guest reaches it through the network.
const liveGateway = "198.18.0.1"

// TestLiveReconfigure boots the proxy image and changes its rules through the guest agent: the lists swap,
// a password comes and changes, all on the same address within the Reconfigure call, and a reboot keeps
// them. Then the domain loses its agent channel and reports it cannot be reconfigured. Traffic goes from
// inside the test namespace, through the guest's Squid, to an upstream the test serves in that namespace.
// On the way, the access log is checked in the guest's journal and at syslog targets set in place
// (checkAccessLogOnVM). Right after Create, checkBootedGuest checks what only a booted guest shows.
func TestLiveReconfigure(t *testing.T) {
	parallelBoot(t)
	spec := bootedSpec(t, testOwner())
	b := probeFromNamespace(liveBackend(t))
	b.pollInterval = 2 * time.Second
	upstreamPort := serveUpstreamInNetns(t)

	spec.Proxy.AllowedDestinations = []string{"allowed.test"}
	spec.Proxy.AllowedPorts = []int{443, upstreamPort} // plain http:// goes to port 80 and these
	spec.Proxy.LogFormat = proxyconf.LogFormatJSON
	id := idOf(spec)
	inst, start := createBooted(t, b, spec, 20*time.Minute)
	checkBootedGuest(t, b, spec, inst, start)
	proxy := net.JoinHostPort(inst.InternalAddress, strconv.Itoa(inst.Port))

	// The agent starts with the guest; Get reports it once it answers.
	waitFor(t, 3*time.Minute, "Get to report the proxy reconfigurable", func() bool {
		got, err := b.Get(ctxFor(t, callLimit), id)
		return err == nil && got.Reconfigurable
	})
	// Name the upstream in the guest (its own /etc/hosts, which Squid reads on every reload): the libvirt
	// network's DNS is shared with other tests' names.
	hosts := liveGateway + " allowed.test denied.test blocked.test"
	runInGuest(t, b, spec.Name, "/bin/sh", "-c", "grep -q allowed.test /etc/hosts || echo '"+hosts+"' >> /etc/hosts; "+squidBin+" -k reconfigure")
	allowed := fmt.Sprintf("http://allowed.test:%d/", upstreamPort)
	denied := fmt.Sprintf("http://denied.test:%d/", upstreamPort)
	waitFor(t, time.Minute, "allowed.test to answer 200 through the proxy", func() bool { return viaProxy(t, proxy, "", allowed) == "200" })
	expectStatuses(t, "as created", proxy, map[[2]string]string{{allowed, ""}: "200", {denied, ""}: "403"})
	checkAccessLogOnVM(t, b, spec, proxy, []string{allowed, denied})

	timed := func(what string, s proxyconf.Settings) backend.Instance {
		t.Helper()
		start := time.Now()
		got, err := b.Reconfigure(ctxFor(t, callLimit), id, s)
		if err != nil {
			t.Fatalf("Reconfigure (%s): %v", what, err)
		}
		t.Logf("Reconfigure (%s): %s", what, time.Since(start).Round(10*time.Millisecond))
		if got.InternalAddress != inst.InternalAddress || got.UID != spec.UID || got.ID != id {
			t.Fatalf("after Reconfigure (%s) the proxy is %s (uid %s), was %s (uid %s)", what, got.InternalAddress, got.UID, inst.InternalAddress, spec.UID)
		}
		return got
	}
	// Metrics on, widened, moved (checkMetricsOnVM) before the swap below turns them off again.
	withMetrics := checkMetricsOnVM(t, b, spec, inst, proxy, allowed, denied, timed)

	// Swap the lists and require a password: in force when Reconfigure returns, same address; metrics off.
	first := []proxyconf.BasicAuth{{Username: "alice", Password: "first-password"}}
	swapped := spec.Proxy
	swapped.AllowedDestinations = []string{"denied.test"}
	swapped.Users = first
	got := timed("swap the lists, add a password, metrics off", swapped)
	checkMetricsOff(t, b, spec, inst, withMetrics.Metrics)
	alice1 := "alice:first-password"
	expectStatuses(t, "lists swapped", proxy, map[[2]string]string{
		{denied, alice1}: "200", {allowed, alice1}: "403", {denied, ""}: "407",
	})
	if p := got.Proxy; p == nil || !slices.Equal(p.AllowedDestinations, swapped.AllowedDestinations) || len(p.Users) != 1 || p.Users[0].Username != "alice" {
		t.Errorf("Get's settings after Reconfigure: %+v", got.Proxy)
	}

	// A new password: the old one is refused, the new one let through.
	second := swapped
	second.Users = []proxyconf.BasicAuth{{Username: "alice", Password: "second-password"}}
	timed("new password", second)
	alice2 := "alice:second-password"
	expectStatuses(t, "new password", proxy, map[[2]string]string{{denied, alice1}: "407", {denied, alice2}: "200"})
	timed("the same settings again", second)

	// The seed says the same, for whoever reads it or runs cloud-init from it again.
	inspect(t, b, func(l api) error {
		conf, err := proxyconf.RenderSquidConf(second, vmguest.RenderOptions())
		if err != nil {
			return err
		}
		ok, err := seedCurrent(l, volRef(b.hosts[liveHost].Pool, seedVolumeName(spec.Name)), conf, second.Users, nil)
		if err == nil && !ok {
			t.Errorf("the seed's user-data does not hold the new config and password")
		}
		return err
	})

	// The agent channel goes, the guest reboots: the rules stay (they are on the guest's disk), and the
	// proxy reports it cannot be reconfigured in place.
	removeAgentChannel(t, b, spec.Name)
	rebooted := time.Now()
	waitFor(t, 10*time.Minute, "the rebooted proxy to answer", func() bool { return viaProxy(t, proxy, alice2, denied) == "200" })
	t.Logf("the proxy answered %s after the reboot", time.Since(rebooted).Round(time.Second))
	expectStatuses(t, "after the reboot", proxy, map[[2]string]string{{denied, alice2}: "200", {allowed, alice2}: "403", {denied, alice1}: "407"})
	after, err := b.Get(ctxFor(t, callLimit), id)
	if err != nil || after.Reconfigurable || after.State != backend.StateRunning {
		t.Errorf("Get without the agent channel = %s, reconfigurable %v, %v; want running and not reconfigurable", after.State, after.Reconfigurable, err)
	}
	_, err = b.Reconfigure(ctxFor(t, callLimit), id, spec.Proxy)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "cannot be reconfigured in place") {
		t.Errorf("Reconfigure without the agent channel = %v, want Permanent: cannot be reconfigured in place", err)
	}
}

// waitFor polls cond every two seconds until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", limit, what)
		}
		time.Sleep(2 * time.Second)
	}
}

// viaProxy sends one plain HTTP request through the proxy from inside the test namespace and returns the
// status curl saw ("000" for none).
func viaProxy(t *testing.T, proxy, credentials, url string) string {
	t.Helper()
	args := []string{"curl", "-s", "-o", "/dev/null", "-m", "20", "-w", "%{http_code}", "-x", "http://" + proxy}
	if credentials != "" {
		args = append(args, "--proxy-user", credentials)
	}
	out, _ := inNetns(t, append(args, url)...) // curl's status is the answer; its exit code adds nothing
	return strings.TrimSpace(out)
}

// expectStatuses checks each (url, credentials) once: no retry, the rules must already be in force.
func expectStatuses(t *testing.T, when, proxy string, want map[[2]string]string) {
	t.Helper()
	for req, status := range want {
		if got := viaProxy(t, proxy, req[1], req[0]); got != status {
			t.Errorf("%s: %s with credentials %q answered %s, want %s", when, req[0], req[1], got, status)
		}
	}
}

// runInGuest runs a program in the guest through its agent and fails the test unless it exits 0.
func runInGuest(t *testing.T, b *Backend, name string, argv ...string) {
	t.Helper()
	outputInGuest(t, b, name, argv...)
}

// serveUpstreamInNetns listens on the bridge address inside the test namespace (the socket is made on a
// thread moved there) and answers every request with 200 and the host asked for. It returns the port.
func serveUpstreamInNetns(t *testing.T) int {
	t.Helper()
	return serveUpstreamInNetnsOn(t, "tcp", net.JoinHostPort(liveGateway, "0"))
}

// serveUpstreamInNetnsOn is serveUpstreamInNetns on the given network and address of the test namespace.
func serveUpstreamInNetnsOn(t *testing.T, network, address string) int {
	t.Helper()
	l, err := testutil.ListenInNetns(liveNetns(), network, address)
	if err != nil {
		t.Fatalf("listening in namespace %s: %v", liveNetns(), err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "upstream %s\n", r.Host) // a failed write shows in the client's status
	})}
	go func() { _ = srv.Serve(l) }() // ends with Close below
	t.Cleanup(func() { _ = srv.Close() })
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("listener address %v is not TCP", l.Addr())
	}
	return addr.Port
}

// removeAgentChannel redefines the domain without its guest agent channel and restarts it, as a domain
// made by hand or by another tool might be.
func removeAgentChannel(t *testing.T, b *Backend, name string) {
	t.Helper()
	inspect(t, b, func(l api) error {
		dom, err := l.DomainLookupByName(name)
		if err != nil {
			return err
		}
		s, err := l.DomainGetXMLDesc(dom, libvirt.DomainXMLInactive)
		if err != nil {
			return err
		}
		var dx libvirtxml.Domain
		if err := dx.Unmarshal(s); err != nil {
			return err
		}
		dx.Devices.Channels = slices.DeleteFunc(dx.Devices.Channels, func(c libvirtxml.DomainChannel) bool {
			return c.Target != nil && c.Target.VirtIO != nil && c.Target.VirtIO.Name == guestAgentChannel
		})
		if s, err = dx.Marshal(); err != nil {
			return err
		}
		if _, err := l.DomainDefineXMLFlags(s, 0); err != nil {
			return err
		}
		if err := l.DomainDestroyFlags(dom, 0); err != nil {
			return err
		}
		return l.DomainCreate(dom)
	})
}

// TestLiveAgentErrorsClassified: libvirt's own answers for a guest whose agent is not (yet) connected and
// for a domain without an agent channel, classified as Reconfigure and Get need them. The blank base volume
// boots nothing, so no agent ever connects: the channel is there, the agent is not.
func TestLiveAgentErrorsClassified(t *testing.T) {
	b := liveBackend(t)
	spec := liveSpec(testOwner())
	cleanupProxy(t, b, spec.Name)
	id := idOf(spec)
	if _, err := b.Create(ctxFor(t, 2*time.Minute), spec); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(ctxFor(t, time.Minute), id); err != nil || got.Reconfigurable {
		t.Errorf("Get with no agent connected = reconfigurable %v, %v; want false", got.Reconfigurable, err)
	}
	_, err := b.Reconfigure(ctxFor(t, 5*time.Second), id, spec.Proxy)
	if backend.ClassOf(err) != backend.ClassTransient || !strings.Contains(err.Error(), "not answering") || !strings.Contains(err.Error(), spec.Name) {
		t.Errorf("Reconfigure with no agent connected = %v (class %v), want Transient: not answering", err, backend.ClassOf(err))
	}

	removeAgentChannel(t, b, spec.Name)
	start := time.Now()
	got, err := b.Get(ctxFor(t, time.Minute), id)
	if err != nil || got.Reconfigurable {
		t.Errorf("Get without an agent channel = reconfigurable %v, %v; want false", got.Reconfigurable, err)
	}
	t.Logf("Get without an agent channel took %s", time.Since(start).Round(time.Millisecond))
	_, err = b.Reconfigure(ctxFor(t, time.Minute), id, spec.Proxy)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "cannot be reconfigured in place") {
		t.Errorf("Reconfigure without an agent channel = %v (class %v), want Permanent: cannot be reconfigured in place", err, backend.ClassOf(err))
	}
}
