package kvm

import (
	"cmp"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/google/uuid"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Tests of the backend's logic against the in-memory fake host. What only a real libvirtd can show
// (QEMU really running, volumes on disk, the network's XML) is in the live tests.

func fakeSpec(uid, owner string) backend.Spec {
	return backend.Spec{
		Name: backend.NameFromUID(uid), UID: uid, Owner: owner, Labels: map[string]string{"team": "a"},
		Placement: backend.Placement{Backend: Kind, Target: "h", Options: &Options{MemoryMiB: 256, DiskGiB: 2}},
		Proxy:     proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}, AllowedDestinations: []string{"example.com"}},
	}
}

func idOf(spec backend.Spec) backend.ProviderID {
	return backend.ProviderID{Backend: Kind, Target: spec.Placement.Target, Name: spec.Name}
}

func volNames(f *fakeHost) []string {
	var out []string
	for n := range f.pools["pool"].vols {
		if n != "base.qcow2" {
			out = append(out, n)
		}
	}
	return out
}

func TestFakeCreateAdoptAndRefuse(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	ctx := context.Background()
	spec := fakeSpec("uid-1", "owner-a")

	first, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if first.State != backend.StateRunning || first.ID.String() != "kvm/h/"+spec.Name {
		t.Fatalf("Create = %+v", first)
	}
	again, err := b.Create(ctx, spec)
	if err != nil || again.UID != spec.UID || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Fatalf("second Create = %+v, %v; want the same proxy adopted", again, err)
	}
	if len(f.domains) != 1 || len(volNames(f)) != 2 {
		t.Fatalf("after two creates: %d domains, volumes %v", len(f.domains), volNames(f))
	}

	other := spec
	other.UID = "uid-2"
	_, err = b.Create(ctx, other)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "uid-1") {
		t.Fatalf("Create with another UID = %v, want Permanent naming the owner's UID", err)
	}
}

func TestFakeForeignDomainIsNeverOurs(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	ctx := context.Background()
	spec := fakeSpec("uid-1", "o")
	f.domains[spec.Name] = &fakeDomain{dom: libvirt.Domain{Name: spec.Name}, state: int32(libvirt.DomainRunning)}

	if _, err := b.Create(ctx, spec); backend.ClassOf(err) != backend.ClassPermanent {
		t.Errorf("Create over a foreign domain = %v, want Permanent", err)
	}
	if _, err := b.Get(ctx, idOf(spec)); backend.ClassOf(err) != backend.ClassPermanent {
		t.Errorf("Get of a foreign domain = %v, want Permanent (never NotFound)", err)
	}
	if err := b.Delete(ctx, idOf(spec)); backend.ClassOf(err) != backend.ClassPermanent {
		t.Errorf("Delete of a foreign domain = %v, want Permanent", err)
	}
	if _, ok := f.domains[spec.Name]; !ok {
		t.Error("the foreign domain was removed")
	}
}

func TestFakeQuotaChecksMakeNothing(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		setup func(*fakeHost, *backend.Spec)
	}{
		"memory beyond the host": {func(f *fakeHost, s *backend.Spec) {
			optionsOf(s.Placement).MemoryMiB = 64 << 10
			f.memKiB = 8 << 20
		}},
		"pool too small": {func(f *fakeHost, s *backend.Spec) { f.pools["pool"].avail = gib }},
		"qemu out of memory": {func(f *fakeHost, s *backend.Spec) {
			f.failOn["DomainCreate"] = lvErr(libvirt.ErrInternalError, "internal error: qemu unexpectedly closed the monitor: cannot set up guest memory 'pc.ram': Cannot allocate memory")
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFakeHost()
			b, _ := fakeBackend(f)
			spec := fakeSpec("uid-q", "o")
			tc.setup(f, &spec)
			_, err := b.Create(context.Background(), spec)
			if backend.ClassOf(err) != backend.ClassQuota {
				t.Fatalf("Create = %v, want Quota", err)
			}
		})
	}
}

