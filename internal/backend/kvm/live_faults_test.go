package kvm

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/hashicorp/terraform-plugin-log/tflogtest"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/iso9660"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/libvirtfault"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// The tests here cut the connection to the real libvirtd at every call an operation makes, in both places a
// cut can fall (before the daemon saw the call, after it carried it out but before its answer came back),
// and check the operation, retried as the provider retries it, ends as if nothing had happened.

// faultIPs is how many fixed addresses the fault tables have: 198.18.0.10 up to .59, below the test
// network's DHCP range (.100 up) and apart from the addresses other live tests fix (.77).
const faultIPs = 50

// faultIP is the fixed address of the i-th case's proxy, so that every case also reserves and frees a DHCP
// host entry. Cases run side by side, each with an address of its own: a table with more cases than
// addresses would give two running cases one address, so it panics instead of wrapping around.
func faultIP(i int) string {
	if i < 0 || i >= faultIPs {
		panic(fmt.Sprintf("fault case %d has no address of its own: the tables have %d; widen faultIPs", i, faultIPs))
	}
	return fmt.Sprintf("198.18.0.%d", 10+i)
}

// clearStaleFaultReservations removes the reservations in faultIP's range whose domain is gone. A run killed
// in the middle of a table leaves some behind, and the next run's cases would meet them as another proxy's
// and fail as Permanent: rightly, as the provider cannot tell a stale reservation from someone else's. The
// tables call it before their cases start, when no case of theirs holds an address.
func clearStaleFaultReservations(t *testing.T, b *Backend) {
	t.Helper()
	c := b.conns[liveHost]
	inRange := func(ip string) bool {
		for i := range faultIPs {
			if faultIP(i) == ip {
				return true
			}
		}
		return false
	}
	err := c.do(t.Context(), func(l api) error {
		return removeHosts(l, c.host.Network, func(h libvirtxml.NetworkDHCPHost) bool {
			if !inRange(h.IP) {
				return false
			}
			if _, err := l.DomainLookupByName(h.Name); !isCode(err, libvirt.ErrNoDomain) {
				return false // its domain exists, or it is not known whether it does
			}
			t.Logf("removing the stale reservation of %s for %s (%s): its domain is gone", h.IP, h.Name, h.MAC)
			return true
		})
	})
	if err != nil {
		t.Fatalf("clearing stale reservations: %v", err)
	}
}

// startFaultProxy puts a fault injector in front of the live daemon's socket.
func startFaultProxy(t *testing.T) *libvirtfault.Proxy {
	t.Helper()
	h := liveHostConfig(t)
	tgt, err := parseURI(h.URI)
	if err != nil || tgt.transport != "unix" {
		t.Fatalf("the fault tests need a local unix socket URI, got %q (%v)", h.URI, err)
	}
	p, err := libvirtfault.Start(t.TempDir(), tgt.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("closing the fault proxy: %v", err)
		}
	})
	return p
}

// backendVia is a live backend that reaches the daemon through the fault proxy. Each case takes a new one,
// so the dial's own calls are part of what is cut.
func backendVia(t *testing.T, p *libvirtfault.Proxy) *Backend {
	t.Helper()
	h := liveHostConfig(t)
	tgt, _ := parseURI(h.URI)
	h.URI = tgt.name + "?socket=" + url.QueryEscape(p.Socket())
	b, err := New(Config{Hosts: map[string]HostConfig{liveHost: h}})
	if err != nil {
		t.Fatal(err)
	}
	b.pollInterval = 200 * time.Millisecond
	closeAtEnd(t, b)
	return b
}

// faultSpec is a live proxy with a fixed address.
func faultSpec(owner string, i int) backend.Spec {
	s := liveSpec(owner)
	optionsOf(s.Placement).IP = faultIP(i)
	return s
}

// retried runs op as the provider does: Transient errors are retried with its backoff until ctx ends.
func retried(ctx context.Context, op func(context.Context) error) error {
	return backend.Retry(ctx, backend.DefaultBackoff, op)
}

