package kvm

import (
	"bytes"
	"context"
	"errors"
	"github.com/google/uuid"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/iso9660"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm/libvirtconn"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf/vmguest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// reconfFixture is a running proxy on the fake host, made by Create, whose health endpoint answers 200 and
// counts the requests.
type reconfFixture struct {
	f      *fakeHost
	b      *Backend
	cnt    *counter
	spec   backend.Spec
	id     backend.ProviderID
	health *atomic.Int32
}

func newReconfFixture(t *testing.T, uid string) *reconfFixture {
	t.Helper()
	f := newFakeHost()
	b, cnt := fakeBackend(f)
	var asked atomic.Int32
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		if r.URL.Path != proxyconf.HealthPath {
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(health.Close)
	proxy := listen(t)
	b.readiness.dial = routeTo(map[int]string{3128: proxy.Addr().String(), proxyconf.DefaultHealthPort: health.Listener.Addr().String()}, nil)
	b.readiness.attached = nil // the test dial decides what is reachable
	spec := readySpec(f, uid, "198.18.0.60")
	spec.Proxy.AllowedDestinations = []string{"allowed.test"}
	if _, err := b.Create(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	cnt.take()
	return &reconfFixture{f: f, b: b, cnt: cnt, spec: spec, id: idOf(spec), health: &asked}
}

// agent is the proxy's guest agent, booted (its files read from the seed) if it was not yet.
func (x *reconfFixture) agent() *fakeAgent {
	x.f.mu.Lock()
	defer x.f.mu.Unlock()
	a := x.f.agent(x.spec.Name)
	if !a.booted {
		x.f.bootFromSeed(x.f.domains[x.spec.Name], a)
	}
	return a
}

// booted is the agent for setups that run with f.mu held (x.agent must have run before).
func (x *reconfFixture) booted() *fakeAgent { return x.f.agents[x.spec.Name] }

// guest returns a copy of a file in the guest and of what Squid enforces (the config it last loaded).
func (x *reconfFixture) guest(path string) (onDisk, enforced []byte, exists bool) {
	a := x.agent()
	x.f.mu.Lock()
	defer x.f.mu.Unlock()
	d, ok := a.files[path]
	return bytes.Clone(d), bytes.Clone(a.enforced[path]), ok
}

// seedFiles reads the write_files of the seed volume's user-data.
func (x *reconfFixture) seedFiles(t *testing.T) (map[string][]byte, metadata) {
	t.Helper()
	x.f.mu.Lock()
	img := bytes.Clone(x.f.pools["pool"].vols[seedVolumeName(x.spec.Name)].data)
	x.f.mu.Unlock()
	ud, err := iso9660.ReadFile(img, "user-data")
	if err != nil {
		t.Fatal(err)
	}
	m, err := seedIdentity(img)
	if err != nil {
		t.Fatal(err)
	}
	return userDataFiles(ud), m
}

func render(t *testing.T, s proxyconf.Settings) []byte {
	t.Helper()
	conf, err := proxyconf.RenderSquidConf(s, vmguest.RenderOptions())
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

func TestFakeReconfigureSwapsRulesInPlace(t *testing.T) {
	t.Parallel()
	x := newReconfFixture(t, "reconf-1")
	x.agent().slowExec = true // every program reports "running" once: Reconfigure must poll for its end
	before, err := x.b.Get(context.Background(), x.id)
	if err != nil || !before.Reconfigurable {
		t.Fatalf("Get before = %+v, %v: want a reconfigurable proxy", before, err)
	}
	healthBefore := x.health.Load()

	auth := []proxyconf.BasicAuth{{Username: "alice", Password: "first-password"}}
	next := x.spec.Proxy
	next.AllowedDestinations = []string{"denied.test"}
	next.AllowedPorts = []int{443, 8443}
	next.Users = auth
	inst, err := x.b.Reconfigure(context.Background(), x.id, next)
	if err != nil {
		t.Fatalf("Reconfigure: %v", err)
	}

	// Squid runs the new files, installed where the old were; no temporary file is left.
	conf, enforced, _ := x.guest(proxyconf.ConfPath)
	if want := render(t, next); !bytes.Equal(conf, want) || !bytes.Equal(enforced, want) {
		t.Errorf("guest squid.conf (on disk %d bytes, enforced %d bytes) is not the rendered new config", len(conf), len(enforced))
	}
	_, pw, _ := x.guest(proxyconf.HtpasswdPath)
	if !proxyconf.HtpasswdMatches(pw, auth) {
		t.Errorf("enforced htpasswd %q does not accept the new password", pw)
	}
	for _, p := range []string{confNew, htpasswdNew, confOld, htpasswdOld} {
		if _, _, ok := x.guest(p); ok {
			t.Errorf("%s left in the guest", p)
		}
	}
	// The programs ran in the order that keeps the old config in force until the new one passed.
	var ran []string
	for _, argv := range x.agent().ran {
		ran = append(ran, strings.Join(argv, " "))
	}
	want := []string{
		"/bin/chown root:proxy " + confNew + " " + htpasswdNew,
		"/bin/chmod 0640 " + confNew + " " + htpasswdNew,
		squidBin + " -k parse -f " + confNew,
		squidBin + " -k check",
		"/bin/cp -p " + proxyconf.ConfPath + " " + confOld,
		"/bin/mv -f " + htpasswdNew + " " + proxyconf.HtpasswdPath,
		"/bin/mv -f " + confNew + " " + proxyconf.ConfPath,
	}
	for _, argv := range append(guest.ReloadHold(proxyconf.DefaultPort), guest.ReloadDrain(proxyconf.DefaultPort)) {
		want = append(want, strings.Join(argv, " "))
	}
	want = append(want, squidBin+" -k reconfigure", "/bin/rm -f "+confOld)
	for _, argv := range guest.ReloadRelease() {
		want = append(want, strings.Join(argv, " "))
	}
	if !slices.Equal(ran, want) {
		t.Errorf("programs run:\n%s\nwant:\n%s", strings.Join(ran, "\n"), strings.Join(want, "\n"))
	}
	if x.health.Load() == healthBefore {
		t.Errorf("the health endpoint was not asked after the reconfiguration")
	}

	// Same instance, same address; Get reports the new settings, without the password.
	if inst.ID != x.id || inst.UID != x.spec.UID || inst.InternalAddress != "198.18.0.60" || !inst.Reconfigurable {
		t.Errorf("instance after Reconfigure = %+v", inst)
	}
	if p := inst.Proxy; p == nil || !slices.Equal(p.AllowedDestinations, next.AllowedDestinations) ||
		!slices.Equal(p.AllowedPorts, next.AllowedPorts) || len(p.Users) != 1 || p.Users[0].Username != "alice" || p.Users[0].Password != "" {
		t.Errorf("Proxy after Reconfigure = %+v", inst.Proxy)
	}
	// The seed holds the same: its user-data for a rebuild, its identity for ListByTag.
	files, m := x.seedFiles(t)
	if !bytes.Equal(files[proxyconf.ConfPath], render(t, next)) || !proxyconf.HtpasswdMatches(files[proxyconf.HtpasswdPath], auth) {
		t.Errorf("seed user-data does not carry the new config and password")
	}
	if !slices.Equal(m.Proxy.Destinations, next.AllowedDestinations) || m.UID != x.spec.UID {
		t.Errorf("seed identity = %+v", m.Proxy)
	}
}

func TestFakeReconfigureIsIdempotent(t *testing.T) {
	t.Parallel()
	x := newReconfFixture(t, "reconf-idem")
	next := x.spec.Proxy
	next.AllowedDestinations = []string{"denied.test"}
	next.Users = []proxyconf.BasicAuth{{Username: "alice", Password: "first-password"}}
	if _, err := x.b.Reconfigure(context.Background(), x.id, next); err != nil {
		t.Fatal(err)
	}
	x.cnt.take()
	ranBefore := len(x.agent().ran)

	// The same settings again: the guest, the seed and the metadata are read, never written.
	if _, err := x.b.Reconfigure(context.Background(), x.id, next); err != nil {
		t.Fatal(err)
	}
	_, per := x.cnt.take()
	if n := len(x.agent().ran) - ranBefore; n != 0 || per["StorageVolUpload"] != 0 || per["DomainSetMetadata"] != 0 {
		t.Errorf("repeated Reconfigure ran %d programs, %d uploads, %d metadata writes; want none", n, per["StorageVolUpload"], per["DomainSetMetadata"])
	}

	// A new password alone is a change: the guest and the seed take it, the old one stops working.
	newer := next
	newer.Users = []proxyconf.BasicAuth{{Username: "alice", Password: "second-password"}}
	if _, err := x.b.Reconfigure(context.Background(), x.id, newer); err != nil {
		t.Fatal(err)
	}
	if x.agent().restarts != 1 {
		t.Errorf("Squid restarted %d times for a new password, want once: a reload keeps cached logins", x.agent().restarts)
	}
	_, pw, _ := x.guest(proxyconf.HtpasswdPath)
	files, _ := x.seedFiles(t)
	if !proxyconf.HtpasswdMatches(pw, newer.Users) || proxyconf.HtpasswdMatches(pw, next.Users) || !proxyconf.HtpasswdMatches(files[proxyconf.HtpasswdPath], newer.Users) {
		t.Errorf("after a password change the guest and seed must accept only the new password")
	}

	// A second user, then the first one gone: each a change the guest and the seed take, with a restart,
	// since Squid would otherwise keep a removed user's checked login.
	for i, users := range [][]proxyconf.BasicAuth{
		{newer.Users[0], {Username: "bob", Password: "bob's password"}},
		{{Username: "bob", Password: "bob's password"}},
	} {
		step := newer
		step.Users = users
		if _, err := x.b.Reconfigure(context.Background(), x.id, step); err != nil {
			t.Fatal(err)
		}
		if x.agent().restarts != 2+i {
			t.Errorf("users %q: Squid restarted %d times in all, want %d", proxyconf.Usernames(users), x.agent().restarts, 2+i)
		}
		_, pw, _ := x.guest(proxyconf.HtpasswdPath)
		files, m := x.seedFiles(t)
		if !proxyconf.HtpasswdMatches(pw, users) || !proxyconf.HtpasswdMatches(files[proxyconf.HtpasswdPath], users) {
			t.Errorf("users %q: the guest's and the seed's htpasswd do not admit exactly them", proxyconf.Usernames(users))
		}
		if !slices.Equal(m.Proxy.Users, proxyconf.Usernames(users)) {
			t.Errorf("users %q: the seed's identity records %q", proxyconf.Usernames(users), m.Proxy.Users)
		}
	}

	// Dropping authentication: the config says so; no new password file is sent.
	open := newer
	open.Users = nil
	if _, err := x.b.Reconfigure(context.Background(), x.id, open); err != nil {
		t.Fatal(err)
	}
	_, enforced, _ := x.guest(proxyconf.ConfPath)
	files, _ = x.seedFiles(t)
	if bytes.Contains(enforced, []byte("auth_param")) || files[proxyconf.HtpasswdPath] != nil {
		t.Errorf("authentication still configured after it was removed")
	}
}

func TestFakeReconfigureFailureKeepsOldConfig(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		setup func(x *reconfFixture)
		edit  func(s *proxyconf.Settings)
		ctx   time.Duration
		class backend.Class
		says  string
		// noAgent: the agent is never asked (the settings are refused first).
		noAgent bool
	}{
		"domain without agent channel": {
			setup: func(x *reconfFixture) {
				d := x.f.domains[x.spec.Name]
				d.xml = strings.ReplaceAll(d.xml, guestAgentChannel, "org.example.other.0")
			},
			class: backend.ClassPermanent, says: "cannot be reconfigured in place",
		},
		"domain shut off": {
			setup: func(x *reconfFixture) { x.f.domains[x.spec.Name].state = int32(libvirt.DomainShutoff) },
			class: backend.ClassPermanent, says: "not running",
		},
		"squid refuses the config": {
			setup: func(x *reconfFixture) { x.booted().parseFails = true },
			class: backend.ClassPermanent, says: "refused the new config",
		},
		"squid not running": {
			setup: func(x *reconfFixture) { x.booted().squidStopped = true },
			class: backend.ClassPermanent, says: "squid is not running",
		},
		"agent never answers": {
			setup: func(x *reconfFixture) { x.booted().hung = true },
			ctx:   3 * time.Second, class: backend.ClassTransient, says: "not answering",
		},
		"a new listening port": {
			edit:  func(s *proxyconf.Settings) { s.Port = 3130 },
			class: backend.ClassPermanent, says: "replaces the proxy", noAgent: true,
		},
		"invalid settings": {
			edit:  func(s *proxyconf.Settings) { s.AllowedDestinations = []string{"Not A Host"} },
			class: backend.ClassPermanent, says: "must be lowercase", noAgent: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			x := newReconfFixture(t, "reconf-fail")
			oldConf := render(t, x.spec.Proxy)
			if tc.setup != nil {
				x.agent()
				x.f.mu.Lock()
				tc.setup(x)
				x.f.mu.Unlock()
			}
			next := x.spec.Proxy
			next.AllowedDestinations = []string{"denied.test"}
			if tc.edit != nil {
				tc.edit(&next)
			}
			ctx := context.Background()
			if tc.ctx > 0 {
				ctx = ctxFor(t, tc.ctx)
			}
			x.cnt.take()
			_, err := x.b.Reconfigure(ctx, x.id, next)
			if err == nil || backend.ClassOf(err) != tc.class || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), x.spec.Name) {
				t.Fatalf("Reconfigure = %v (class %v); want %v saying %q and naming the domain", err, backend.ClassOf(err), tc.class, tc.says)
			}
			_, per := x.cnt.take()
			if tc.noAgent && per["QEMUDomainAgentCommand"] != 0 {
				t.Errorf("%d agent commands for settings refused up front", per["QEMUDomainAgentCommand"])
			}
			// Nothing changed: Squid's files and what it enforces, no temporary file, the seed, the metadata.
			x.f.mu.Lock()
			x.f.domains[x.spec.Name].state = int32(libvirt.DomainRunning)
			x.f.mu.Unlock()
			conf, enforced, _ := x.guest(proxyconf.ConfPath)
			if !bytes.Equal(conf, oldConf) || !bytes.Equal(enforced, oldConf) {
				t.Errorf("the guest's squid.conf changed although Reconfigure failed")
			}
			if _, _, ok := x.guest(confNew); ok {
				t.Errorf("%s left in the guest", confNew)
			}
			files, m := x.seedFiles(t)
			if !bytes.Equal(files[proxyconf.ConfPath], oldConf) || !slices.Equal(m.Proxy.Destinations, x.spec.Proxy.AllowedDestinations) {
				t.Errorf("the seed changed although Reconfigure failed")
			}
			if per["DomainSetMetadata"] != 0 {
				t.Errorf("the metadata was written although Reconfigure failed")
			}
		})
	}
}

