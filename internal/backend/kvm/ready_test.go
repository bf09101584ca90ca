package kvm

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// readySpec is a proxy whose guest has leased addr on the fake network.
func readySpec(f *fakeHost, uid, addr string) backend.Spec {
	spec := fakeSpec(uid, "o")
	optionsOf(spec.Placement).WaitForAddress, optionsOf(spec.Placement).WaitForProxy = true, true
	f.networks["net"].leases = append(f.networks["net"].leases, libvirt.NetworkDhcpLease{
		Type: int32(libvirt.IPAddrTypeIpv4), Mac: libvirt.OptString{macFromUID(uid)}, Ipaddr: addr, Expirytime: 1,
	})
	return spec
}

// routeTo dials the test servers instead of the proxy's ports: port -> listener address, or a dial error.
func routeTo(routes map[int]string, fail error) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if fail != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: fail}
		}
		_, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		to, ok := routes[p]
		if !ok {
			return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, to)
	}
}

// cancelAfter wraps dial so that ctx's cancel runs at the n-th dial: a wait is ended after a known number
// of probes, whatever the machine's load, instead of by a deadline that a slow step before it could eat.
func cancelAfter(n int32, cancel context.CancelFunc, dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var dials atomic.Int32
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) == n {
			cancel()
		}
		return dial(ctx, network, addr)
	}
}

func listen(t *testing.T) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("closing the listener: %v", err)
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close() // accepting is all this listener is for
		}
	}()
	return l
}

func TestFakeWaitForProxyUntilHealthy(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	var asked atomic.Int32
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != proxyconf.HealthPath {
			http.NotFound(w, r)
			return
		}
		if asked.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok")) // the status is what the probe reads; a failed write shows there
	}))
	defer health.Close()
	proxy := listen(t)
	b.readiness.dial = routeTo(map[int]string{3128: proxy.Addr().String(), proxyconf.DefaultHealthPort: health.Listener.Addr().String()}, nil)
	b.readiness.attached = nil // the test dial decides what is reachable

	spec := readySpec(f, "ready-1", "198.18.0.50")
	inst, err := b.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if asked.Load() != 3 || inst.InternalAddress != "198.18.0.50" {
		t.Errorf("health asked %d times, address %q; want Create to wait for the third answer (200)", asked.Load(), inst.InternalAddress)
	}
	if note := noteOf(inst); note != "" {
		t.Errorf("note = %q, want none: readiness was verified", note)
	}
}

func TestFakeWaitForProxyUnreachableIsNoted(t *testing.T) {
	t.Parallel()
	for name, fail := range map[string]error{
		"no route":  os.NewSyscallError("connect", syscall.ENETUNREACH),
		"host down": os.NewSyscallError("connect", syscall.EHOSTUNREACH),
		"silence":   context.DeadlineExceeded,
		"firewall":  os.NewSyscallError("connect", syscall.EPERM),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFakeHost()
			b, _ := fakeBackend(f)
			b.readiness.dial = routeTo(nil, fail)
			b.readiness.attached = nil // the test dial decides what is reachable
			b.readiness.unreachableAfter = 20 * time.Millisecond
			inst, err := b.Create(context.Background(), readySpec(f, "unreach-1", "198.18.0.51"))
			if err != nil {
				t.Fatalf("Create = %v, want success with readiness not verified", err)
			}
			note := noteOf(inst)
			if !strings.Contains(note, "not verified") || !strings.Contains(note, "198.18.0.51") || !strings.Contains(note, "address") {
				t.Errorf("note = %q", note)
			}
		})
	}
}

func TestFakeWaitForProxyReachableButSilentTimesOut(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	// Both ports refuse: the guest's kernel is there, Squid is not (yet). The caller gives up at the third probe.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.readiness.dial = cancelAfter(3, cancel, routeTo(map[int]string{}, nil))
	b.readiness.attached = nil // the test dial decides what is reachable
	b.readiness.unreachableAfter = 0
	inst, err := b.Create(ctx, readySpec(f, "silent-1", "198.18.0.52"))
	if backend.ClassOf(err) != backend.ClassTransient || !strings.Contains(err.Error(), "198.18.0.52") || !strings.Contains(err.Error(), "refused") {
		t.Errorf("Create = %v, want Transient naming the address and the last refusal", err)
	}
	if inst.ID.Name != inst.Name || inst.Name == "" {
		t.Errorf("instance %+v: want it returned with the error, so the caller records it", inst)
	}
}

func TestFakeWaitForProxyFixedIPWaitsForTheLease(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	b.readiness.dial = routeTo(nil, os.NewSyscallError("connect", syscall.EHOSTUNREACH))
	b.readiness.attached = nil // the test dial decides what is reachable
	b.readiness.unreachableAfter = 0
	spec := fakeSpec("fixed-1", "o")
	optionsOf(spec.Placement).WaitForAddress, optionsOf(spec.Placement).WaitForProxy = true, true
	optionsOf(spec.Placement).IP = "198.18.0.60"
	// No lease yet: a fixed address is known before boot, so silence there says nothing. The caller gives
	// up when the backend asks for the lease: Create must still be waiting for the guest then.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.onCall = func(method string) {
		if method == "NetworkGetDhcpLeases" {
			cancel()
		}
	}
	if _, err := b.Create(ctx, spec); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "take its address") {
		t.Errorf("Create without a lease = %v, want the wait for the guest ended by the caller", err)
	}
	// Under the fake's lock: the cancelled create's lease lookups may still be running (they return when they see
	// the cancellation, not before).
	f.mu.Lock()
	f.networks["net"].leases = []libvirt.NetworkDhcpLease{{Type: int32(libvirt.IPAddrTypeIpv4), Mac: libvirt.OptString{macFromUID("fixed-1")}, Ipaddr: "198.18.0.60", Expirytime: 1}}
	f.mu.Unlock()
	inst, err := b.Create(context.Background(), spec)
	if err != nil || !strings.Contains(noteOf(inst), "fixed address") {
		t.Errorf("Create with the lease = %v, note %q", err, noteOf(inst))
	}
}