// faultRow is one line of the table a fault test prints.
type faultRow struct {
	k        int
	call     string
	pos      libvirtfault.Position
	outcome  string
	wall     time.Duration
	extra    int // calls made after the cut
	attempts int
}

// logFaultTable prints the rows. The uncut rows (k 0), run among the others, are the baseline a cut's cost
// is measured from: on a loaded machine the wall time of a run alone says little about one run beside others.
func logFaultTable(t *testing.T, title string, alone time.Duration, rows []faultRow) {
	t.Helper()
	var s strings.Builder
	fmt.Fprintf(&s, "%s (uncut, run alone: %v)\n%4s  %-26s %-13s %8s %6s %5s  %s\n", title, alone.Round(time.Millisecond),
		"k", "call", "cut", "wall", "extra", "tries", "outcome")
	var base, cut time.Duration
	var nBase, nCut int
	for _, r := range rows {
		fmt.Fprintf(&s, "%4d  %-26s %-13s %8v %6d %5d  %s\n", r.k, r.call, r.pos, r.wall.Round(time.Millisecond), r.extra, r.attempts, r.outcome)
		if r.k == 0 {
			base, nBase = base+r.wall, nBase+1
		} else {
			cut, nCut = cut+r.wall, nCut+1
		}
	}
	if nBase > 0 && nCut > 0 {
		b, c := base/time.Duration(nBase), cut/time.Duration(nCut)
		fmt.Fprintf(&s, "%d cut cases; uncut runs beside them took %v on average, cut ones %v: a cut costs %v\n",
			nCut, b.Round(time.Millisecond), c.Round(time.Millisecond), (c - b).Round(time.Millisecond))
	}
	t.Log(s.String())
}

// leftovers lists what exists of the proxy name on the host: its domain (with its state), its volumes and
// its DHCP host entries.
func leftovers(t *testing.T, ref *Backend, name, ip string) (dom string, vols []string, hosts []string) {
	t.Helper()
	if st, ok := domainState(t, ref, name); ok {
		dom = fmt.Sprintf("state %d", st)
		if st == libvirt.DomainRunning {
			dom = "running"
		}
	}
	vols = volumesOf(t, ref, name)
	sort.Strings(vols)
	inspect(t, ref, func(l api) error {
		n, err := l.NetworkLookupByName(ref.hosts[liveHost].Network)
		if err != nil {
			return err
		}
		entries, err := dhcpHosts(l, n)
		for _, e := range entries {
			if e.Name == name || e.IP == ip {
				hosts = append(hosts, e.Name+"="+e.IP)
			}
		}
		return err
	})
	return dom, vols, hosts
}

// measure runs op once uncut through p and returns the calls it made and how long it took.
func measure(t *testing.T, p *libvirtfault.Proxy, op func(b *Backend) error) ([]libvirtfault.Call, time.Duration) {
	t.Helper()
	b := backendVia(t, p)
	p.Reset()
	start := time.Now()
	if err := op(b); err != nil {
		t.Fatalf("uncut run: %v", err)
	}
	took := time.Since(start)
	calls := p.Calls()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	return calls, took
}

// faultCase is one (k, position) case: it arms p, runs op through a new backend and checks the host after.
type faultCase struct {
	k   int
	pos libvirtfault.Position
}

// faultCases are the (k, position) cases for an operation of n calls, both positions of every k that keep
// allows (nil: all), after two uncut runs (k 0) for a baseline.
func faultCases(n int, keep func(k int) bool) []faultCase {
	cases := []faultCase{{0, 0}, {0, 0}}
	for k := 1; k <= n; k++ {
		if keep == nil || keep(k) {
			cases = append(cases, faultCase{k, libvirtfault.BeforeCall}, faultCase{k, libvirtfault.BeforeReply})
		}
	}
	return cases
}

