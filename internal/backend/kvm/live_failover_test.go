package kvm

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// failoverBound is what TestLiveFailoverVRRP asserts of the time from the destruction of the VM holding the
// virtual address until requests through it succeed again. The target is under 5 s (a backup takes the
// address about 3.6 s after the last advertisement, see guest.VRRPAdvertSeconds); the bound leaves room for
// two VMs under emulation on a loaded machine, and the measured time is printed.
const failoverBound = 30 * time.Second

// TestLiveFailoverVRRP boots a proxy of two instances from the project's image (side by side), checks that
// clients reach it at its virtual address, then, with a client in the test namespace sending a request
// through the virtual address every 100 ms: changes its rules in place (Reconfigure, one instance at a time),
// during which no request may fail; rolls a new image over it (Update, one instance at a time, each booting
// from a new root disk), during which no request may fail either; and destroys the VM holding the address and
// measures how long until requests succeed again: the other VM must take the address and serve. Get then
// reports the proxy Degraded, the destroyed VM as the unhealthy member.
func TestLiveFailoverVRRP(t *testing.T) {
	parallelBoot(t)
	spec := bootedSpec(t, testOwner())
	b := probeFromNamespace(liveBackend(t))
	b.pollInterval = 2 * time.Second
	upstreamPort := serveUpstreamInNetns(t)
	optionsOf(spec.Placement).Instances = 2
	// The upstream's name, in the network's DNS (the guests' resolver): a name in a guest's own /etc/hosts
	// would not outlive the new root disk of the image roll.
	upstream := "failover-" + spec.UID[:8] + ".test"
	nameOnNetwork(t, b, upstream, liveGateway)
	held := serveHeldInNetns(t)
	spec.Proxy.AllowedDestinations = []string{upstream}
	spec.Proxy.AllowedPorts = []int{443, upstreamPort, held.port}
	id := idOf(spec)
	// The volume the image roll moves the proxy onto, made once the proxy's image is in the pool: deleted after
	// the proxy (cleanups run last first), which its root disks overlay by then.
	rolledBase := "egress-roll-" + spec.UID[:8] + ".qcow2"
	t.Cleanup(func() {
		inspect(t, b, func(l api) error { return deleteVolume(l, b.hosts[liveHost].Pool, rolledBase) })
	})
	inst, _ := createBooted(t, b, spec, 25*time.Minute) // the two side by side, until both health endpoints answered
	if inst.State != backend.StateRunning {
		// Create waited until both health endpoints answered, then its last read probed them once more. Under
		// emulation on a loaded machine a guest can stall past one probe's 5 seconds: a cold run of make test
		// saw Create come back Degraded, one member's probe an "i/o timeout", right after both had answered. The
		// test needs both serving before its traffic starts, so it reads again until they are, and says so.
		t.Logf("Create = %s with members %+v: reading again until both serve", inst.State, inst.Members)
		waitFor(t, 3*time.Minute, "both members healthy", func() bool {
			got, err := b.Get(ctxFor(t, callLimit), id)
			if err == nil {
				inst = got
			}
			return err == nil && got.State == backend.StateRunning
		})
	}
	if len(inst.Members) != 2 || inst.State != backend.StateRunning {
		t.Fatalf("Create = %s with members %+v, want Running with two healthy members", inst.State, inst.Members)
	}
	vip := inst.InternalAddress
	for _, m := range inst.Members {
		if m.InternalAddress == vip || !m.Healthy {
			t.Fatalf("member %+v: want its own address, not the virtual %s, and healthy", m, vip)
		}
	}
	// Create waited until the proxy answered at the virtual address: its health endpoint there answers at once
	// (three tries, each bounded by the probe's timeout, for a loaded machine).
	answered := false
	for i := 0; i < 3 && !answered; i++ {
		res, err := b.readiness.probeProxy(ctxFor(t, callLimit), vip, inst.Port)
		answered = res == probeReady
		if !answered {
			t.Logf("the proxy at the virtual address %s right after Create: %v", vip, err)
		}
	}
	if !answered {
		t.Fatalf("the proxy did not answer at its virtual address %s right after Create", vip)
	}
	client := &http.Client{
		// Long enough for an answer of a guest under emulation on a machine loaded by make test's other VMs (one
		// took 20 s for a 407 there): a failure here is an error or a refusal, not slowness. Requests to the
		// destroyed VM fail later so, which changes nothing measured: service is back at the first success.
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: net.JoinHostPort(vip, strconv.Itoa(inst.Port))}),
			// A connect may wait for TCP's retransmissions (1, 3, 7 and 15 s after the first SYN): while a VM's
			// Squid reloads, new connections are held so, not refused. A client whose own connect timeout is
			// shorter than the hold sees a timeout instead: one of 3 s did, four times in a run on an idle
			// machine, and one of 10 s did in a run of make test on a cold machine, where the hold of an
			// emulated VM lasted over 8 s. This one waits as long as its whole request may take, as curl's and
			// Go's defaults do and longer.
			DialContext:       netnsDialWithin(liveNetns(), 30*time.Second),
			DisableKeepAlives: true, // every request a new connection, as a fleet's clients make them
		},
	}
	target := fmt.Sprintf("http://%s:%d/", upstream, upstreamPort)
	get := func() error {
		resp, err := client.Get(target)
		if err != nil {
			return err
		}
		_ = resp.Body.Close() // only the status matters
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	ok := func() bool { return get() == nil }
	waitFor(t, time.Minute, "a request through the virtual address "+vip+" to succeed", ok)
	// Both instances run keepalived (each starts it after its Squid answers): the one without the address is
	// the backup the failover needs.
	waitFor(t, 3*time.Minute, "keepalived active on both instances", func() bool {
		for _, m := range inst.Members {
			if strings.TrimSpace(outputInGuestAnyStatus(t, b, m.Name, "/bin/systemctl", "is-active", "keepalived.service")) != "active" {
				return false
			}
		}
		return true
	})

	holder := vipHolder(t, b, inst.Members, vip)
	if holder == "" {
		t.Fatalf("no instance holds the virtual address %s, though a request through it succeeded", vip)
	}
	t.Logf("instance %s holds the virtual address %s", holder, vip)

	// The client loop, bounded in count and time: a request starts every 100 ms, each on a new connection and
	// in its own goroutine, so a request hanging on the lost VM does not hold back the next. While capped (the
	// in-place change, the image roll), a tick with changeInFlight requests still in flight starts none: a guest under
	// emulation on a loaded machine may serve fewer than ten a second, and an open loop would then queue
	// requests until they time out, which would measure the machine, not the change.
	const changeInFlight = 4
	var (
		inFlight      atomic.Int32
		capped        atomic.Bool
		skippedCapped atomic.Int32
	)
	type result struct {
		started, ended time.Time // ended zero while the request is in flight
		err            error
	}
	var (
		mu      sync.Mutex
		results []*result
		flying  sync.WaitGroup
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer flying.Wait()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 18000; i++ { // at most 30 minutes of requests
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if capped.Load() && inFlight.Load() >= changeInFlight {
				skippedCapped.Add(1)
				continue
			}
			r := &result{started: time.Now()}
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
			inFlight.Add(1)
			flying.Go(func() {
				defer inFlight.Add(-1)
				err := get()
				mu.Lock()
				r.err, r.ended = err, time.Now()
				mu.Unlock()
			})
		}
	}()
	// succeeded is the earliest end of a successful request that started after after: when service was back.
	succeeded := func(after time.Time) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		var first time.Time
		for _, r := range results {
			if !r.ended.IsZero() && r.err == nil && r.started.After(after) && (first.IsZero() || r.ended.Before(first)) {
				first = r.ended
			}
		}
		return first, !first.IsZero()
	}
	// Requests succeed before anything is changed.
	waitFor(t, time.Minute, "the client loop's first success", func() bool { _, ok := succeeded(time.Time{}); return ok })

	// underTraffic runs change while requests go on, capped, and fails the test for every request started
	// during it that failed.
	underTraffic := func(what string, change func()) {
		capped.Store(true)
		started := time.Now()
		t.Logf("the %s starts at %s UTC", what, started.UTC().Format(time.StampMilli))
		change()
		ended := time.Now()
		capped.Store(false)
		t.Logf("%s under traffic: %s; %s holds the virtual address now", what, ended.Sub(started).Round(100*time.Millisecond), vipHolder(t, b, inst.Members, vip))
		waitFor(t, time.Minute, "the requests started during the "+what+" to end", func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range results {
				if r.ended.IsZero() && !r.started.After(ended) {
					return false
				}
			}
			return true
		})
		// What keepalived did on each instance meanwhile (the address moving, a failed track script): the first
		// thing to read when a request failed.
		for _, m := range inst.Members {
			t.Logf("keepalived on %s during the %s:\n%s", m.Name, what, outputInGuestAnyStatus(t, b, m.Name, "/bin/journalctl", "--no-pager", "-o", "short-precise",
				"-u", "keepalived.service", "--since", "-"+strconv.Itoa(int(time.Since(started).Seconds())+5)+"s"))
		}
		var during, failedDuring int
		var slowest time.Duration
		mu.Lock()
		for _, r := range results {
			if r.started.Before(started) || r.started.After(ended) {
				continue
			}
			during++
			slowest = max(slowest, r.ended.Sub(r.started))
			if r.err != nil {
				failedDuring++
				t.Errorf("a request started %s into the %s failed after %s: %v", r.started.Sub(started).Round(10*time.Millisecond), what, r.ended.Sub(r.started).Round(10*time.Millisecond), r.err)
			}
		}
		mu.Unlock()
		t.Logf("%s: %d of %d requests through the virtual address during it failed; the slowest took %s; %d ticks started none, %d requests being in flight",
			strings.ToUpper(what), failedDuring, during, slowest.Round(10*time.Millisecond), skippedCapped.Swap(0), changeInFlight)
		if during == 0 {
			t.Errorf("no request was sent during the %s: the test measured nothing", what)
		}
	}

	// An in-place rule change under that traffic, one instance after the other: a reload closes Squid's
	// listening port for a moment, and the instance holds new connections meanwhile (and keeps the virtual
	// address), so no request through it fails.
	changed := spec.Proxy
	changed.AllowedDestinations = append(slices.Clone(spec.Proxy.AllowedDestinations), "other.test")
	underTraffic("in-place change", func() {
		if _, err := b.Reconfigure(ctxFor(t, callLimit), id, changed); err != nil {
			t.Fatalf("Reconfigure under traffic: %v", err)
		}
	})

	// A new image rolled over the two instances under the same traffic: each in turn hands the virtual address
	// over (new connections held, those in progress drained, keepalived stopped), gets a new root disk and boots
	// from it, while the other serves, so no request fails. The new image is a volume over the proxy's own,
	// with its content: a new volume, which the instances boot from as from any other.
	proxyBase := optionsOf(inst.Placement).BaseVolume
	inspect(t, b, func(l api) error {
		pool, err := activePool(l, b.hosts[liveHost].Pool)
		if err != nil {
			return err
		}
		base, err := lookupBase(l, pool.pool, proxyBase)
		if err != nil {
			return err
		}
		return createRoot(l, pool.pool, rolledBase, base, base.capacity)
	})
	boots := map[string]string{}
	for _, m := range inst.Members {
		boots[m.Name] = outputInGuest(t, b, m.Name, "/bin/cat", "/proc/sys/kernel/random/boot_id")
	}
	rolled := spec
	rolledOptions := *optionsOf(spec.Placement)
	rolledOptions.ImageFile, rolledOptions.BaseVolume = "", rolledBase
	rolled.Placement.Options = &rolledOptions
	rolled.Proxy = changed
	// A request in flight on the VM holding the address when the roll reaches it: the upstream holds its answer
	// until that VM holds new connections (its retirement has begun: the drain waits for this request), or until
	// the VM stops. Answered then, it must succeed: stopped with it in flight, the VM would lose it.
	holder = vipHolder(t, b, inst.Members, vip)
	heldResult := make(chan error, 1)
	// Its own client: the request waits while the VMs before the holder boot again, longer than the loop's
	// requests may take.
	heldClient := &http.Client{Timeout: 20 * time.Minute, Transport: client.Transport}
	go func() {
		resp, err := heldClient.Get(fmt.Sprintf("http://%s:%d/", upstream, held.port))
		if err == nil {
			_ = resp.Body.Close() // only the status matters
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		heldResult <- err
	}()
	select {
	case <-held.arrived:
	case err := <-heldResult:
		t.Fatalf("the request to hold across the roll ended before the upstream held it: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the request to hold across the roll did not reach the upstream within a minute")
	}
	releasedBy := make(chan string, 1)
	go func() { releasedBy <- releaseOnRetirement(b, holder, held.release) }()
	underTraffic("image roll", func() {
		got, err := b.Update(ctxFor(t, 25*time.Minute), id, rolled)
		if err != nil {
			t.Fatalf("Update onto %s under traffic: %v", rolledBase, err)
		}
		if base := optionsOf(got.Placement).BaseVolume; base != rolledBase || got.State != backend.StateRunning {
			t.Errorf("Update onto %s = %s on %q, want Running on it", rolledBase, got.State, base)
		}
		for _, n := range got.Notes {
			t.Logf("note of the roll: %s", n)
		}
	})
	t.Logf("the request held on %s across the roll was answered when %s", holder, <-releasedBy)
	if err := <-heldResult; err != nil {
		t.Errorf("the request in flight on %s, which held the virtual address, when the roll reached it failed: %v", holder, err)
	}
	for _, m := range inst.Members {
		if now := outputInGuest(t, b, m.Name, "/bin/cat", "/proc/sys/kernel/random/boot_id"); now == boots[m.Name] {
			t.Errorf("%s did not boot again in the image roll (boot id %s)", m.Name, strings.TrimSpace(now))
		}
	}

	// The address may be moving as the change ends (a VM that gave it up while its Squid reloaded on a loaded
	// host takes three missed advertisements to be replaced): wait for a holder rather than look once.
	waitFor(t, 2*time.Minute, "an instance to hold the virtual address after the change", func() bool {
		holder = vipHolder(t, b, inst.Members, vip)
		return holder != ""
	})

	destroyed := time.Now()
	inspect(t, b, func(l api) error {
		dom, err := l.DomainLookupByName(holder)
		if err != nil {
			return err
		}
		return l.DomainDestroyFlags(dom, libvirt.DomainDestroyDefault)
	})
	t.Logf("destroyed %s", holder)
	// Service again: a request that started after the destruction and succeeded.
	waitFor(t, 2*time.Minute, "a request through the virtual address to succeed after the holder was destroyed", func() bool {
		_, ok := succeeded(destroyed)
		return ok
	})
	close(stop)
	<-done
	back, _ := succeeded(destroyed) // every request has ended: the earliest success is final
	failed := 0
	for _, r := range results {
		if r.err != nil && r.started.After(destroyed) {
			failed++
		}
	}
	recovery := back.Sub(destroyed)
	t.Logf("FAILOVER: service again %s after the VM holding the virtual address was destroyed (%d of the requests started after it failed; target under 5 s)",
		recovery.Round(10*time.Millisecond), failed)
	if recovery > failoverBound {
		t.Errorf("service came back %s after the destruction, more than %s", recovery, failoverBound)
	}
	var survivor string
	for _, m := range inst.Members {
		if m.Name != holder {
			survivor = m.Name
		}
	}
	if got := vipHolder(t, b, nil, vip, survivor); got != survivor {
		t.Errorf("after the failover %q holds the virtual address, want %s", got, survivor)
	}

	// Get reports the proxy Degraded, the destroyed instance unhealthy and why.
	got, err := b.Get(ctxFor(t, callLimit), id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Get after the failover: %s, members %+v", got.State, got.Members)
	if got.State != backend.StateDegraded || got.InternalAddress != vip {
		t.Errorf("Get = %s at %s, want Degraded at %s", got.State, got.InternalAddress, vip)
	}
	for _, m := range got.Members {
		if (m.Name == holder) == m.Healthy || (m.Name == holder && m.Reason == "") {
			t.Errorf("member %+v: want %s alone unhealthy, with a reason", m, holder)
		}
	}

	// The track script: the survivor's Squid stopped, keepalived there gives up the address.
	stopped := time.Now()
	runInGuest(t, b, survivor, "/bin/systemctl", "stop", "squid.service")
	waitFor(t, time.Minute, survivor+" to give up the virtual address once its Squid stopped", func() bool {
		return vipHolder(t, b, nil, vip, survivor) == ""
	})
	t.Logf("%s gave up the virtual address within %s of the command stopping its Squid (asked through the agent)", survivor, time.Since(stopped).Round(100*time.Millisecond))
	if got, err := b.Get(ctxFor(t, callLimit), id); err != nil || got.State != backend.StateFailed {
		t.Errorf("Get with no instance serving = %s (%v), want Failed", got.State, err)
	}
}

// heldUpstream answers each request once release is closed: arrived says a request came.
type heldUpstream struct {
	port             int
	arrived, release chan struct{}
}

// serveHeldInNetns serves a heldUpstream on the test namespace's gateway address until the test ends.
func serveHeldInNetns(t *testing.T) heldUpstream {
	t.Helper()
	h := heldUpstream{arrived: make(chan struct{}), release: make(chan struct{})}
	l, err := testutil.ListenInNetns(liveNetns(), "tcp", net.JoinHostPort(liveGateway, "0"))
	if err != nil {
		t.Fatalf("listening in namespace %s: %v", liveNetns(), err)
	}
	var once sync.Once
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(h.arrived) })
		select {
		case <-h.release:
			_, _ = fmt.Fprintln(w, "held, then answered") // a failed write shows in the client's status
		case <-r.Context().Done():
		}
	})}
	go func() { _ = srv.Serve(l) }() // ends with Close below
	t.Cleanup(func() { _ = srv.Close() })
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("listener address %v is not TCP", l.Addr())
	}
	h.port = addr.Port
	return h
}