func TestFakeWaitForProxyUserNet(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	// Anything HTTP on the forwarded port will do: Squid answers a request without a URL with an error.
	squid := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
	}))
	defer squid.Close()
	b.readiness.dial = routeTo(map[int]string{18080: squid.Listener.Addr().String()}, nil)
	b.readiness.attached = nil // the test dial decides what is reachable
	spec := fakeSpec("user-1", "o")
	optionsOf(spec.Placement).UserNet, optionsOf(spec.Placement).ForwardAddress, optionsOf(spec.Placement).ForwardPort = true, "127.0.0.1", 18080
	optionsOf(spec.Placement).WaitForAddress, optionsOf(spec.Placement).WaitForProxy = true, true
	inst, err := b.Create(context.Background(), spec)
	if err != nil || noteOf(inst) != "" {
		t.Fatalf("Create = %v, note %q; want verified", err, noteOf(inst))
	}

	// passt accepts whenever it runs: a refusal means the forward is not where the provider runs.
	b.readiness.dial = routeTo(map[int]string{}, nil)
	b.readiness.attached = nil // the test dial decides what is reachable
	b.readiness.unreachableAfter = 0
	spec = fakeSpec("user-2", "o")
	optionsOf(spec.Placement).UserNet, optionsOf(spec.Placement).ForwardPort = true, 18081
	optionsOf(spec.Placement).WaitForAddress, optionsOf(spec.Placement).WaitForProxy = true, true
	inst, err = b.Create(context.Background(), spec)
	if note := noteOf(inst); err != nil || !strings.Contains(note, "127.0.0.1") || !strings.Contains(note, "port forward") {
		t.Errorf("Create = %v, note %q; want unverified", err, note)
	}

	// A forward that accepts and closes (passt while the guest does not listen) is waited for.
	// The caller gives up at the third probe; with unreachableAfter 0 a probe that took the caller's end
	// for silence would make this a success with a note.
	closer := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.readiness.dial = cancelAfter(3, cancel, routeTo(map[int]string{18082: closer.Addr().String()}, nil))
	b.readiness.attached = nil // the test dial decides what is reachable
	spec = fakeSpec("user-3", "o")
	optionsOf(spec.Placement).UserNet, optionsOf(spec.Placement).ForwardPort = true, 18082
	optionsOf(spec.Placement).WaitForAddress, optionsOf(spec.Placement).WaitForProxy = true, true
	if inst, err := b.Create(ctx, spec); backend.ClassOf(err) != backend.ClassTransient || len(inst.Notes) != 0 {
		t.Errorf("Create with a silent guest = %v, notes %q; want Transient when the caller gave up", err, inst.Notes)
	}
}

// An address on no network of this machine is never probed: that would send packets along the default route.
func TestReadinessDoesNotProbeOffLinkAddresses(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{"127.0.0.1": true, "198.51.100.7": false} {
		if got := attachedHere(net.ParseIP(addr)); got != want {
			t.Errorf("attachedHere(%s) = %v, want %v", addr, got, want)
		}
	}
}

// noteOf is what Create told the caller about readiness, through the instance's Notes.
func noteOf(inst backend.Instance) string { return strings.Join(inst.Notes, "\n") }

// A connect cut short by the caller's own deadline says nothing about the address; the same error from the
// attempt's timeout, with the caller still waiting, is silence: unreachable.
func TestDialResultIgnoresTheCallersEnd(t *testing.T) {
	t.Parallel()
	ended, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	waiting := context.Background()
	timeout := &net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded}
	tests := map[string]struct {
		caller  context.Context
		err     error
		userNet bool
		want    probeResult
	}{
		"attempt timed out":           {waiting, timeout, false, probeUnreachable},
		"caller's deadline passed":    {ended, timeout, false, probeNotReady},
		"caller's deadline, user net": {ended, timeout, true, probeNotReady},
		"refused":                     {waiting, os.NewSyscallError("connect", syscall.ECONNREFUSED), false, probeReachable},
		"refused, user net":           {waiting, os.NewSyscallError("connect", syscall.ECONNREFUSED), true, probeUnreachable},
		"no route":                    {waiting, os.NewSyscallError("connect", syscall.EHOSTUNREACH), false, probeUnreachable},
		"no route, caller gave up":    {ended, os.NewSyscallError("connect", syscall.EHOSTUNREACH), false, probeNotReady},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := dialResult(tc.caller, tc.err, tc.userNet); got != tc.want {
				t.Errorf("dialResult = %v, want %v", got, tc.want)
			}
		})
	}
}
