package kvm

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/google/uuid"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/backendtest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/libvirtfault"
)

// TestConformanceLive runs the contract's suite against the live libvirtd of scripts/libvirt-env.sh, as
// TestConformance runs it against the fake host. Host "local" is the daemon, reached through a fault proxy
// (LoseNextAnswer cuts there); host "down" is the same daemon's test driver behind a second fault proxy,
// which FailScope closes, so that the host becomes unreachable.
//
// The suite's worlds share one daemon, whose domain names are global and whose ListByTag sees every domain of
// the suite's owners: they run one at a time, each sweeping what it made before the next starts. The proxies
// boot nothing (the blank base volume) and Create does not wait for the guest.
//
// NeverReady is left nil: a live daemon shows a start that never completes (paused, starting up) only when it
// dies in the middle of one, and a domain waiting for its address runs, which the contract reports as Running.
func TestConformanceLive(t *testing.T) {
	host := liveHostConfig(t)
	direct := liveBackend(t)
	var oneWorld sync.Mutex
	backendtest.Run(t, backendtest.Harness{
		New: func(t *testing.T) backendtest.World {
			oneWorld.Lock()
			t.Cleanup(oneWorld.Unlock)
			return newLiveConformanceWorld(t, host, direct)
		},
		Spec:   liveConformanceSpec,
		IDForm: IDForm,
	})
	t.Cleanup(func() {
		if left := conformanceLeftovers(t, direct); len(left) > 0 {
			t.Errorf("the suite left these on the host: %v", left)
		}
	})
}

// conformancePrefix starts the name of every proxy the suite makes: what a world sweeps, and what must be
// gone once it has.
const conformancePrefix = "conf-"

func liveConformanceSpec(name string) backend.Spec {
	return backend.Spec{
		Name:      name,
		Placement: backend.Placement{Backend: Kind, Target: liveHost, Options: &Options{VCPUs: 1, MemoryMiB: 128, DiskGiB: 2}},
		Proxy:     proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"198.18.0.0/24"}, AllowedDestinations: []string{"example.com"}},
	}
}

// downDialTimeout is how long the closed "down" host is dialled before it counts as unreachable: the
// default's 30 seconds would only make the rule slower.
const downDialTimeout = 3 * time.Second

func newLiveConformanceWorld(t *testing.T, host HostConfig, direct *Backend) backendtest.World {
	tgt, err := parseURI(host.URI)
	if err != nil || tgt.transport != "unix" {
		t.Fatalf("the live conformance suite needs a local unix socket URI, got %q (%v)", host.URI, err)
	}
	local, err := libvirtfault.Start(socketDir(t), tgt.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := local.Close(); err != nil {
			t.Errorf("closing the fault proxy: %v", err)
		}
	})
	down, err := libvirtfault.Start(socketDir(t), tgt.socket)
	if err != nil {
		t.Fatal(err)
	}
	closeDown := sync.OnceValue(down.Close)
	t.Cleanup(func() {
		if err := closeDown(); err != nil {
			t.Errorf("closing the down host's proxy: %v", err)
		}
	})

	h := host
	h.URI = tgt.name + "?socket=" + url.QueryEscape(local.Socket())
	d := HostConfig{
		URI:  "test:///default?socket=" + url.QueryEscape(down.Socket()),
		Pool: "default-pool", Network: "default", BaseVolume: "base.img", DomainType: DomainTypeQEMU,
		DialTimeout: downDialTimeout,
	}
	b, err := New(Config{Hosts: map[string]HostConfig{liveHost: h, "down": d}})
	if err != nil {
		t.Fatal(err)
	}
	b.pollInterval = 200 * time.Millisecond
	closeAtEnd(t, b)
	t.Cleanup(func() { sweepConformance(t, direct) })

	return backendtest.World{
		Backend: b,
		// libvirtd starts the domain and the connection drops before its answer comes back.
		LoseNextAnswer: func(t *testing.T) {
			k := domainCreateCall(t, host, tgt)
			warmUp(t, b)
			local.Reset()
			local.CutAt(k, libvirtfault.BeforeReply)
			t.Cleanup(func() {
				if cuts := local.Cuts(); len(cuts) != 1 || cuts[0].Call.Name() != "DomainCreate" {
					t.Errorf("the fault proxy cut %+v (calls %s), want one cut at DomainCreate", cuts, callNames(local.Calls()))
				}
			})
		},
		// The host goes away: its socket is removed and its connections cut.
		FailScope: func(t *testing.T) {
			if err := closeDown(); err != nil {
				t.Fatalf("closing the down host's proxy: %v", err)
			}
		},
		// A domain without the provider's metadata, as one defined by hand.
		Foreign: func(t *testing.T, name string) {
			x := fmt.Sprintf("<domain type='qemu'><name>%s</name><memory unit='MiB'>32</memory>"+
				"<os><type arch='x86_64'>hvm</type></os></domain>", name)
			inspect(t, direct, func(l api) error {
				_, err := l.DomainDefineXMLFlags(x, 0)
				return err
			})
			t.Cleanup(func() { undefineForeign(t, direct, name) })
		},
		RemoveForeign: func(t *testing.T, name string) { undefineForeign(t, direct, name) },
	}
}