// Squid reloads (or restarts) with new connections held and the reload marked (guest.ReloadHold), and the
// hold ends whatever the reload did; a hold the guest refuses is a note, and the reload goes on.
func TestFakeReconfigureHoldsConnectionsWhileSquidReloads(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		proxy                              string
		password, reloadFails, holdRefused bool
		wantHeld, wantUnheld               int
	}{
		"a reload":                  {proxy: "reconf-hold-1", wantHeld: 1},
		"a restart, for a password": {proxy: "reconf-hold-2", password: true, wantHeld: 1},
		"a reload that fails":       {proxy: "reconf-hold-3", reloadFails: true, wantHeld: 1},
		"a hold the guest refuses":  {proxy: "reconf-hold-4", holdRefused: true, wantUnheld: 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			x := newReconfFixture(t, tc.proxy)
			a := x.agent()
			a.reconfigureFails, a.holdRefused = tc.reloadFails, tc.holdRefused
			next := x.spec.Proxy
			next.AllowedDestinations = []string{"denied.test"}
			if tc.password {
				next.Users = []proxyconf.BasicAuth{{Username: "alice", Password: "first-password"}}
			}
			inst, err := x.b.Reconfigure(context.Background(), x.id, next)
			if tc.reloadFails != (err != nil) {
				t.Fatalf("Reconfigure = %v", err)
			}
			if a.heldReloads != tc.wantHeld || a.unheldReloads != tc.wantUnheld {
				t.Errorf("reloads held %d, not held %d; want %d and %d", a.heldReloads, a.unheldReloads, tc.wantHeld, tc.wantUnheld)
			}
			if _, marked := a.files[guest.ReloadMarkerPath]; marked || a.holding {
				t.Errorf("after the Reconfigure: marked %v, holding %v; want the hold ended", marked, a.holding)
			}
			if tc.holdRefused && !slices.ContainsFunc(inst.Notes, func(n string) bool { return strings.Contains(n, "not held") }) {
				t.Errorf("notes %q: want the hold's refusal noted", inst.Notes)
			}
		})
	}
}