// faultTable says how runFaultCases runs an operation's cases: side by side (parallel) or one after another;
// callsVary when the operation polls, so that a run may end before call k (such a case runs again, cut at a
// call of the tail it reached; it passes only once a cut happened); keep chooses the calls to cut (nil: every
// one).
type faultTable struct {
	title     string
	parallel  bool
	callsVary bool
	keep      func(k int) bool
}

// runFaultCases runs the table's cases as subtests, each with a fault proxy of its own (the call count is the
// proxy's), and prints the table once all are done. run returns the row's outcome problems.
func runFaultCases(t *testing.T, ft faultTable, uncut []libvirtfault.Call, took time.Duration,
	run func(t *testing.T, i int, p *libvirtfault.Proxy, row *faultRow) []string) {
	t.Helper()
	title, parallel, callsVary := ft.title, ft.parallel, ft.callsVary
	cases := faultCases(len(uncut), ft.keep)
	rows := make([]faultRow, len(cases))
	t.Run("cases", func(t *testing.T) {
		for i, tc := range cases {
			name := fmt.Sprintf("k=%d/%s", tc.k, strings.ReplaceAll(tc.pos.String(), " ", "_"))
			if tc.k == 0 {
				name = fmt.Sprintf("uncut/%d", i)
			}
			t.Run(name, func(t *testing.T) {
				if parallel {
					t.Parallel()
				}
				p := startFaultProxy(t)
				row := &rows[i]
				*row = faultRow{k: tc.k, call: "(none)", pos: tc.pos}
				wantCuts := 0
				if tc.k > 0 {
					row.call, wantCuts = uncut[tc.k-1].Name(), 1
					p.CutAt(tc.k, tc.pos)
				}
				bad := run(t, i, p, row)
				cutAt := tc.k
				// A run that polled less than the uncut one can end before call k: it cut nothing, so it
				// proved nothing. The case runs again, cut at a call the last run did reach: first a few short
				// of its end (the polling tail), then further in, as each run may poll less again.
				for again := 1; again <= 3 && callsVary && wantCuts == 1 && len(p.Cuts()) == 0 && len(bad) == 0; again++ {
					n := len(p.Calls())
					if n >= cutAt {
						break // reached, yet not cut: reported below
					}
					cutAt = max(1, []int{n - 5, n * 3 / 4, n / 2}[again-1])
					t.Logf("call %d not reached (this run made %d calls): running the case again, cut at call %d", tc.k, n, cutAt)
					row.call = fmt.Sprintf("(tail) call %d", cutAt)
					p.Reset()
					p.CutAt(cutAt, tc.pos)
					bad = run(t, i, p, row)
				}
				row.extra = len(p.Calls()) - len(uncut)
				// Every cut case must have cut: one that ran to its end uncut is a failure, not a pass.
				if cuts := p.Cuts(); len(cuts) != wantCuts || (wantCuts == 1 && cuts[0].Call.N != cutAt) {
					bad = append(bad, fmt.Sprintf("cuts %+v, want %d at call %d", cuts, wantCuts, cutAt))
				}
				if err := p.Err(); err != nil {
					bad = append(bad, fmt.Sprintf("the proxy could not read the traffic: %v", err))
				}
				if len(bad) > 0 {
					row.outcome = strings.Join(bad, "; ")
					t.Errorf("cut at call %d (%s) %s: %s", tc.k, row.call, tc.pos, row.outcome)
				}
			})
		}
	})
	logFaultTable(t, title, took, rows)
}

