package kvm

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/iso9660"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Tests of a proxy of several instances (ha.go) on the fake host.

// haFixture is a fake host whose network already has a lease and another proxy's reservation at the
// addresses the allocation would try first, and a dial that reaches a health endpoint for each address
// except those marked down.
type haFixture struct {
	f    *fakeHost
	b    *Backend
	cnt  *counter
	mu   sync.Mutex
	down map[string]bool
	// dialed lists the addresses whose health port was dialled, in order.
	dialed []string
}

const (
	haLeased   = "198.18.0.254" // a dynamic lease of some other guest
	haReserved = "198.18.0.253" // some other proxy's fixed address
)

func newHAFixture(t *testing.T) *haFixture {
	t.Helper()
	f := newFakeHost()
	b, cnt := fakeBackend(f)
	f.networks["net"].leases = append(f.networks["net"].leases, libvirt.NetworkDhcpLease{
		Type: int32(libvirt.IPAddrTypeIpv4), Mac: libvirt.OptString{"52:54:00:99:99:99"}, Ipaddr: haLeased, Expirytime: 1,
	})
	f.networks["net"].hosts = append(f.networks["net"].hosts, libvirtxml.NetworkDHCPHost{MAC: "52:54:00:99:99:98", Name: "other", IP: haReserved})
	x := &haFixture{f: f, b: b, cnt: cnt, down: map[string]bool{}}
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != proxyconf.HealthPath {
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(health.Close)
	proxy := listen(t)
	routes := routeTo(map[int]string{3128: proxy.Addr().String(), proxyconf.DefaultHealthPort: health.Listener.Addr().String()}, nil)
	b.readiness.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, _ := net.SplitHostPort(addr)
		x.mu.Lock()
		down := x.down[host]
		if port == "3129" {
			x.dialed = append(x.dialed, host)
		}
		x.mu.Unlock()
		if down {
			return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
		return routes(ctx, network, addr)
	}
	b.readiness.attached = nil
	return x
}

func (x *haFixture) setDown(addr string, down bool) {
	x.mu.Lock()
	x.down[addr] = down
	x.mu.Unlock()
}

func haSpec(uid string, n int) backend.Spec {
	spec := fakeSpec(uid, "o")
	optionsOf(spec.Placement).Instances = n
	return spec
}

// hostsOf lists the fake network's reservations by name.
func (x *haFixture) hostsOf() map[string]string {
	x.f.mu.Lock()
	defer x.f.mu.Unlock()
	out := map[string]string{}
	for _, h := range x.f.networks["net"].hosts {
		out[h.Name] = h.IP
	}
	return out
}

// checkMadeAgain checks an Update that made one gone instance of the proxy before was again (the fixture's
// calls counted since the Update began): one domain defined, the proxy Running at its address, every member
// there and healthy, at its own name and address.
func (x *haFixture) checkMadeAgain(t *testing.T, updated, before backend.Instance) {
	t.Helper()
	if _, per := x.cnt.take(); per["DomainDefineXMLFlags"] != 1 {
		t.Errorf("Update defined %d domains, want 1 (the gone one)", per["DomainDefineXMLFlags"])
	}
	if updated.State != backend.StateRunning || updated.InternalAddress != before.InternalAddress {
		t.Errorf("Update = %s at %s, want Running at %s", updated.State, updated.InternalAddress, before.InternalAddress)
	}
	for i, m := range updated.Members {
		if m.Gone || !m.Healthy || m.Name != before.Members[i].Name || m.InternalAddress != before.Members[i].InternalAddress {
			t.Errorf("member %d after Update = %+v, want %s at %s, healthy", i, m, before.Members[i].Name, before.Members[i].InternalAddress)
		}
	}
}

// seedUserData reads the user-data files of the domain's seed volume.
func (x *haFixture) seedUserData(t *testing.T, name string) map[string][]byte {
	t.Helper()
	x.f.mu.Lock()
	img := bytes.Clone(x.f.pools["pool"].vols[seedVolumeName(name)].data)
	x.f.mu.Unlock()
	ud, err := iso9660.ReadFile(img, "user-data")
	if err != nil {
		t.Fatal(err)
	}
	return userDataFiles(ud)
}

func TestFakeGroupCreateReservesAndWritesVRRP(t *testing.T) {
	t.Parallel()
	x := newHAFixture(t)
	ctx := context.Background()
	spec := haSpec("uid-ha-1", 2)
	inst, err := x.b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	hosts := x.hostsOf()
	vip, ip0, ip1 := hosts[spec.Name+"-vip"], hosts[spec.Name], hosts[spec.Name+"-2"]
	seen := map[string]bool{haLeased: true, haReserved: true, "198.18.0.1": true}
	for _, a := range []string{vip, ip0, ip1} {
		if a == "" || seen[a] || !strings.HasPrefix(a, "198.18.0.") {
			t.Fatalf("reservations %v: want three new addresses of 198.18.0.0/24, none the gateway's, the lease's %s or the other reservation's %s", hosts, haLeased, haReserved)
		}
		seen[a] = true
	}
	if inst.ID != idOf(spec) || inst.InternalAddress != vip || inst.EgressAddress != "" || inst.State != backend.StateRunning {
		t.Errorf("Create = id %s, address %q, egress %q, state %s; want %s at the virtual address %s, no egress address, Running",
			inst.ID, inst.InternalAddress, inst.EgressAddress, inst.State, idOf(spec), vip)
	}
	want := []backend.Member{
		{Name: spec.Name, Scope: "h", InternalAddress: ip0, Healthy: true},
		{Name: spec.Name + "-2", Scope: "h", InternalAddress: ip1, Healthy: true},
	}
	if len(inst.Members) != 2 || inst.Members[0] != want[0] || inst.Members[1] != want[1] {
		t.Errorf("Members = %+v, want %+v", inst.Members, want)
	}
	if o, _ := inst.Placement.Options.(*Options); o == nil || o.Instances != 2 || o.IP != "" {
		t.Errorf("Placement = %+v, want Instances 2 and no ip", inst.Placement.Options)
	}
	// Each instance's seed: keepalived with its own address as the source, the other as its peer, the
	// virtual address; the VRRP table admitting the peer alone.
	for _, self := range []struct{ name, ip, peer string }{{spec.Name, ip0, ip1}, {spec.Name + "-2", ip1, ip0}} {
		files := x.seedUserData(t, self.name)
		conf := string(files[guest.KeepalivedTemplatePath])
		for _, line := range []string{"unicast_src_ip " + self.ip, "\t\t" + self.peer + "\n", vip + "/24 dev @INTERFACE@", "nopreempt", "track_script"} {
			if !strings.Contains(conf, line) {
				t.Errorf("%s's keepalived.conf lacks %q:\n%s", self.name, line, conf)
			}
		}
		if strings.Contains(conf, "\t\t"+self.ip+"\n") {
			t.Errorf("%s's keepalived.conf names itself as a peer:\n%s", self.name, conf)
		}
		nft := string(files[guest.VRRPNftablesPath])
		if !strings.Contains(nft, "ip protocol 112 ip saddr { "+self.peer+" } accept") || !strings.Contains(nft, "ip protocol 112 counter drop") {
			t.Errorf("%s's VRRP table does not admit %s alone:\n%s", self.name, self.peer, nft)
		}
	}
}

func TestFakeGroupCreateIsIdempotent(t *testing.T) {
	t.Parallel()
	x := newHAFixture(t)
	ctx := context.Background()
	spec := haSpec("uid-ha-2", 2)
	first, err := x.b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	hosts := x.hostsOf()
	// An attempt whose define's answer was lost gave the reservations back though its domain was made: the
	// retry takes them again.
	x.f.mu.Lock()
	kept := x.f.networks["net"].hosts[:0]
	for _, h := range x.f.networks["net"].hosts {
		if h.Name != spec.Name+"-vip" {
			kept = append(kept, h)
		}
	}
	x.f.networks["net"].hosts = kept
	x.f.mu.Unlock()
	x.cnt.take()
	again, err := x.b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	_, per := x.cnt.take()
	if per["DomainDefineXMLFlags"] != 0 || per["StorageVolCreateXML"] != 0 || again.InternalAddress != first.InternalAddress {
		t.Errorf("second Create defined %d domains and made %d volumes, address %s; want none and %s", per["DomainDefineXMLFlags"], per["StorageVolCreateXML"], again.InternalAddress, first.InternalAddress)
	}
	if got := x.hostsOf(); len(got) != len(hosts) || got[spec.Name+"-vip"] != hosts[spec.Name+"-vip"] {
		t.Errorf("reservations after the second Create = %v, want %v", got, hosts)
	}
}

func TestFakeGroupDegradedWhenAnInstanceIsDown(t *testing.T) {
	t.Parallel()
	x := newHAFixture(t)
	ctx := context.Background()
	spec := haSpec("uid-ha-3", 2)
	inst, err := x.b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	// Squid of instance 2 stops answering.
	x.setDown(inst.Members[1].InternalAddress, true)
	got, err := x.b.Get(ctx, idOf(spec))
	if err != nil {
		t.Fatal(err)
	}
	if got.State != backend.StateDegraded || !got.Members[0].Healthy || got.Members[1].Healthy || got.Members[1].Reason == "" {
		t.Errorf("Get with instance 2's Squid down = %s, members %+v; want Degraded, instance 2 unhealthy with a reason", got.State, got.Members)
	}
	// Instance 1's domain is destroyed, instance 2's Squid answers again.
	x.setDown(inst.Members[1].InternalAddress, false)
	x.f.mu.Lock()
	x.f.domains[spec.Name].state = int32(libvirt.DomainShutoff)
	x.f.mu.Unlock()
	got, err = x.b.Get(ctx, idOf(spec))
	if err != nil {
		t.Fatal(err)
	}
	if got.State != backend.StateDegraded || got.Members[0].Healthy || !strings.Contains(got.Members[0].Reason, "Stopped") || !got.Members[1].Healthy {
		t.Errorf("Get with instance 1 destroyed = %s, members %+v; want Degraded, instance 1 unhealthy as Stopped", got.State, got.Members)
	}
	x.setDown(inst.Members[1].InternalAddress, true)
	if got, _ = x.b.Get(ctx, idOf(spec)); got.State != backend.StateFailed {
		t.Errorf("Get with no instance serving = %s, want Failed", got.State)
	}
}

func TestFakeGroupListAndDelete(t *testing.T) {
	t.Parallel()
	x := newHAFixture(t)
	ctx := context.Background()
	spec := haSpec("uid-ha-4", 3)
	if _, err := x.b.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	list, err := x.b.ListByTag(ctx, backend.Selector{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != idOf(spec) || len(list[0].Members) != 3 || list[0].State != backend.StateRunning {
		t.Fatalf("ListByTag = %+v, want the one proxy with its 3 members", list)
	}
	// A Delete of instance 2 alone is refused while instance 1 is there.
	id2 := backend.ProviderID{Backend: Kind, Target: "h", Name: spec.Name + "-2"}
	if err := x.b.Delete(ctx, id2); backend.ClassOf(err) != backend.ClassPermanent {
		t.Errorf("Delete of instance 2 = %v, want Permanent", err)
	}
	if err := x.b.Delete(ctx, idOf(spec)); err != nil {
		t.Fatal(err)
	}
	x.f.mu.Lock()
	domains := len(x.f.domains)
	x.f.mu.Unlock()
	if domains != 0 || len(volNames(x.f)) != 0 {
		t.Errorf("after Delete: %d domains, volumes %v; want none", domains, volNames(x.f))
	}
	if hosts := x.hostsOf(); len(hosts) != 1 || hosts["other"] != haReserved {
		t.Errorf("reservations after Delete = %v, want only the other proxy's", hosts)
	}
}

// Instance 0's domain deleted behind Terraform's back, its volumes with it or left behind, the others there:
// Get reads the proxy from the others, Degraded at its virtual address with instance 0 Gone; ListByTag lists it
// once, under its own id (not its instances as leftovers, which garbage collection would delete under a proxy
// still in use); Update makes instance 0 again at its own reserved address, defining that one domain; or Delete
// removes every instance, volume and reservation.
func TestFakeGroupFirstInstanceGone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		volumesToo, then string
	}{
		{"domain undefined, then update", "", "update"},
		{"domain and volumes removed, then update", "volumes", "update"},
		{"domain undefined, then delete", "", "delete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			x := newHAFixture(t)
			ctx := context.Background()
			spec := haSpec("uid-ha-first-"+tc.volumesToo+tc.then, 3)
			// A clock a minute on at each reading: an instance stamped at its own define would show it.
			var clock sync.Mutex
			at := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
			x.b.now = func() time.Time {
				clock.Lock()
				defer clock.Unlock()
				at = at.Add(time.Minute)
				return at
			}
			inst, err := x.b.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			x.f.mu.Lock()
			delete(x.f.domains, spec.Name)
			if tc.volumesToo != "" {
				delete(x.f.pools["pool"].vols, rootVolumeName(spec.Name))
				delete(x.f.pools["pool"].vols, seedVolumeName(spec.Name))
			}
			x.f.mu.Unlock()
			got, err := x.b.Get(ctx, idOf(spec))
			if err != nil {
				t.Fatalf("Get with instance 0 gone: %v, want the proxy read from the others", err)
			}
			if !got.CreatedAt.Equal(inst.CreatedAt) {
				t.Errorf("Get with instance 0 gone reads the proxy created at %s, want %s", got.CreatedAt, inst.CreatedAt)
			}
			if got.ID != idOf(spec) || got.State != backend.StateDegraded || got.InternalAddress != inst.InternalAddress || len(got.Members) != 3 ||
				!got.Members[0].Gone || got.Members[1].Gone || !got.Members[1].Healthy || !got.Members[2].Healthy {
				t.Fatalf("Get with instance 0 gone = %s %s at %s, members %+v; want %s Degraded at %s, instance 0 alone Gone",
					got.ID, got.State, got.InternalAddress, got.Members, idOf(spec), inst.InternalAddress)
			}
			list, err := x.b.ListByTag(ctx, backend.Selector{Owner: "o"})
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 1 || list[0].ID != idOf(spec) || len(list[0].Members) != 3 || list[0].Members[0].Healthy || !list[0].Members[1].Healthy {
				t.Errorf("ListByTag = %+v, want the proxy once under %s with instance 0 down", list, idOf(spec))
			}
			if tc.then == "delete" {
				if err := x.b.Delete(ctx, idOf(spec)); err != nil {
					t.Fatal(err)
				}
				x.f.mu.Lock()
				domains, vols := len(x.f.domains), volNames(x.f)
				x.f.mu.Unlock()
				if hosts := x.hostsOf(); domains != 0 || len(vols) != 0 || len(hosts) != 1 {
					t.Errorf("after Delete: %d domains, volumes %v, reservations %v; want nothing but the other proxy's reservation", domains, vols, hosts)
				}
				return
			}
			x.cnt.take()
			updated, err := x.b.Update(ctx, idOf(spec), spec)
			if err != nil {
				t.Fatalf("Update: %v", err)
			}
			x.checkMadeAgain(t, updated, inst)
			if !updated.CreatedAt.Equal(inst.CreatedAt) {
				t.Errorf("Update made instance 0 again created at %s, want the proxy's %s", updated.CreatedAt, inst.CreatedAt)
			}
			if hosts := x.hostsOf(); len(hosts) != 5 || hosts[spec.Name] != inst.Members[0].InternalAddress {
				t.Errorf("reservations after Update = %v, want the group's four and the other proxy's, instance 0 at %s", hosts, inst.Members[0].InternalAddress)
			}
		})
	}
}