func TestFakeReconfigureFailedReloadKeepsRunningConfig(t *testing.T) {
	t.Parallel()
	x := newReconfFixture(t, "reconf-reload")
	oldConf := render(t, x.spec.Proxy)
	x.agent().reconfigureFails = true
	next := x.spec.Proxy
	next.AllowedDestinations = []string{"denied.test"}
	_, err := x.b.Reconfigure(context.Background(), x.id, next)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "squid -k reconfigure exited with status 1") {
		t.Fatalf("Reconfigure = %v, want the failed reload reported", err)
	}
	if conf, enforced, _ := x.guest(proxyconf.ConfPath); !bytes.Equal(enforced, oldConf) || !bytes.Equal(conf, oldConf) {
		t.Errorf("Squid enforces, or its disk holds, another config than the old one")
	}
	if inst, err := x.b.Get(context.Background(), x.id); err != nil || !slices.Equal(inst.Proxy.AllowedDestinations, x.spec.Proxy.AllowedDestinations) {
		t.Errorf("Get after a failed reload = %+v, %v: want the old settings reported", inst.Proxy, err)
	}
	// Once Squid reloads again, a retry completes the change.
	x.agent().reconfigureFails = false
	if _, err := x.b.Reconfigure(context.Background(), x.id, next); err != nil {
		t.Fatal(err)
	}
	if _, enforced, _ := x.guest(proxyconf.ConfPath); !bytes.Equal(enforced, render(t, next)) {
		t.Errorf("the retry did not reload the new config")
	}
}