// releaseOnRetirement closes release once the VM name holds new connections (guest.Retire's first step: the
// hold's table is loaded), or once it no longer runs, and says which. It asks every half second, through the
// guest agent; an answer that does not come is asked again.
func releaseOnRetirement(b *Backend, name string, release chan<- struct{}) string {
	defer close(release)
	c := b.conns[liveHost]
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var dom libvirt.Domain
		running := false
		err := c.do(ctx, func(l api) error {
			var err error
			if dom, err = l.DomainLookupByName(name); err != nil {
				return err
			}
			st, reason, err := l.DomainGetState(dom, 0)
			running = stateOf(st, reason) == backend.StateRunning
			return err
		})
		if err == nil && !running {
			cancel()
			return name + " stopped (not retired)"
		}
		if err == nil {
			res, err := guestExec(ctx, c, dom, nftBin, "list", "table", "inet", guest.ReloadHoldTable)
			if err == nil && res.exitCode == 0 {
				cancel()
				return name + " held new connections (retired)"
			}
		}
		cancel()
		time.Sleep(500 * time.Millisecond) // the next look: the hold and the stop are the guest's, not events here
	}
}

// nameOnNetwork gives name the address ip in the DNS of the test host's network, which its guests resolve
// through, until the test ends.
func nameOnNetwork(t *testing.T, b *Backend, name, ip string) {
	t.Helper()
	entry := fmt.Sprintf("<host ip='%s'><hostname>%s</hostname></host>", ip, name)
	update := func(l api, cmd libvirt.NetworkUpdateCommand) error {
		n, err := l.NetworkLookupByName(b.hosts[liveHost].Network)
		if err != nil {
			return err
		}
		return l.NetworkUpdateCompat(n, cmd, libvirt.NetworkSectionDNSHost, -1, entry, libvirt.NetworkUpdateAffectLive)
	}
	inspect(t, b, func(l api) error { return update(l, libvirt.NetworkUpdateCommandAddLast) })
	t.Cleanup(func() { inspect(t, b, func(l api) error { return update(l, libvirt.NetworkUpdateCommandDelete) }) })
}