func TestLiveCreateSurvivesACutAtEveryCall(t *testing.T) {
	ref := liveBackend(t)
	clearStaleFaultReservations(t, ref)
	owner := testOwner()

	clean := faultSpec(owner, 0)
	cleanupProxy(t, ref, clean.Name)
	calls, took := measure(t, startFaultProxy(t), func(b *Backend) error {
		_, err := b.Create(ctxFor(t, 2*time.Minute), clean)
		return err
	})
	if err := ref.Delete(ctxFor(t, 2*time.Minute), idOf(clean)); err != nil {
		t.Fatal(err)
	}
	t.Logf("an uncut Create makes %d calls: %s", len(calls), callNames(calls))

	runFaultCases(t, faultTable{title: "Create, cut once at call k", parallel: true, keep: cutsKept(t, createCutStride)}, calls, took, func(t *testing.T, i int, p *libvirtfault.Proxy, row *faultRow) []string {
		spec := faultSpec(owner, i)
		cleanupProxy(t, ref, spec.Name)
		b := backendVia(t, p)
		start := time.Now()
		var inst backend.Instance
		err := retried(ctxFor(t, 2*time.Minute), func(ctx context.Context) (err error) {
			row.attempts++
			inst, err = b.Create(ctx, spec)
			return err
		})
		row.wall = time.Since(start)
		dom, vols, hosts := leftovers(t, ref, spec.Name, faultIP(i))
		row.outcome = "one running proxy"
		var bad []string
		if err != nil {
			bad = append(bad, "error: "+err.Error())
		}
		if inst.State != backend.StateRunning || dom != "running" {
			bad = append(bad, fmt.Sprintf("returned %s, domain %q", inst.State, dom))
		}
		if want := []string{spec.Name + "-root.qcow2", spec.Name + "-seed.iso"}; !equalStrings(vols, want) {
			bad = append(bad, fmt.Sprintf("volumes %v", vols))
		}
		if len(hosts) != 1 {
			bad = append(bad, fmt.Sprintf("DHCP host entries %v, want exactly one", hosts))
		}
		return bad
	})
}

func TestLiveDeleteSurvivesACutAtEveryCall(t *testing.T) {
	ref := liveBackend(t)
	clearStaleFaultReservations(t, ref)
	owner := testOwner()
	make1 := func(t *testing.T, i int) backend.ProviderID {
		t.Helper()
		spec := faultSpec(owner, i)
		cleanupProxy(t, ref, spec.Name)
		inst, err := ref.Create(ctxFor(t, 2*time.Minute), spec)
		if err != nil {
			t.Fatal(err)
		}
		return inst.ID
	}

	id := make1(t, 0)
	calls, took := measure(t, startFaultProxy(t), func(b *Backend) error { return b.Delete(ctxFor(t, 2*time.Minute), id) })
	t.Logf("an uncut Delete makes %d calls: %s", len(calls), callNames(calls))

	runFaultCases(t, faultTable{title: "Delete, cut once at call k", parallel: true, keep: cutsKept(t, deleteCutStride)}, calls, took, func(t *testing.T, i int, p *libvirtfault.Proxy, row *faultRow) []string {
		id := make1(t, i)
		b := backendVia(t, p)
		p.Reset() // make1 went around the proxy; counting starts with the Delete
		if row.k > 0 {
			p.CutAt(row.k, row.pos)
		}
		start := time.Now()
		err := retried(ctxFor(t, 2*time.Minute), func(ctx context.Context) error {
			row.attempts++
			return b.Delete(ctx, id)
		})
		row.wall = time.Since(start)
		dom, vols, hosts := leftovers(t, ref, id.Name, faultIP(i))
		row.outcome = "nothing left"
		var bad []string
		if err != nil {
			bad = append(bad, "error: "+err.Error())
		}
		if dom != "" || len(vols) > 0 || len(hosts) > 0 {
			bad = append(bad, fmt.Sprintf("left: domain %q, volumes %v, DHCP hosts %v", dom, vols, hosts))
		}
		return bad
	})
}

func callNames(calls []libvirtfault.Call) string {
	names := make([]string, len(calls))
	for i, c := range calls {
		names[i] = c.Name()
	}
	return strings.Join(names, " ")
}