// A Reconfigure that failed after its rename, and whose restore was lost too, leaves the new files on the
// guest's disk while Squid runs the old ones. The next Reconfigure to the same settings finds the files
// current, and still makes Squid take them: the seed, written only once Squid did, says it never did.
func TestFakeReconfigureAfterAnInterruptedOneReloads(t *testing.T) {
	t.Parallel()
	x := newReconfFixture(t, "reconf-interrupted")
	oldConf := render(t, x.spec.Proxy)
	next := x.spec.Proxy
	next.AllowedDestinations = []string{"denied.test"}
	a := x.agent()
	x.f.mu.Lock()
	a.reconfigureFails, a.dropBefore = true, "/bin/mv -f "+confOld
	x.f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := x.b.Reconfigure(ctx, x.id, next); err == nil {
		t.Fatal("Reconfigure with a reload that fails and a restore that is lost succeeded")
	}
	conf, enforced, _ := x.guest(proxyconf.ConfPath)
	if !bytes.Equal(conf, render(t, next)) || !bytes.Equal(enforced, oldConf) {
		t.Fatalf("setup: the guest's disk should hold the new config and Squid enforce the old one")
	}
	x.f.mu.Lock()
	a.reconfigureFails = false
	x.f.mu.Unlock()
	if _, err := x.b.Reconfigure(context.Background(), x.id, next); err != nil {
		t.Fatal(err)
	}
	if _, enforced, _ := x.guest(proxyconf.ConfPath); !bytes.Equal(enforced, render(t, next)) {
		t.Errorf("Squid still enforces the old config after a Reconfigure that found the new files in place")
	}
	if files, _ := x.seedFiles(t); !bytes.Equal(files[proxyconf.ConfPath], render(t, next)) {
		t.Errorf("the seed does not hold the new config")
	}
}