func TestFakeGroupRefusals(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string]Options{
		"user_net":      {Instances: 2, UserNet: true, ForwardPort: 3128},
		"bridge":        {Instances: 2, Bridge: "br0"},
		"mac":           {Instances: 2, MAC: "52:54:00:12:34:56"},
		"ip":            {Instances: 2, IP: "198.18.0.9"},
		"too many":      {Instances: MaxInstances + 1},
		"name too long": {Instances: 2},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			x := newHAFixture(t)
			spec := fakeSpec("uid-ha-refused", "o")
			if name == "name too long" {
				spec.Name = strings.Repeat("a", 62)
			}
			o := opts
			spec.Placement.Options = &o
			if _, err := x.b.Create(context.Background(), spec); backend.ClassOf(err) != backend.ClassPermanent {
				t.Errorf("Create = %v, want Permanent", err)
			}
			if len(volNames(x.f)) != 0 || len(x.hostsOf()) != 1 {
				t.Errorf("a refused Create left volumes %v, reservations %v", volNames(x.f), x.hostsOf())
			}
		})
	}
}

// A proxy of one is what it was before instances existed: no group in its metadata, no VRRP in its seed.
func TestFakeOneInstanceHasNoVRRP(t *testing.T) {
	t.Parallel()
	x := newHAFixture(t)
	spec := haSpec("uid-ha-6", 1)
	inst, err := x.b.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	x.f.mu.Lock()
	meta := x.f.domains[spec.Name].meta
	x.f.mu.Unlock()
	if strings.Contains(meta, "instances") || len(inst.Members) != 0 || len(x.hostsOf()) != 1 {
		t.Errorf("a proxy of one: metadata %s, members %v, reservations %v; want no group, no members, no reservation", meta, inst.Members, x.hostsOf())
	}
	for path := range x.seedUserData(t, spec.Name) {
		if strings.Contains(path, "keepalived") {
			t.Errorf("a proxy of one's seed writes %s", path)
		}
	}
}