func TestFakeLeftoversAreAttributed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := map[string]struct {
		leftoverUID, leftoverOwner string
		wantClass                  backend.Class
	}{
		"same proxy":      {"uid-1", "o", backend.ClassUnclassified},
		"same owner":      {"uid-old", "o", backend.ClassUnclassified},
		"another owner's": {"uid-x", "someone-else", backend.ClassPermanent},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFakeHost()
			b, _ := fakeBackend(f)
			spec := fakeSpec("uid-1", "o")
			// A crashed create of the leftover's proxy: volumes made, domain never defined.
			leftover := spec
			leftover.UID, leftover.Owner = tc.leftoverUID, tc.leftoverOwner
			if _, err := b.Create(ctx, leftover); err != nil {
				t.Fatal(err)
			}
			delete(f.domains, spec.Name)

			list, err := b.ListByTag(ctx, backend.Selector{Owner: tc.leftoverOwner})
			if err != nil || len(list) != 1 || list[0].State != backend.StateFailed || list[0].UID != tc.leftoverUID {
				t.Fatalf("ListByTag = %+v, %v; want the leftover as Failed", list, err)
			}

			inst, err := b.Create(ctx, spec)
			if backend.ClassOf(err) != tc.wantClass {
				t.Fatalf("Create = %v, want class %v", err, tc.wantClass)
			}
			if err == nil && (inst.UID != spec.UID || len(volNames(f)) != 2) {
				t.Fatalf("Create = %+v with volumes %v", inst, volNames(f))
			}
		})
	}
}

func TestFakeInterruptedUploadIsOurs(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	spec := fakeSpec("uid-1", "o")
	f.failOn["StorageVolUpload"] = lvErr(libvirt.ErrRPC, "stream aborted")
	if _, err := b.Create(context.Background(), spec); backend.ClassOf(err) != backend.ClassTransient {
		t.Fatalf("Create = %v, want Transient", err)
	}
	if v := volNames(f); len(v) != 0 {
		t.Fatalf("failed upload left %v", v)
	}
	// A crash mid-upload leaves an empty seed: the next attempt must take it as its own.
	f.pools["pool"].vols[seedVolumeName(spec.Name)] = &fakeVol{vol: libvirt.StorageVol{Pool: "pool", Name: seedVolumeName(spec.Name)}, data: make([]byte, 40000)}
	delete(f.failOn, "StorageVolUpload")
	if _, err := b.Create(context.Background(), spec); err != nil {
		t.Fatalf("Create after an interrupted upload = %v", err)
	}
}