func TestFakeReconfigureWaitsForTheAgent(t *testing.T) {
	t.Parallel()
	x := newReconfFixture(t, "reconf-wait")
	x.agent().notConnected = 2 // the agent connects on the third attempt, as while the guest boots
	next := x.spec.Proxy
	next.AllowedDestinations = []string{"denied.test"}
	if _, err := x.b.Reconfigure(ctxFor(t, time.Minute), x.id, next); err != nil {
		t.Fatalf("Reconfigure = %v, want it to retry until the agent answers", err)
	}
	if _, enforced, _ := x.guest(proxyconf.ConfPath); !bytes.Equal(enforced, render(t, next)) {
		t.Errorf("the new config is not in force")
	}
}

func TestFakeReconfigureGoneAndCancelled(t *testing.T) {
	t.Parallel()
	x := newReconfFixture(t, "reconf-gone")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := x.b.Reconfigure(ctx, x.id, x.spec.Proxy); !errors.Is(err, context.Canceled) {
		t.Errorf("Reconfigure with a cancelled ctx = %v, want context.Canceled", err)
	}
	if err := x.b.Delete(context.Background(), x.id); err != nil {
		t.Fatal(err)
	}
	if _, err := x.b.Reconfigure(context.Background(), x.id, x.spec.Proxy); !backend.IsNotFound(err) {
		t.Errorf("Reconfigure of a deleted proxy = %v, want NotFound", err)
	}
}

