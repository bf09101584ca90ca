package kvm

import (
	"context"
	"errors"
	"net/url"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/google/uuid"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Tests against a real libvirtd run when EGRESS_LIBVIRT_URI is set (scripts/libvirt-env.sh start prints it,
// with the pool, network and base volume it made); when it is set they must pass, never skip.
const liveHost = "local"

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func liveHostConfig(t testing.TB) HostConfig {
	t.Helper()
	uri := os.Getenv("EGRESS_LIBVIRT_URI")
	if uri == "" {
		t.Skip("EGRESS_LIBVIRT_URI is not set: run `make test-kvm`, or scripts/libvirt-env.sh start and set EGRESS_LIBVIRT_URI to the URI it prints")
	}
	return HostConfig{
		URI:        uri,
		Pool:       envOr("EGRESS_LIBVIRT_POOL", "egress-test"),
		Network:    envOr("EGRESS_LIBVIRT_NETWORK", "egress-test"),
		BaseVolume: envOr("EGRESS_LIBVIRT_BASE_VOLUME", "egress-base.qcow2"),
		// kvm guests hang on this kind of machine although it advertises kvm: see DESIGN.md.
		DomainType: DomainTypeQEMU,
	}
}

// liveSocket is the unix socket of the test's libvirtd, the socket parameter of EGRESS_LIBVIRT_URI
// (scripts/libvirt-env.sh runs a private instance with a socket of its own, never the machine's): the test
// driver and the ssh transport's far side reach the same daemon through it.
func liveSocket(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(liveHostConfig(t).URI)
	if err != nil {
		t.Fatalf("EGRESS_LIBVIRT_URI: %v", err)
	}
	if s := u.Query().Get("socket"); s != "" {
		return s
	}
	return systemSocket
}

func liveBackend(t testing.TB) *Backend {
	t.Helper()
	b, err := New(Config{Hosts: map[string]HostConfig{liveHost: liveHostConfig(t)}})
	if err != nil {
		t.Fatal(err)
	}
	b.pollInterval = 200 * time.Millisecond
	closeAtEnd(t, b)
	return b
}

// closeAtEnd closes b's connections when the test ends.
func closeAtEnd(t testing.TB, b *Backend) {
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("closing the backend: %v", err)
		}
	})
}

// bootedSpec is a proxy made from the project's image (EGRESS_TEST_IMAGE; the test is skipped without it)
// that boots a real guest: memory for Squid, and Create waits for the guest's address and its proxy.
func bootedSpec(t testing.TB, owner string) backend.Spec {
	t.Helper()
	image := os.Getenv("EGRESS_TEST_IMAGE")
	if image == "" {
		t.Skip("EGRESS_TEST_IMAGE is not set: build the image (scripts/build-image.sh) and set it to the qcow2's path")
	}
	spec := liveSpec(owner)
	optionsOf(spec.Placement).ImageFile = image
	optionsOf(spec.Placement).DiskGiB = 0
	optionsOf(spec.Placement).MemoryMiB = 512
	optionsOf(spec.Placement).WaitForAddress = true
	optionsOf(spec.Placement).WaitForProxy = true
	return spec
}

// probeFromNamespace makes b's readiness probes start inside the test namespace, where the guest is
// reachable, as from a provider on the libvirt host; the test runs in the root namespace, and nothing leaves
// the test one.
func probeFromNamespace(b *Backend) *Backend {
	b.readiness.dial = netnsDial(liveNetns())
	b.readiness.attached = nil // the test dial decides what is reachable
	return b
}

// liveSpec is a small proxy VM: the blank base volume boots nothing, but QEMU runs it, which is what the
// backend is responsible for.
func liveSpec(owner string) backend.Spec {
	uid := uuid.NewString()
	return backend.Spec{
		Name:   backend.NameFromUID(uid),
		UID:    uid,
		Owner:  owner,
		Labels: map[string]string{"team": "egress"},
		Placement: backend.Placement{Backend: Kind, Target: liveHost, Options: &Options{
			VCPUs: 1, MemoryMiB: 128, DiskGiB: 2,
		}},
		Proxy: proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"198.18.0.0/24"}, AllowedDestinations: []string{"example.com"}},
	}
}

func testOwner() string {
	return "test-" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
}