// Reconfigure reaches the instances one at a time: instance 2 is not touched before instance 1's Squid
// answers its health endpoint with the new rules.
func TestFakeGroupReconfigureOneAtATime(t *testing.T) {
	t.Parallel()
	x := newHAFixture(t)
	spec := haSpec("uid-ha-7", 2)
	inst, err := x.b.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	next := spec.Proxy
	next.AllowedDestinations = []string{"other.test"}
	// Instance 1's health endpoint stops answering: its reconfiguration cannot be confirmed, and the
	// rollout must stop there, before instance 2.
	ip0 := inst.Members[0].InternalAddress
	x.setDown(ip0, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dial := x.b.readiness.dial
	var asked int
	x.b.readiness.dial = func(c context.Context, network, addr string) (net.Conn, error) {
		if host, _, _ := net.SplitHostPort(addr); host == ip0 {
			if asked++; asked == 3 {
				cancel() // instance 1 was asked three times and never answered
			}
		}
		return dial(c, network, addr)
	}
	if _, err := x.b.Reconfigure(ctx, idOf(spec), next); err == nil {
		t.Fatal("Reconfigure succeeded although instance 1 never answered its health check")
	}
	x.f.mu.Lock()
	first, second := len(x.f.agent(spec.Name).ran), len(x.f.agent(spec.Name+"-2").ran)
	x.f.mu.Unlock()
	if first == 0 || second != 0 {
		t.Errorf("programs run in instance 1: %d, in instance 2: %d; want instance 1 reconfigured and instance 2 untouched", first, second)
	}
	// Once instance 1 answers, the rollout reaches both.
	x.b.readiness.dial = dial
	x.setDown(ip0, false)
	got, err := x.b.Reconfigure(context.Background(), idOf(spec), next)
	if err != nil {
		t.Fatal(err)
	}
	if got.Proxy == nil || len(got.Proxy.AllowedDestinations) != 1 || got.Proxy.AllowedDestinations[0] != "other.test" {
		t.Errorf("Reconfigure = %+v", got.Proxy)
	}
	x.f.mu.Lock()
	second = len(x.f.agent(spec.Name + "-2").ran)
	x.f.mu.Unlock()
	if second == 0 {
		t.Error("instance 2 was never reconfigured")
	}
}

// A member's domain deleted behind Terraform's back, its volumes with it or left behind: Get reports it Gone
// (and the proxy still Reconfigurable, as Update comes first), and Update makes it again, with the Spec's labels,
// at its own reserved address, defining that one domain and touching no other.
func TestFakeGroupUpdateMakesAGoneMemberAgain(t *testing.T) {
	t.Parallel()
	for name, volumesToo := range map[string]bool{"domain undefined, volumes left": false, "domain and volumes removed": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			x := newHAFixture(t)
			ctx := context.Background()
			spec := haSpec("uid-ha-gone-"+strconv.FormatBool(volumesToo), 3)
			inst, err := x.b.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			lost := inst.Members[1]
			x.f.mu.Lock()
			delete(x.f.domains, lost.Name)
			if volumesToo {
				delete(x.f.pools["pool"].vols, rootVolumeName(lost.Name))
				delete(x.f.pools["pool"].vols, seedVolumeName(lost.Name))
			}
			x.f.mu.Unlock()
			got, err := x.b.Get(ctx, idOf(spec))
			if err != nil {
				t.Fatal(err)
			}
			if got.State != backend.StateDegraded || !got.Members[1].Gone || got.Members[0].Gone || got.Members[2].Gone || !got.Reconfigurable {
				t.Fatalf("Get with %s's domain gone = %s, reconfigurable %v, members %+v; want Degraded, it alone Gone, reconfigurable", lost.Name, got.State, got.Reconfigurable, got.Members)
			}

			next := spec
			next.Labels = map[string]string{"team": "b"}
			x.cnt.take()
			updated, err := x.b.Update(ctx, idOf(spec), next)
			if err != nil {
				t.Fatalf("Update: %v", err)
			}
			x.checkMadeAgain(t, updated, inst)
			x.f.mu.Lock()
			defer x.f.mu.Unlock()
			for _, m := range inst.Members {
				d, ok := x.f.domains[m.Name]
				if !ok {
					t.Errorf("no domain %s after Update", m.Name)
					continue
				}
				meta, err := parseMetadata(d.meta)
				if err != nil {
					t.Errorf("domain %s: %v", m.Name, err)
					continue
				}
				if got := meta.labels(); got["team"] != "b" {
					t.Errorf("domain %s after Update has labels %v, want team=b", m.Name, got)
				}
			}
		})
	}
}