// Get asks the agent once per read of a running domain, and never for a stopped one: it runs on every
// refresh, so its cost is counted.
func TestFakeGetReportsReconfigurable(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		setup      func(x *reconfFixture)
		want       bool
		agentCalls int
	}{
		"agent answers": {want: true, agentCalls: 1},
		"agent channel removed": {
			setup: func(x *reconfFixture) {
				d := x.f.domains[x.spec.Name]
				d.xml = strings.ReplaceAll(d.xml, guestAgentChannel, "org.example.other.0")
			},
			want: false, agentCalls: 1,
		},
		"agent not connected": {setup: func(x *reconfFixture) { x.booted().notConnected = 1 }, want: false, agentCalls: 1},
		"agent hung":          {setup: func(x *reconfFixture) { x.booted().hung = true }, want: false, agentCalls: 1},
		"domain shut off": {
			setup: func(x *reconfFixture) { x.f.domains[x.spec.Name].state = int32(libvirt.DomainShutoff) },
			want:  false, agentCalls: 0,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			x := newReconfFixture(t, "reconf-get")
			if tc.setup != nil {
				x.agent()
				x.f.mu.Lock()
				tc.setup(x)
				x.f.mu.Unlock()
			}
			x.cnt.take()
			inst, err := x.b.Get(context.Background(), x.id)
			if err != nil {
				t.Fatal(err)
			}
			_, per := x.cnt.take()
			if inst.Reconfigurable != tc.want || per["QEMUDomainAgentCommand"] != tc.agentCalls {
				t.Errorf("Reconfigurable = %v after %d agent commands, want %v after %d", inst.Reconfigurable, per["QEMUDomainAgentCommand"], tc.want, tc.agentCalls)
			}
		})
	}
}