// A cut is visible in the provider's debug log: the call whose answer was lost, and the redial after it.
func TestLiveRedialIsLoggedWithTheInterruptedCall(t *testing.T) {
	p := startFaultProxy(t)
	ref := liveBackend(t)
	spec := liveSpec(testOwner())
	cleanupProxy(t, ref, spec.Name)
	b := backendVia(t, p)
	var logs bytes.Buffer
	ctx := backend.Subsystem(tflogtest.RootLogger(ctxFor(t, 2*time.Minute), &logs), Kind)
	// Call 3 is the Create's first after the handshake: its name lookup.
	p.CutAt(3, libvirtfault.BeforeReply)
	if err := retried(ctx, func(ctx context.Context) error { _, err := b.Create(ctx, spec); return err }); err != nil {
		t.Fatal(err)
	}
	entries, err := tflogtest.MultilineJSONDecode(&logs)
	if err != nil {
		t.Fatal(err)
	}
	var lost, redialled bool
	for _, e := range entries {
		if e["@level"] != "debug" || e["host"] != liveHost || e["interrupted_call"] != "DomainLookupByName" {
			continue
		}
		switch e["@message"] {
		case "libvirt connection lost; the call's outcome is unknown and the operation is retried":
			lost = true
		case "libvirt connection redialled":
			redialled = true
		}
	}
	if !lost || !redialled {
		t.Errorf("debug log has the lost connection %v and the redial %v, want both naming host %q and DomainLookupByName; log:\n%s", lost, redialled, liveHost, logs.String())
	}
}

// Update (labels, in the domain's metadata) on one proxy, cut at each of its calls: the cases run one after
// another on the same proxy, each setting labels of its own, and each must leave exactly those.
func TestLiveUpdateSurvivesACutAtEveryCall(t *testing.T) {
	ref := liveBackend(t)
	spec := liveSpec(testOwner())
	cleanupProxy(t, ref, spec.Name)
	inst, err := ref.Create(ctxFor(t, 2*time.Minute), spec)
	if err != nil {
		t.Fatal(err)
	}
	update := func(b *Backend, label string, attempts *int) (backend.Instance, error) {
		s := spec
		s.Labels = map[string]string{"case": label}
		var got backend.Instance
		err := retried(ctxFor(t, 2*time.Minute), func(ctx context.Context) (err error) {
			*attempts++
			got, err = b.Update(ctx, inst.ID, s)
			return err
		})
		return got, err
	}
	calls, took := measure(t, startFaultProxy(t), func(b *Backend) error {
		var n int
		_, err := update(b, "uncut", &n)
		return err
	})
	t.Logf("an uncut Update makes %d calls: %s", len(calls), callNames(calls))

	runFaultCases(t, faultTable{title: "Update, cut once at call k", keep: cutsKept(t, updateCutStride)}, calls, took, func(t *testing.T, i int, p *libvirtfault.Proxy, row *faultRow) []string {
		b := backendVia(t, p)
		label := fmt.Sprintf("case-%d", i)
		start := time.Now()
		got, err := update(b, label, &row.attempts)
		row.wall = time.Since(start)
		row.outcome = "labels replaced once"
		var bad []string
		if err != nil {
			bad = append(bad, "error: "+err.Error())
		}
		if got.Labels["case"] != label || got.State != backend.StateRunning {
			bad = append(bad, fmt.Sprintf("returned labels %v, state %s", got.Labels, got.State))
		}
		if back, err := ref.Get(ctxFor(t, time.Minute), inst.ID); err != nil || back.Labels["case"] != label || len(back.Labels) != 1 {
			bad = append(bad, fmt.Sprintf("read back %v, %v", back.Labels, err))
		}
		if dom, vols, _ := leftovers(t, ref, spec.Name, ""); dom != "running" || len(vols) != 2 {
			bad = append(bad, fmt.Sprintf("domain %q, volumes %v", dom, vols))
		}
		return bad
	})
}

// cutsKept chooses the calls a cut table cuts: one call in stride by default, so that a run stays short while
// runs over time cut every call; EGRESS_TEST_CUTS=N replays the choice a run printed, =all cuts every call of
// every table (testutil.Sample).
func cutsKept(t *testing.T, stride int) func(k int) bool {
	t.Helper()
	return testutil.Sample(t, "EGRESS_TEST_CUTS", stride)
}