// addBase puts another base volume into the fake pool, as an image the proxy may be rolled onto.
func (x *haFixture) addBase(name string) {
	x.f.mu.Lock()
	defer x.f.mu.Unlock()
	x.f.pools["pool"].vols[name] = &fakeVol{
		vol: libvirt.StorageVol{Pool: "pool", Name: name, Key: "/pool/" + name},
		xml: `<volume><name>` + name + `</name><capacity unit="bytes">1073741824</capacity><target><path>/pool/` + name + `</path><format type="qcow2"/></target></volume>`,
	}
}

// rootBacking is the path the member's root volume overlays, and the base volume its metadata records.
func (x *haFixture) rootBacking(t *testing.T, name string) (backing, recorded string) {
	t.Helper()
	x.f.mu.Lock()
	defer x.f.mu.Unlock()
	if v, ok := x.f.pools["pool"].vols[rootVolumeName(name)]; ok {
		var vx libvirtxml.StorageVolume
		if err := vx.Unmarshal(v.xml); err != nil {
			t.Fatal(err)
		}
		if vx.BackingStore != nil {
			backing = vx.BackingStore.Path
		}
	}
	if d, ok := x.f.domains[name]; ok {
		m, err := parseMetadata(d.meta)
		if err != nil {
			t.Fatal(err)
		}
		recorded = m.Placement.BaseVolume
	}
	return backing, recorded
}