// A program in the guest whose answer was lost ran, or not: the retried attempt finds the files where the
// lost answer left them and still gets Squid to enforce the new config, whichever step it was.
func TestFakeReconfigureSurvivesALostAnswer(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		lost        string
		lostStatus  bool   // the answer lost is the one reporting the program's end, not its start
		dropped     string // a later program the connection drops before it runs
		newPassword bool
	}{
		// The agent forgets a program once it reported its end: asking again is refused.
		"the report of the parse's end":       {lost: squidBin + " -k parse", lostStatus: true},
		"the report of the rename's end":      {lost: "/bin/mv -f " + confNew, lostStatus: true},
		"the report of the reload's end":      {lost: squidBin + " -k reconfigure", lostStatus: true},
		"the report of the password's move":   {lost: "/bin/mv -f " + htpasswdNew, lostStatus: true, newPassword: true},
		"the report of the restart's end":     {lost: "/bin/systemctl restart", lostStatus: true, newPassword: true},
		"the report of the copy aside's end":  {lost: "/bin/cp -p", lostStatus: true},
		"the report of the temp files' chown": {lost: "/bin/chown", lostStatus: true},
		"the config's rename":                 {lost: "/bin/mv -f " + confNew},
		"the reload":                          {lost: squidBin + " -k reconfigure"},
		"the parse":                           {lost: squidBin + " -k parse"},
		// The lost answer makes Reconfigure put the old files back; when that fails too, the guest holds the
		// new files and Squid runs the old ones: the retry must reload, not find nothing to do.
		"the rename, and the restore dropped":  {lost: "/bin/mv -f " + confNew, dropped: "/bin/mv -f " + confOld},
		"the reload, and the restore dropped":  {lost: squidBin + " -k reconfigure", dropped: "/bin/mv -f " + confOld},
		"the password's move":                  {lost: "/bin/mv -f " + htpasswdNew, newPassword: true},
		"the restart for a password":           {lost: "/bin/systemctl restart", newPassword: true},
		"the restart, and the restore dropped": {lost: "/bin/systemctl restart", dropped: "/bin/mv -f " + htpasswdOld, newPassword: true},
		// The hold's release cut after a good reload: the Reconfigure must not end with new connections still
		// dropped for the hold's 90 s; its retry holds, reloads and releases again.
		"the hold's release dropped": {dropped: "/bin/rm -f " + guest.ReloadMarkerPath},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			x := newReconfFixture(t, uuid.NewString())
			next := x.spec.Proxy
			next.AllowedDestinations = []string{"denied.test"}
			if tc.newPassword {
				// A password in force first: only replacing one restarts Squid.
				old := x.spec.Proxy
				old.Users = []proxyconf.BasicAuth{{Username: "u", Password: "the old password"}}
				if _, err := x.b.Reconfigure(context.Background(), x.id, old); err != nil {
					t.Fatal(err)
				}
				next.Users = []proxyconf.BasicAuth{{Username: "u", Password: "a new password"}}
			}
			a := x.agent()
			x.f.mu.Lock()
			if tc.lostStatus {
				a.loseStatusOf, a.dropBefore = tc.lost, tc.dropped
			} else {
				a.loseAnswerOf, a.dropBefore = tc.lost, tc.dropped
			}
			restarts := a.restarts
			x.f.mu.Unlock()
			if _, err := x.b.Reconfigure(context.Background(), x.id, next); err != nil {
				t.Fatalf("Reconfigure after a lost answer to %s: %v", tc.lost, err)
			}
			x.f.mu.Lock()
			notLost, notDropped, restarted := a.loseAnswerOf+a.loseStatusOf, a.dropBefore, a.restarts > restarts
			x.f.mu.Unlock()
			if notLost != "" || notDropped != "" {
				t.Fatalf("no answer to %q was lost, or %q never dropped: the test proves nothing", notLost, notDropped)
			}
			if _, enforced, _ := x.guest(proxyconf.ConfPath); !bytes.Equal(enforced, render(t, next)) {
				t.Errorf("Squid does not enforce the new config")
			}
			if tc.newPassword && !restarted {
				t.Errorf("a new password did not restart Squid (its cached logins would outlive the change)")
			}
			x.f.mu.Lock()
			_, marked := a.files[guest.ReloadMarkerPath]
			holding := a.holding
			x.f.mu.Unlock()
			if marked || holding {
				t.Errorf("after the Reconfigure: marked %v, holding %v; want the hold ended", marked, holding)
			}
		})
	}
}