// createBooted makes spec's proxy, removed again at the test's end, and logs how long its Create took (the boot
// until the health endpoints answered); limit bounds that Create alone (callLimit bounds each call after it).
func createBooted(t *testing.T, b *Backend, spec backend.Spec, limit time.Duration) (inst backend.Instance, start time.Time) {
	t.Helper()
	cleanupProxy(t, b, spec.Name)
	start = time.Now()
	inst, err := b.Create(ctxFor(t, limit), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Logf("Create (boot until the health endpoints answered): %s", time.Since(start).Round(time.Second))
	return inst, start
}

// callLimit bounds each backend call a booted-VM test makes after its Create (which has a bound of its own):
// a call of its own bound, not what is left of one for the whole test, which the booting tests run two at a
// time on a loaded machine outlasted (TestLiveReconfigure took 23 minutes in a cold run of make test, its last
// calls failing on its 20-minute context).
const callLimit = 10 * time.Minute

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// inspect runs calls against the host outside the backend's logic, to check what really exists.
func inspect(t testing.TB, b *Backend, fn func(l api) error) {
	t.Helper()
	// Generous: a test VM booting under emulation beside it can slow the daemon's answers a lot.
	ctx := ctxFor(t, 3*time.Minute)
	err := b.conns[liveHost].do(ctx, fn)
	// A connection lost under the inspection (a stalled stream closed, a daemon restarted) is not what the
	// test inspects: fn, which only reads, runs again on a new one.
	for lost := (*libvirtconn.ConnLostError)(nil); errors.As(err, &lost) && ctx.Err() == nil; {
		t.Logf("inspection's connection lost (%v); reading again", err)
		err = b.conns[liveHost].do(ctx, fn)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			// Where the calls stand says more than the deadline does.
			buf := make([]byte, 1<<20)
			t.Logf("inspection timed out; goroutines:\n%s", buf[:runtime.Stack(buf, true)])
		}
		t.Fatal(err)
	}
}

// volumesOf lists the pool's volumes named after the proxy.
func volumesOf(t testing.TB, b *Backend, name string) []string {
	t.Helper()
	return poolVolumesNamed(t, b, name+"-")
}

// poolVolumesNamed lists the test pool's volumes whose names start with prefix. Every kind of volume the
// backend makes (a proxy's, an image's) is known by its name's prefix, and the tests look for them as a user
// would, outside the backend's logic.
func poolVolumesNamed(t testing.TB, b *Backend, prefix string) []string {
	t.Helper()
	var out []string
	inspect(t, b, func(l api) error {
		p, err := l.StoragePoolLookupByName(b.hosts[liveHost].Pool)
		if err != nil {
			return err
		}
		vols, _, err := l.StoragePoolListAllVolumes(p, 1, 0)
		for _, v := range vols {
			if strings.HasPrefix(v.Name, prefix) {
				out = append(out, v.Name)
			}
		}
		return err
	})
	return out
}

// volumeXML reads the test pool's volume name as libvirt describes it (failing the test if there is none):
// its size, format and backing store are what the tests check of images and overlays.
func volumeXML(t testing.TB, b *Backend, name string) libvirtxml.StorageVolume {
	t.Helper()
	var v libvirtxml.StorageVolume
	inspect(t, b, func(l api) error {
		s, err := l.StorageVolGetXMLDesc(volRef(b.hosts[liveHost].Pool, name), 0)
		if err != nil {
			return err
		}
		return v.Unmarshal(s)
	})
	return v
}

func domainState(t testing.TB, b *Backend, name string) (libvirt.DomainState, bool) {
	t.Helper()
	var st int32
	found := true
	inspect(t, b, func(l api) error {
		dom, err := l.DomainLookupByName(name)
		if isCode(err, libvirt.ErrNoDomain) {
			found = false
			return nil
		}
		if err != nil {
			return err
		}
		st, _, err = l.DomainGetState(dom, 0)
		return err
	})
	return libvirt.DomainState(st), found
}

// cleanupProxy deletes the proxy whatever the test did, so a failed test leaves nothing behind.
func cleanupProxy(t testing.TB, b *Backend, name string) {
	t.Cleanup(func() {
		id := backend.ProviderID{Backend: Kind, Target: liveHost, Name: name}
		// Bounded even in cleanup: a daemon that stops answering must fail the test, not hang it.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := b.Delete(ctx, id); err != nil {
			t.Errorf("cleanup of %s: %v", name, err)
		}
	})
}

// parallelBoot runs a test that boots the image beside the package's other booting tests, two at a time (go
// test's -parallel, GOMAXPROCS): a VM under emulation keeps one core busy while it boots, and the booting tests
// run one after another left the second core idle for the last quarter hour of make test. Go runs them once the
// package's sequential tests have ended, so no fault-injection or leak check of those sees their VMs.
func parallelBoot(t *testing.T) {
	t.Parallel()
}