// rolledSpec is spec on the base volume next.qcow2 (addBase).
func rolledSpec(spec backend.Spec) backend.Spec {
	o := *optionsOf(spec.Placement)
	o.BaseVolume = "next.qcow2"
	spec.Placement.Options = &o
	return spec
}

// An Update naming another base volume rolls it over a proxy of three, one member at a time, the last first
// and instance 0 last: each member serving is retired first (its new connections held, drained, keepalived
// stopped, in that order), then gets a new root disk over the new volume, boots afresh from its seed (its
// guest's files again) and is waited for until its keepalived runs, before the next is touched. The members
// keep their domains and addresses. An Update run again changes nothing.
func TestFakeGroupImageRolledOneAtATime(t *testing.T) {
	t.Parallel()
	x := newHAFixture(t)
	ctx := context.Background()
	spec := haSpec("uid-ha-roll", 3)
	optionsOf(spec.Placement).WaitForAddress, optionsOf(spec.Placement).WaitForProxy = true, true
	inst, err := x.b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	x.addBase("next.qcow2")
	x.f.mu.Lock()
	x.f.keepalivedStartsLate = 2
	before := map[string]*fakeAgent{}
	for _, m := range inst.Members {
		before[m.Name] = x.f.agent(m.Name)
	}
	x.f.mu.Unlock()

	updated, err := x.b.Update(ctx, idOf(spec), rolledSpec(spec))
	if err != nil {
		t.Fatalf("Update onto next.qcow2: %v", err)
	}
	want := []string{inst.Members[2].Name, inst.Members[1].Name, inst.Members[0].Name}
	x.f.mu.Lock()
	order, orphaned := slices.Clone(x.f.rootsDeleted), slices.Clone(x.f.addressOrphaned)
	x.f.mu.Unlock()
	if !slices.Equal(order, want) {
		t.Errorf("root disks made again in the order %v, want %v", order, want)
	}
	if len(orphaned) != 0 {
		t.Errorf("keepalived was stopped in %v while no other member's ran: the virtual address had nowhere to go", orphaned)
	}
	retire := guest.Retire(3128)
	for i, m := range inst.Members {
		if backing, recorded := x.rootBacking(t, m.Name); backing != "/pool/next.qcow2" || recorded != "next.qcow2" {
			t.Errorf("member %s: root disk over %q, metadata records %q; want both next.qcow2", m.Name, backing, recorded)
		}
		x.f.mu.Lock()
		ran := before[m.Name].ran
		fresh := x.f.agents[m.Name]
		x.f.mu.Unlock()
		var last []string
		for _, argv := range ran {
			line := strings.Join(argv, " ")
			for _, r := range retire {
				if line == strings.Join(r, " ") {
					last = append(last, line)
				}
			}
		}
		if len(last) != len(retire) || last[0] != strings.Join(retire[0], " ") || last[2] != strings.Join(retire[2], " ") {
			t.Errorf("member %s ran the retirement %q, want %q in order", m.Name, last, retire)
		}
		if fresh == nil || fresh == before[m.Name] || !fresh.booted || fresh.keepalivedStopped {
			t.Errorf("member %s: its guest did not boot afresh with keepalived running", m.Name)
		}
		if updated.Members[i].Name != m.Name || updated.Members[i].InternalAddress != m.InternalAddress || !updated.Members[i].Healthy {
			t.Errorf("member %d after the roll = %+v, want %s at %s, healthy", i, updated.Members[i], m.Name, m.InternalAddress)
		}
	}
	if updated.State != backend.StateRunning || updated.InternalAddress != inst.InternalAddress || optionsOf(updated.Placement).BaseVolume != "next.qcow2" {
		t.Errorf("Update = %s at %s on %q, want Running at %s on next.qcow2", updated.State, updated.InternalAddress, optionsOf(updated.Placement).BaseVolume, inst.InternalAddress)
	}

	x.cnt.take()
	if _, err := x.b.Update(ctx, idOf(spec), rolledSpec(spec)); err != nil {
		t.Fatal(err)
	}
	_, per := x.cnt.take()
	for _, changing := range []string{"DomainDestroyFlags", "StorageVolDelete", "StorageVolCreateXML", "DomainCreate"} {
		if per[changing] != 0 {
			t.Errorf("an Update asking for the image the proxy runs called %s %d times", changing, per[changing])
		}
	}
}