// dropOnAgent breaks its session at the first agent command, as a connection that drops during Get's
// best-effort ping: the command fails and the session is lost.
type dropOnAgent struct {
	api
	lost chan struct{}
	once sync.Once
}

func (d *dropOnAgent) QEMUDomainAgentCommand(libvirt.Domain, string, int32, uint32) (libvirt.OptString, error) {
	d.once.Do(func() { close(d.lost) })
	return nil, io.EOF
}

// A ping lost with the connection says nothing about the agent: Get fails as Transient and is retried,
// instead of reporting the proxy not reconfigurable, which would plan its replacement.
func TestFakeGetOnALostConnectionIsNotUnreconfigurable(t *testing.T) {
	t.Parallel()
	x := newReconfFixture(t, uuid.NewString())
	dials := 0
	cfg := Config{Hosts: map[string]HostConfig{"h": {
		URI: "test:///fake", Pool: "pool", Network: "net", BaseVolume: "base.qcow2", DomainType: DomainTypeQEMU,
	}}}
	b, err := newBackend(cfg, func(context.Context, HostConfig, target) (*libvirtconn.Session, error) {
		dials++
		if dials == 1 {
			d := &dropOnAgent{api: x.f, lost: make(chan struct{})}
			return &libvirtconn.Session{API: d, Lost: d.lost, Close: func() {}}, nil
		}
		return &libvirtconn.Session{API: x.f, Lost: make(chan struct{}), Close: func() {}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(context.Background(), x.id); backend.ClassOf(err) != backend.ClassTransient {
		t.Fatalf("Get on a connection lost during the agent's ping = %v, want a Transient error", err)
	}
	inst, err := b.Get(context.Background(), x.id)
	if err != nil || !inst.Reconfigurable || dials != 2 {
		t.Errorf("Get after the redial = Reconfigurable %v, %v after %d dials; want true after 2", inst.Reconfigurable, err, dials)
	}
}

// The client CA and its CRL change in place: the guest and the seed hold the new files at the paths the
// config names, the metadata records them, and the same settings again touch nothing.
func TestFakeReconfigureClientCA(t *testing.T) {
	t.Parallel()
	x := newReconfFixture(t, "reconf-client-ca")
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	caA, caB := testutil.NewClientCA(t, "client CA A"), testutil.NewClientCA(t, "client CA B")
	caOne, caTwo := caA.PEM, caB.PEM
	crlOf := map[string]string{caOne: caA.CRL(t, 1), caTwo: caB.CRL(t, 1)}
	opts := vmguest.RenderOptions().WithDefaults()
	var ranBefore int
	for i, ca := range []string{caOne, caTwo, caTwo} {
		next := x.spec.Proxy
		next.TLS = &proxyconf.TLSSettings{CertificatePEM: cert, PrivateKeyPEM: key, ClientCAPEM: ca, ClientCRLPEM: crlOf[ca]}
		ranBefore = len(x.agent().ran)
		if _, err := x.b.Reconfigure(context.Background(), x.id, next); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		for path, want := range map[string]string{opts.ClientCAPath: ca, opts.ClientCRLPath: crlOf[ca]} {
			onDisk, _, ok := x.guest(path)
			files, m := x.seedFiles(t)
			if !ok || string(onDisk) != want || string(files[path]) != want {
				t.Errorf("step %d: %s in the guest (%v) or the seed does not hold the CA asked for", i, path, ok)
			}
			if m.Proxy.ClientCA != sha256Hex(ca) {
				t.Errorf("step %d: the seed's identity records client CA %q", i, m.Proxy.ClientCA)
			}
			for _, leftover := range []string{path + ".egress-new", path + ".egress-old"} {
				if _, _, ok := x.guest(leftover); ok {
					t.Errorf("step %d: %s left in the guest", i, leftover)
				}
			}
		}
	}
	if n := len(x.agent().ran) - ranBefore; n != 0 {
		t.Errorf("the same client CA again ran %d programs in the guest, want none", n)
	}
}