// undefineForeign removes the domain the Foreign hook defined, if it is still there.
func undefineForeign(t *testing.T, direct *Backend, name string) {
	t.Helper()
	inspect(t, direct, func(l api) error {
		dom, err := l.DomainLookupByName(name)
		if isCode(err, libvirt.ErrNoDomain) {
			return nil
		}
		if err != nil {
			return err
		}
		return l.DomainUndefineFlags(dom, 0)
	})
}

// socketDir is a folder for a fault proxy's socket, removed when the test ends. A short one: a unix socket's
// path must fit in 108 bytes, which t.TempDir's, named after the subtest, may not.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "egress-conf-") //nolint:usetesting // see above
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// warmUp makes b dial "local" (a Get of a proxy that does not exist), so that what it sends next is counted
// from the first call of the operation.
func warmUp(t *testing.T, b *Backend) {
	t.Helper()
	id := backend.ProviderID{Backend: Kind, Target: liveHost, Name: conformancePrefix + "warm-up"}
	if _, err := b.Get(ctxFor(t, 2*time.Minute), id); !backend.IsNotFound(err) {
		t.Fatalf("Get of %s = %v, want NotFound", id, err)
	}
}

// domainCreateCall measures at which call of a Create, on a connection already open, DomainCreate goes out:
// a probe proxy is made once uncut through a fault proxy of its own, and deleted.
func domainCreateCall(t *testing.T, host HostConfig, tgt target) int {
	t.Helper()
	p, err := libvirtfault.Start(socketDir(t), tgt.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	h := host
	h.URI = tgt.name + "?socket=" + url.QueryEscape(p.Socket())
	b, err := New(Config{Hosts: map[string]HostConfig{liveHost: h}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	b.pollInterval = 200 * time.Millisecond
	warmUp(t, b)
	spec := liveConformanceSpec(conformancePrefix + "probe")
	spec.UID, spec.Owner = uuid.NewString(), testOwner()
	p.Reset()
	inst, err := b.Create(ctxFor(t, 2*time.Minute), spec)
	calls := p.Calls()
	if inst.ID.Name != "" {
		if derr := b.Delete(ctxFor(t, 2*time.Minute), inst.ID); derr != nil {
			t.Errorf("deleting the probe %s: %v", inst.ID, derr)
		}
	}
	if err != nil {
		t.Fatalf("the probe's Create, uncut: %v", err)
	}
	for _, c := range calls {
		if c.Name() == "DomainCreate" {
			return c.N
		}
	}
	t.Fatalf("the probe's Create made no DomainCreate call: %s", callNames(calls))
	return 0
}

// sweepConformance deletes, with the backend's own Delete, every proxy of the suite's names on the host, and
// fails the test if anything of those names is left: the next world lists the same owners.
func sweepConformance(t *testing.T, direct *Backend) {
	t.Helper()
	for _, name := range conformanceLeftovers(t, direct) {
		id := backend.ProviderID{Backend: Kind, Target: liveHost, Name: name}
		if err := direct.Delete(ctxFor(t, 2*time.Minute), id); err != nil {
			t.Errorf("sweeping %s: %v", id, err)
		}
	}
	if left := conformanceLeftovers(t, direct); len(left) > 0 {
		t.Errorf("after the sweep the host still has %v", left)
	}
}

// conformanceLeftovers names the proxies of the suite's names the host has: a domain, or a volume of one.
func conformanceLeftovers(t *testing.T, direct *Backend) []string {
	t.Helper()
	names := map[string]bool{}
	inspect(t, direct, func(l api) error {
		stats, err := l.ConnectGetAllDomainStats(nil, uint32(libvirt.DomainStatsState), 0)
		for _, s := range stats {
			if strings.HasPrefix(s.Dom.Name, conformancePrefix) {
				names[s.Dom.Name] = true
			}
		}
		return err
	})
	for _, v := range poolVolumesNamed(t, direct, conformancePrefix) {
		for _, suffix := range []string{rootVolumeName(""), seedVolumeName("")} {
			if name, ok := strings.CutSuffix(v, suffix); ok {
				names[name] = true
			}
		}
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	return out
}
