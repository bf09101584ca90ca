package kvm

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"golang.org/x/sys/unix"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// checkBootedGuest checks, right after Create returned a proxy booted from the project's image
// (scripts/build-image.sh; EGRESS_TEST_IMAGE is its path), what only a real guest shows: the address comes from
// the network's DHCP lease, Squid's health endpoint answers from inside the test namespace, and the guest agent
// reports the same address. The backend must run its probes from the test namespace (probeFromNamespace), so
// Create's readiness check (WaitForProxy) runs as on the libvirt host itself: it must verify that the proxy
// answers, not merely note that it could not. TestLiveReconfigure runs it on its proxy: a boot of its own cost
// make test about four minutes of CPU for no other check.
func checkBootedGuest(t *testing.T, b *Backend, spec backend.Spec, inst backend.Instance, start time.Time) {
	t.Helper()
	// The address is the one the network's DHCP server leased to the proxy's MAC.
	mac := macFromUID(spec.UID)
	var leased string
	inspect(t, b, func(l api) error { leased = leaseAddress(l, b.hosts[liveHost].Network, mac); return nil })
	if leased == "" || inst.InternalAddress != leased {
		t.Fatalf("address %q, DHCP lease for %s %q: want the lease's", inst.InternalAddress, mac, leased)
	}

	if note := noteOf(inst); note != "" {
		t.Fatalf("readiness not verified: %s", note)
	}
	// Create said the proxy answers: from inside the namespace, Squid's health endpoint answers at once.
	health := fmt.Sprintf("http://%s:%d%s", inst.InternalAddress, proxyconf.DefaultHealthPort, proxyconf.HealthPath)
	out, err := inNetns(t, "curl", "-s", "-o", "/dev/null", "-m", "10", "-w", "%{http_code}", health)
	if code := strings.TrimSpace(out); code != "200" {
		t.Fatalf("%s from namespace %s: %q (%v), want 200", health, liveNetns(), code, err)
	}
	t.Logf("health endpoint answered 200 after %s", time.Since(start).Round(time.Second))

	// The guest agent (the image installs qemu-guest-agent, and Reconfigure depends on it) reports the same
	// address. It starts with the guest's services, so it may answer a little after Squid does.
	var agent string
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline) && agent == ""; time.Sleep(2 * time.Second) {
		inspect(t, b, func(l api) error {
			dom, err := l.DomainLookupByName(spec.Name)
			if err == nil {
				agent = agentAddress(l, dom, mac)
			}
			return err
		})
	}
	switch {
	case agent == "":
		t.Errorf("no guest agent answered within 3 minutes of Squid, though the image installs one")
	case agent != leased:
		t.Errorf("guest agent reports %s, the lease %s", agent, leased)
	default:
		t.Logf("guest agent reports %s too", agent)
	}
	if st, ok := domainState(t, b, spec.Name); !ok || st != libvirt.DomainRunning {
		t.Errorf("domain state = %v (found %v), want running", st, ok)
	}
}

// netnsDial dials from inside the named network namespace: the socket is made on a thread moved into it.
// The thread is never moved back; it ends with its goroutine (locked threads are not reused).
func netnsDial(name string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return netnsDialWithin(name, 3*time.Second)
}

// netnsDialWithin is netnsDial with a connect timeout of timeout.
func netnsDialWithin(name string, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			f, err := os.Open("/var/run/netns/" + name)
			if err != nil {
				ch <- result{nil, err}
				return
			}
			defer func() { _ = f.Close() }() // read only: needed just to enter the namespace
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- result{nil, fmt.Errorf("entering network namespace %s: %w", name, err)}
				return
			}
			d := net.Dialer{Timeout: timeout}
			c, err := d.DialContext(ctx, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}