// The tables' strides. Create and Delete cases run side by side, about a minute per table when every call is
// cut; Update's are cheap; a Reconfigure case is a reconfiguration of a guest under emulation, about five
// seconds alone and twenty beside the rest of a cold make test, and a Reconfigure makes about 155 calls (it
// holds connections around Squid's reload and drains the accept queue): one in forty, four calls each cut
// before the call and before the reply, as one in ten took 30 minutes of a cold make test (its VM emulated all
// along) and was the run's last group to end, and one in thirty took 4.3 minutes of the cold run of 7247238,
// whose CPUs every group needed until its 71st minute. Each run draws another offset and prints it, so runs
// together cut every call.
const (
	createCutStride      = 2
	deleteCutStride      = 2
	updateCutStride      = 1
	reconfigureCutStride = 40
)

// seedsOnly gives up on a volume stream that moves nothing for 15 s instead of the backend's half minute: b
// moves nothing bigger than a seed, which takes milliseconds, and go-libvirt deadlocks on about one seed
// download in fifty right after an upload (see libvirtconn's downloadStall), which each case then pays for.
func seedsOnly(b *Backend) *Backend {
	b.conns[liveHost].pool.SetStreamStall(15 * time.Second)
	return b
}

// Reconfigure (the rules, through the guest agent) on one booted proxy, cut at each of its calls: the cases
// run one after another on the same guest, each switching the allow-list to the other of two, and each must
// leave Squid enforcing exactly the new list, no temporary file in the guest, and the seed and the domain's
// metadata saying the same. An agent exchange polls (a program's exit, Squid's log), so a run may make fewer
// calls than the uncut one did: a case whose k it never reached is shown as such and proves nothing.
func TestLiveReconfigureSurvivesACutAtEveryCall(t *testing.T) {
	parallelBoot(t)
	spec := bootedSpec(t, testOwner())
	keep := cutsKept(t, reconfigureCutStride)
	ref := seedsOnly(probeFromNamespace(liveBackend(t)))
	upstreamPort := serveUpstreamInNetns(t)
	spec.Proxy.AllowedDestinations = []string{"allowed.test"}
	spec.Proxy.AllowedPorts = []int{443, upstreamPort}
	cleanupProxy(t, ref, spec.Name)
	id := idOf(spec)
	inst, err := ref.Create(ctxFor(t, 20*time.Minute), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	waitFor(t, 3*time.Minute, "Get to report the proxy reconfigurable", func() bool {
		got, err := ref.Get(ctxFor(t, time.Minute), id)
		return err == nil && got.Reconfigurable
	})
	runInGuest(t, ref, spec.Name, "/bin/sh", "-c", "grep -q allowed.test /etc/hosts || echo '"+liveGateway+" allowed.test denied.test' >> /etc/hosts; "+squidBin+" -k reconfigure")
	proxy := net.JoinHostPort(inst.InternalAddress, strconv.Itoa(inst.Port))
	urls := map[string]string{}
	for _, host := range []string{"allowed.test", "denied.test"} {
		urls[host] = fmt.Sprintf("http://%s:%d/", host, upstreamPort)
	}
	waitFor(t, time.Minute, "allowed.test to answer 200 through the proxy", func() bool { return viaProxy(t, proxy, "", urls["allowed.test"]) == "200" })

	// settings(i) lets through one of the two names: the uncut run goes to denied.test, case i to the other
	// name than case i-1.
	settings := func(host string) proxyconf.Settings {
		s := spec.Proxy
		s.AllowedDestinations = []string{host}
		return s
	}
	other := map[string]string{"allowed.test": "denied.test", "denied.test": "allowed.test"}
	reconfigure := func(b *Backend, host string, attempts *int) error {
		return retried(ctxFor(t, 5*time.Minute), func(ctx context.Context) error {
			*attempts++
			_, err := b.Reconfigure(ctx, id, settings(host))
			return err
		})
	}
	calls, took := measure(t, startFaultProxy(t), func(b *Backend) error {
		var n int
		return reconfigure(probeFromNamespace(b), "denied.test", &n)
	})
	t.Logf("an uncut Reconfigure makes %d calls: %s", len(calls), callNames(calls))

	current := "denied.test"
	table := faultTable{title: "Reconfigure, cut once at call k", callsVary: true, keep: keep}
	runFaultCases(t, table, calls, took, func(t *testing.T, i int, p *libvirtfault.Proxy, row *faultRow) []string {
		b := seedsOnly(probeFromNamespace(backendVia(t, p)))
		want := other[current]
		start := time.Now()
		err := reconfigure(b, want, &row.attempts)
		row.wall = time.Since(start)
		row.outcome = "the new list in force"
		var bad []string
		if err != nil {
			bad = append(bad, "error: "+err.Error())
		} else {
			current = want
		}
		for host, status := range map[string]string{want: "200", other[want]: "403"} {
			if got := viaProxy(t, proxy, "", urls[host]); got != status {
				bad = append(bad, fmt.Sprintf("%s answered %s, want %s", host, got, status))
			}
		}
		var inGuest []string // set afresh by each run of the inspection, which may run again on a new connection
		inspect(t, ref, func(l api) error {
			inGuest = nil
			dom, err := l.DomainLookupByName(spec.Name)
			if err != nil {
				return err
			}
			for _, tmp := range []string{confNew, htpasswdNew} {
				if left, err := guestFileExists(l, dom, tmp); err != nil || left {
					inGuest = append(inGuest, fmt.Sprintf("temporary file %s left in the guest (%v)", tmp, err))
				}
			}
			conf, err := proxyconf.RenderSquidConf(settings(want), vmguest.RenderOptions())
			if err != nil {
				return err
			}
			seed := volRef(ref.hosts[liveHost].Pool, seedVolumeName(spec.Name))
			// libvirt 9.0 acknowledges an upload's end before its I/O helper has written all of it: a read
			// at once may still find the old image. Seen here once in about fifty cases, a moment later it
			// was the new one; a seed that stays old is the failure.
			var ok bool
			for start := time.Now(); !ok && time.Since(start) < 30*time.Second; {
				if ok, err = seedCurrent(l, seed, conf, nil, nil); err != nil {
					return err
				}
				if !ok {
					time.Sleep(100 * time.Millisecond) // the daemon's writer gives no event to wait on
				}
			}
			if !ok {
				inGuest = append(inGuest, "the seed does not hold the new config: "+seedDestinations(l, seed))
			}
			return nil
		})
		bad = append(bad, inGuest...)
		if got, err := ref.Get(ctxFor(t, time.Minute), id); err != nil || got.Proxy == nil || !slices.Equal(got.Proxy.AllowedDestinations, []string{want}) {
			bad = append(bad, fmt.Sprintf("Get reports %+v (%v)", got.Proxy, err))
		}
		return bad
	})
}

// seedDestinations says which of the test's two names the seed's squid.conf lets through, for a failure.
func seedDestinations(l api, seed libvirt.StorageVol) string {
	var buf bytes.Buffer
	if err := l.StorageVolDownload(seed, &buf, 0, seedReadLimit, 0); err != nil {
		return "seed unreadable: " + err.Error()
	}
	ud, err := iso9660.ReadFile(buf.Bytes(), "user-data")
	if err != nil {
		return fmt.Sprintf("seed of %d bytes without readable user-data: %v", buf.Len(), err)
	}
	conf := userDataFiles(ud)[proxyconf.ConfPath]
	var names []string
	for _, name := range []string{"allowed.test", "denied.test"} {
		if bytes.Contains(conf, []byte(name)) {
			names = append(names, name)
		}
	}
	return fmt.Sprintf("the seed (%d bytes) lets through %v", buf.Len(), names)
}