// vipHolder asks the guests, through their agents, which holds vip: the members' names, or names given.
func vipHolder(t *testing.T, b *Backend, members []backend.Member, vip string, names ...string) string {
	t.Helper()
	for _, m := range members {
		names = append(names, m.Name)
	}
	for _, name := range names {
		out := outputInGuest(t, b, name, "/sbin/ip", "-o", "-4", "addr", "show")
		if strings.Contains(out, " "+vip+"/") {
			return name
		}
	}
	return ""
}

// TestLiveGroupReservations reserves a group's addresses on the test libvirtd's network (no domain is made):
// libvirt takes reservations outside the network's DHCP range, a second reservation of the same group finds the
// same addresses by their MACs, none is the network's gateway or in use already, and releasing the group removes
// exactly its entries.
func TestLiveGroupReservations(t *testing.T) {
	b := liveBackend(t)
	spec := liveSpec(testOwner())
	network := b.hosts[liveHost].Network
	var before []string
	var first, second metaHA
	inspect(t, b, func(l api) error {
		n, err := lookupNetwork(l, network)
		if err != nil {
			return err
		}
		hosts, err := dhcpHosts(l, n)
		for _, h := range hosts {
			before = append(before, h.Name+"="+h.IP)
		}
		if err != nil {
			return err
		}
		if first, err = reserveGroup(l, n, spec, 3); err != nil {
			return err
		}
		second, err = reserveGroup(l, n, spec, 3)
		return err
	})
	t.Cleanup(func() {
		inspect(t, b, func(l api) error { return releaseGroup(l, network, first) })
	})
	t.Logf("reserved: virtual %s, members %+v", first.Virtual, first.Members)
	if second.Virtual != first.Virtual || len(second.Members) != 3 || second.Members[2].IP != first.Members[2].IP {
		t.Errorf("the second reservation took %s %+v, the first %s %+v: want the same", second.Virtual, second.Members, first.Virtual, first.Members)
	}
	seen := map[string]bool{liveGateway: true}
	for _, h := range before {
		_, ip, _ := strings.Cut(h, "=")
		seen[ip] = true
	}
	for _, a := range append([]string{first.Virtual}, first.Members[0].IP, first.Members[1].IP, first.Members[2].IP) {
		if seen[a] || !strings.HasPrefix(a, "198.18.0.") {
			t.Errorf("address %s reserved twice, or the gateway's, or outside the network (reservations before: %v)", a, before)
		}
		seen[a] = true
	}
	var after []string
	inspect(t, b, func(l api) error {
		if err := releaseGroup(l, network, first); err != nil {
			return err
		}
		n, err := lookupNetwork(l, network)
		if err != nil {
			return err
		}
		hosts, err := dhcpHosts(l, n)
		for _, h := range hosts {
			after = append(after, h.Name+"="+h.IP)
		}
		return err
	})
	if strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("reservations after the release %v, before %v", after, before)
	}
}