// A leftover seed is read (a download stream) before it is deleted; libvirt refuses the delete as "still in
// use" until the stream's hold ends, a moment later. The create waits that out instead of failing as Permanent.
func TestFakeLeftoverSeedDeletedOnceTheStreamLetsGo(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	spec := fakeSpec("uid-1", "o")
	if _, err := b.Create(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	delete(f.domains, spec.Name) // a crashed create: volumes made, domain never defined
	f.mu.Lock()
	f.streamHolds = 3
	f.mu.Unlock()
	if _, err := b.Create(context.Background(), spec); err != nil {
		t.Fatalf("Create over its own leftover seed, held a moment by the stream that read it: %v", err)
	}
	if f.streamHolds != 0 {
		t.Errorf("%d refused deletes left: the leftover seed was not read and deleted", f.streamHolds)
	}
}

// Delete of a proxy whose create crashed before its domain was defined reads the leftover seed (whose is it?)
// and then deletes it, which libvirt refuses as "still in use" until the download's hold ends: the delete waits
// that out instead of failing as Permanent (a create's give-back after libvirtd restarted mid-apply did, in a
// cold run of make test).
func TestFakeDeleteOfALeftoverSeedWaitsForTheStream(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	spec := fakeSpec("uid-1", "o")
	inst, err := b.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	delete(f.domains, spec.Name) // a crashed create: volumes made, domain never defined
	f.mu.Lock()
	f.streamHolds = 3
	f.mu.Unlock()
	if err := b.Delete(context.Background(), inst.ID); err != nil {
		t.Fatalf("Delete of a leftover seed held a moment by the stream that read it: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.streamHolds != 0 {
		t.Errorf("%d refused deletes left: the leftover seed was not read and deleted", f.streamHolds)
	}
	if _, left := f.pools["pool"].vols[seedVolumeName(spec.Name)]; left {
		t.Errorf("seed volume %s left after Delete", seedVolumeName(spec.Name))
	}
}

func TestFakeFixedIPReservation(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	ctx := context.Background()
	spec := fakeSpec("uid-1", "o")
	optionsOf(spec.Placement).IP = "198.18.0.50"
	optionsOf(spec.Placement).WaitForAddress = true

	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if inst.InternalAddress != "198.18.0.50" {
		t.Errorf("address = %q, want the fixed IP at once", inst.InternalAddress)
	}
	hosts := f.networks["net"].hosts
	if len(hosts) != 1 || hosts[0].IP != "198.18.0.50" || hosts[0].MAC != macFromUID("uid-1") || hosts[0].Name != spec.Name {
		t.Fatalf("reservations = %+v", hosts)
	}
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatalf("adopting Create = %v", err)
	}
	clash := fakeSpec("uid-2", "o")
	optionsOf(clash.Placement).IP = "198.18.0.50"
	if _, err := b.Create(ctx, clash); backend.ClassOf(err) != backend.ClassPermanent {
		t.Errorf("Create with a taken IP = %v, want Permanent", err)
	}
	if err := b.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if len(f.networks["net"].hosts) != 0 {
		t.Errorf("reservation left after Delete: %+v", f.networks["net"].hosts)
	}
}

func TestFakeWaitForLease(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	spec := fakeSpec("uid-1", "o")
	optionsOf(spec.Placement).WaitForAddress = true
	// Recorded shape of virNetworkGetDHCPLeases for a guest on a NAT network: an old and a current lease.
	mac := macFromUID("uid-1")
	f.networks["net"].leases = []libvirt.NetworkDhcpLease{
		{Iface: "virbr-egress", Expirytime: 1700000000, Type: 0, Mac: libvirt.OptString{mac}, Ipaddr: "198.18.0.101", Prefix: 24, Hostname: libvirt.OptString{spec.Name}},
		{Iface: "virbr-egress", Expirytime: 1700003600, Type: 0, Mac: libvirt.OptString{mac}, Ipaddr: "198.18.0.117", Prefix: 24, Hostname: libvirt.OptString{spec.Name}},
	}
	inst, err := b.Create(context.Background(), spec)
	if err != nil || inst.InternalAddress != "198.18.0.117" {
		t.Fatalf("Create = %+v, %v; want the current lease's address", inst, err)
	}

	// No lease and no agent: the wait ends with ctx, and the instance comes back with its id. The ctx ends
	// when the backend asks for leases, so every step before the wait has run whatever the machine's load.
	f2 := newFakeHost()
	b2, _ := fakeBackend(f2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f2.onCall = func(method string) {
		if method == "NetworkGetDhcpLeases" {
			cancel()
		}
	}
	inst, err = b2.Create(ctx, spec)
	if err == nil || inst.ID.Name != spec.Name || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "address") {
		t.Fatalf("Create without an address = %+v, %v; want the instance and the wait's end", inst, err)
	}
}

func TestFakeUpdateLabels(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	ctx := context.Background()
	spec := fakeSpec("uid-1", "o")
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Labels = map[string]string{"team": "b", "env": "prod"}
	got, err := b.Update(ctx, inst.ID, spec)
	if err != nil || got.Labels["team"] != "b" || got.Labels["env"] != "prod" || got.UID != spec.UID {
		t.Fatalf("Update = %+v, %v", got, err)
	}
}

func TestFakeDeleteHalfFinished(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	b, _ := fakeBackend(f)
	ctx := context.Background()
	spec := fakeSpec("uid-1", "o")
	if _, err := b.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	delete(f.domains, spec.Name) // volumes without domain
	if err := b.Delete(ctx, idOf(spec)); err != nil {
		t.Fatal(err)
	}
	if v := volNames(f); len(v) != 0 {
		t.Errorf("volumes left: %v", v)
	}
	if _, err := b.Get(ctx, idOf(spec)); !backend.IsNotFound(err) {
		t.Errorf("Get = %v, want NotFound", err)
	}
}

func TestFakeCancelledContext(t *testing.T) {
	t.Parallel()
	b, cnt := fakeBackend(newFakeHost())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Create(ctx, fakeSpec("uid-1", "o"))
	if !errors.Is(err, context.Canceled) || backend.ClassOf(err) != backend.ClassTransient {
		t.Fatalf("Create with a cancelled ctx = %v", err)
	}
	if n, _ := cnt.take(); n != 0 {
		t.Errorf("%d calls made after cancellation", n)
	}
}

func TestFakeUnknownHostAndBadID(t *testing.T) {
	t.Parallel()
	b, _ := fakeBackend(newFakeHost())
	ctx := context.Background()
	if _, err := b.Get(ctx, backend.ProviderID{Backend: Kind, Target: "nope", Name: "x"}); backend.ClassOf(err) != backend.ClassPermanent {
		t.Errorf("Get on an unknown host = %v, want Permanent", err)
	}
	spec := fakeSpec("uid-1", "o")
	spec.Placement.Target = "nope"
	if _, err := b.Create(ctx, spec); backend.ClassOf(err) != backend.ClassPermanent {
		t.Errorf("Create on an unknown host = %v, want Permanent", err)
	}
}

// Create under faults around the domain's start, each a fake-host fault and what Create must then do:
//   - a start whose answer is lost may or may not have happened: the retry reads the domain's state and starts
//     it only if it is still shut off, so Create ends with the one domain running, either way;
//   - a domain that libvirtd killed as it died, right after answering the start, is started again, at most
//     maxRestarts times; one that stops at once with its connection intact is a QEMU that cannot run:
//     Permanent, with libvirt's reason, not retried;
//   - a root volume gone when the domain is defined or started (removed by a late delete of an attempt whose
//     connection was cut) makes the create start again, not fail as NotFound, which would read as a proxy
//     deleted outside Terraform.
//
// Create runs under backend.Retry, as the provider runs it.
func TestFakeCreateAroundTheStart(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		fault                                 func(*fakeHost)
		wantCreates, wantDefines, wantUndefns int
		wantErr, wantAdvice                   string
		wantClass                             backend.Class // of wantErr; Permanent when unset
	}{
		// The start never happened: it is issued again.
		"start lost before the host saw it": {fault: func(f *fakeHost) { f.startsLostBefore = 1 }, wantCreates: 2, wantDefines: 1},
		// The start happened: the state read says so, and it is not issued again.
		"start lost after it took effect": {fault: func(f *fakeHost) { f.startsLostAfter = 1 }, wantCreates: 1, wantDefines: 1},
		"start lost twice, once each way": {fault: func(f *fakeHost) { f.startsLostBefore, f.startsLostAfter = 1, 1 }, wantCreates: 2, wantDefines: 1},
		"killed with the daemon once":     {fault: func(f *fakeHost) { f.startsKilledByDaemon = 1 }, wantCreates: 2, wantDefines: 1},
		"killed with the daemon thrice":   {fault: func(f *fakeHost) { f.startsKilledByDaemon = 3 }, wantCreates: 4, wantDefines: 1},
		// The random-cut test met it: no call saw the connection go, libvirt's reason says what happened.
		"killed with the daemon, the loss unseen": {fault: func(f *fakeHost) { f.startsKilledQuietly = 1 }, wantCreates: 2, wantDefines: 1},
		"killed every time": {fault: func(f *fakeHost) { f.startsKilledByDaemon = 100 }, wantCreates: 1 + maxRestarts, wantDefines: 1,
			wantErr: "stopped right after starting (state Stopped, reason killed by libvirtd)"},
		"stops at once": {fault: func(f *fakeHost) { f.startsStopAtOnce = 1 }, wantCreates: 1, wantDefines: 1,
			wantErr: "stopped right after starting (state Stopped, reason shut down by the guest)"},
		"root gone at define": {fault: func(f *fakeHost) { f.rootsGoneAtDefine = 1 }, wantCreates: 1, wantDefines: 2},
		"root gone at start":  {fault: func(f *fakeHost) { f.rootsGoneAtStart = 1 }, wantCreates: 2, wantDefines: 2, wantUndefns: 1},
		// Nothing ends such a start but the create's timeout (here, the third state read): the error says
		// what the domain hung in, and the advice how a host's administrator clears it.
		"wedged by libvirtd dying in the start": {fault: func(f *fakeHost) { f.startsWedged = 1 }, wantCreates: 1, wantDefines: 1,
			wantClass: backend.ClassTransient, wantErr: "is paused (starting up), not running yet", wantAdvice: "remove the domain's status file"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFakeHost()
			tc.fault(f)
			ctx := newExpiringContext()
			defer ctx.expire()
			wedgedReads := 0
			f.onCall = func(method string) {
				if method == "WedgedState" {
					if wedgedReads++; wedgedReads == 3 {
						ctx.expire()
					}
				}
			}
			b, cnt := fakeBackend(f)
			spec := fakeSpec(uuid.NewString(), "o")
			var inst backend.Instance
			err := backend.Retry(ctx, backend.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Factor: 2}, func(ctx context.Context) error {
				var err error
				inst, err = b.Create(ctx, spec)
				return err
			})
			_, calls := cnt.take()
			if calls["DomainCreate"] != tc.wantCreates || calls["DomainDefineXMLFlags"] != tc.wantDefines || calls["DomainUndefineFlags"] != tc.wantUndefns {
				t.Errorf("started %d, defined %d and undefined %d times, want %d, %d and %d", calls["DomainCreate"], calls["DomainDefineXMLFlags"],
					calls["DomainUndefineFlags"], tc.wantCreates, tc.wantDefines, tc.wantUndefns)
			}
			if tc.wantErr != "" {
				class := cmp.Or(tc.wantClass, backend.ClassPermanent)
				if backend.ClassOf(err) != class || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Create error = %v (%s), want %s with %q", err, backend.ClassOf(err), class, tc.wantErr)
				}
				if advice := backend.AdviceOf(err); !strings.Contains(advice, tc.wantAdvice) {
					t.Errorf("advice = %q, want it to say %q", advice, tc.wantAdvice)
				}
				return
			}
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if _, ok := f.pools["pool"].vols[spec.Name+"-root.qcow2"]; !ok || len(f.domains) != 1 || inst.State != backend.StateRunning {
				t.Errorf("after the create: root volume present %v, %d domains, state %s; want the volume and one running domain", ok, len(f.domains), inst.State)
			}
		})
	}
}