// A roll cut at the second member's new disk leaves the last member rolled, the second stopped without a
// disk and instance 0 untouched: Get reads the proxy Degraded on a base volume no configuration names (both
// volumes), and the next Update finishes the roll without touching the member already rolled. A Delete after
// the cut leaves nothing of the proxy.
func TestFakeGroupImageRollCut(t *testing.T) {
	t.Parallel()
	for _, then := range []string{"update", "delete"} {
		t.Run(then, func(t *testing.T) {
			t.Parallel()
			x := newHAFixture(t)
			ctx := context.Background()
			spec := haSpec("uid-ha-roll-cut-"+then, 3)
			inst, err := x.b.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			x.addBase("next.qcow2")
			x.f.mu.Lock()
			x.f.rootCreatesUntilCut = 2
			x.f.mu.Unlock()
			if _, err := x.b.Update(ctx, idOf(spec), rolledSpec(spec)); err == nil {
				t.Fatal("Update succeeded through a cut connection")
			}
			got, err := x.b.Get(ctx, idOf(spec))
			if err != nil {
				t.Fatal(err)
			}
			if base := optionsOf(got.Placement).BaseVolume; base != "base.qcow2 (and next.qcow2 on some of its instances)" || !IsMixedBaseVolume(base) {
				t.Errorf("Get after the cut reads base volume %q, want both named", base)
			}
			if got.State != backend.StateDegraded || got.Members[1].Healthy || !got.Members[0].Healthy || !got.Members[2].Healthy {
				t.Errorf("Get after the cut = %s, members %+v; want Degraded, the second alone down", got.State, got.Members)
			}
			if then == "delete" {
				if err := x.b.Delete(ctx, idOf(spec)); err != nil {
					t.Fatal(err)
				}
				x.f.mu.Lock()
				left := volNames(x.f)
				x.f.mu.Unlock()
				if !slices.Equal(left, []string{"next.qcow2"}) || len(x.hostsOf()) != 1 {
					t.Errorf("after Delete: volumes %v (want next.qcow2 alone, an image), reservations %v (want the fixture's other proxy's alone)", left, x.hostsOf())
				}
				return
			}
			x.f.mu.Lock()
			x.f.rootsDeleted = nil
			x.f.mu.Unlock()
			updated, err := x.b.Update(ctx, idOf(spec), rolledSpec(spec))
			if err != nil {
				t.Fatalf("Update after the cut: %v", err)
			}
			x.f.mu.Lock()
			order := slices.Clone(x.f.rootsDeleted)
			x.f.mu.Unlock()
			if want := []string{inst.Members[0].Name}; !slices.Equal(order, want) {
				// The second member's disk was deleted before the cut: made again, not deleted again.
				t.Errorf("root disks deleted by the Update after the cut: %v, want %v", order, want)
			}
			if updated.State != backend.StateRunning || optionsOf(updated.Placement).BaseVolume != "next.qcow2" {
				t.Errorf("Update after the cut = %s on %q, want Running on next.qcow2", updated.State, optionsOf(updated.Placement).BaseVolume)
			}
			for _, m := range inst.Members {
				if backing, recorded := x.rootBacking(t, m.Name); backing != "/pool/next.qcow2" || recorded != "next.qcow2" {
					t.Errorf("member %s: root disk over %q, metadata records %q; want both next.qcow2", m.Name, backing, recorded)
				}
			}
		})
	}
}