// expiringContext reaches its deadline when the test says so, as a create's timeout ends at a step the test
// chose instead of after a guessed duration.
type expiringContext struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newExpiringContext() *expiringContext {
	return &expiringContext{Context: context.Background(), done: make(chan struct{})}
}

func (c *expiringContext) expire()               { c.once.Do(func() { close(c.done) }) }
func (c *expiringContext) Done() <-chan struct{} { return c.done }

func (c *expiringContext) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// dropOnList breaks its session at the first domain listing, as a connection that drops under ListByTag.
type dropOnList struct {
	api
	lost chan struct{}
	once sync.Once
}

func (d *dropOnList) ConnectGetAllDomainStats([]libvirt.Domain, uint32, uint32) ([]libvirt.DomainStatsRecord, error) {
	d.once.Do(func() { close(d.lost) })
	return nil, io.EOF
}

// A listing whose connection dropped is read again: the host is not reported failed, its proxy is listed.
func TestFakeListByTagSurvivesALostConnection(t *testing.T) {
	t.Parallel()
	f := newFakeHost()
	seed, _ := fakeBackend(f)
	spec := fakeSpec(uuid.NewString(), "owner-l")
	if _, err := seed.Create(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	dials := 0
	b, err := newBackend(Config{Hosts: map[string]HostConfig{"h": {
		URI: "test:///fake", Pool: "pool", Network: "net", BaseVolume: "base.qcow2", DomainType: DomainTypeQEMU,
	}}}, func(context.Context, HostConfig, target) (*libvirtconn.Session, error) {
		dials++
		if dials == 1 {
			d := &dropOnList{api: f, lost: make(chan struct{})}
			return &libvirtconn.Session{API: d, Lost: d.lost, Close: func() {}}, nil
		}
		return &libvirtconn.Session{API: f, Lost: make(chan struct{}), Close: func() {}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	list, err := b.ListByTag(context.Background(), backend.Selector{Owner: "owner-l"})
	if err != nil || len(list) != 1 || list[0].Name != spec.Name || dials != 2 {
		t.Errorf("ListByTag over a dropped connection = %+v, %v after %d dials; want the one proxy after a redial", list, err, dials)
	}
}
