package gcp

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
)

// haWorld is a fake whose guests answer each metadata change of their VM, and the events they saw, in order:
// "set NAME" when a setMetadata of NAME completed, "applied NAME" once its guest reported the config.
type haWorld struct {
	fake   *computefake.Server
	b      *Backend
	mu     sync.Mutex
	events []string
}

func newHAWorld(t *testing.T) *haWorld {
	t.Helper()
	w := &haWorld{}
	var guestMu sync.Mutex
	fake, b := newTest(t, computefake.Options{OnOperationDone: func(opType, target string) {
		project, zone, name, ok := instanceOfLink(target)
		if !ok {
			return
		}
		guestMu.Lock() // the metadata server plays one VM at a time
		defer guestMu.Unlock()
		if opType == "setMetadata" {
			w.record("set " + name)
		}
		w.fake.MetadataInstance(project, zone, name)
		guest{url: w.fake.URL}.onDone(opType, target)
		if opType == "setMetadata" {
			w.record("applied " + name)
		}
	}})
	w.fake, w.b = fake, b
	return w
}

func (w *haWorld) record(e string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, e)
}

func haSpec(uid string, instances int) backend.Spec {
	spec := testSpec(uid, "us-central1-b")
	spec.Name = "web"
	opts := optionsOf(spec.Placement)
	opts.Instances, opts.WaitForProxy = instances, true
	return spec
}

// TestHAProxyLifecycle: three VMs spread from the placement's zone over the region's zones, their groups,
// the health check on the health port, the backend service and the forwarding rule whose address is the
// proxy's; one member failing its health check makes the proxy Degraded; the listing shows the proxy once;
// rules change one member at a time, each applied before the next; delete leaves nothing, twice.
func TestHAProxyLifecycle(t *testing.T) {
	t.Parallel()
	w := newHAWorld(t)
	fake, b, ctx := w.fake, w.b, ctxT(t)
	spec := haSpec("uid-ha", 3)
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	id := backend.ProviderID{Backend: Kind, Target: testProject, Scope: "us-central1-b", Name: "web"}
	fr := fake.ForwardingRule(testProject, "us-central1", "web")
	if fr == nil {
		t.Fatal("no forwarding rule")
	}
	if inst.ID != id || inst.State != backend.StateRunning || inst.InternalAddress != fr.GetIPAddress() || inst.EgressAddress != "" {
		t.Fatalf("created %+v, want id %s, Running, internal address %s, no single egress address", inst, id, fr.GetIPAddress())
	}
	// Round-robin from the placement's zone in the order the region lists its zones (a, b, c): b, c, a.
	want := []string{"web-1 us-central1-b", "web-2 us-central1-c", "web-3 us-central1-a"}
	var got []string
	egress := map[string]bool{}
	for _, m := range inst.Members {
		got = append(got, m.Name+" "+m.Scope)
		egress[m.EgressAddress] = true
		vm := fake.Instance(testProject, m.Scope, m.Name)
		if vm == nil || !m.Healthy || m.InternalAddress != vm.GetNetworkInterfaces()[0].GetNetworkIP() || m.EgressAddress != vm.GetNetworkInterfaces()[0].GetAccessConfigs()[0].GetNatIP() {
			t.Errorf("member %+v, VM %v", m, vm)
		}
		if _, members := fake.InstanceGroup(testProject, m.Scope, "web"); len(members) != 1 || !strings.HasSuffix(members[0], "/instances/"+m.Name) {
			t.Errorf("group web in %s holds %v, want %s", m.Scope, members, m.Name)
		}
	}
	if !slices.Equal(got, want) || len(egress) != 3 || egress[""] {
		t.Errorf("members %v with egress addresses %v, want %v, each its own", got, egress, want)
	}
	hc := fake.HealthCheck(testProject, "us-central1", "web")
	if hc.GetType() != "HTTP" || hc.GetHttpHealthCheck().GetPort() != proxyconf.DefaultHealthPort || hc.GetHttpHealthCheck().GetRequestPath() != proxyconf.HealthPath {
		t.Errorf("health check %v, want HTTP on port %d, %s", hc, proxyconf.DefaultHealthPort, proxyconf.HealthPath)
	}
	bs := fake.BackendService(testProject, "us-central1", "web")
	if len(bs.GetBackends()) != 3 || !strings.HasSuffix(bs.GetHealthChecks()[0], "/healthChecks/web") {
		t.Errorf("backend service %v, want three groups and the health check", bs)
	}
	if !slices.Equal(fr.GetPorts(), []string{"3128"}) || fr.GetLabels()[backend.LabelUID] != "uid-ha" || !strings.HasSuffix(fr.GetBackendService(), "/backendServices/web") {
		t.Errorf("forwarding rule %v", fr)
	}
	if g := optionsOf(inst.Placement); g.Instances != 3 || inst.Placement.Scope != "us-central1-b" {
		t.Errorf("placement read back %+v %+v", inst.Placement, g)
	}

	fake.SetHealthy(testProject, "us-central1-c", "web-2", false)
	got2, err := b.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got2.State != backend.StateDegraded || got2.Members[1].Healthy || !strings.Contains(got2.Members[1].Reason, "UNHEALTHY") || !got2.Members[0].Healthy {
		t.Fatalf("with web-2 failing its health check: %s %+v", got2.State, got2.Members)
	}
	fake.SetHealthy(testProject, "us-central1-c", "web-2", true)

	listed, err := b.ListByTag(ctx, backend.Selector{Owner: "owner-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].ID != id || len(listed[0].Members) != 3 || listed[0].InternalAddress != fr.GetIPAddress() {
		t.Fatalf("listed %+v, want the proxy once under %s", listed, id)
	}

	// Labels change in place on every member and on the forwarding rule, the one labelled part.
	relabelled := spec
	relabelled.Labels = map[string]string{"team": "sec"}
	if _, err := b.Update(ctx, id, relabelled); err != nil {
		t.Fatal(err)
	}
	if got := fake.ForwardingRule(testProject, "us-central1", "web").GetLabels()["team"]; got != "sec" {
		t.Errorf("forwarding rule's label team = %q after the update", got)
	}
	for _, m := range inst.Members {
		if got := fake.Instance(testProject, m.Scope, m.Name).GetLabels()["team"]; got != "sec" {
			t.Errorf("%s's label team = %q after the update", m.Name, got)
		}
	}

	settings := spec.Proxy
	settings.AllowedDestinations = []string{".example.org"}
	w.mu.Lock()
	w.events = nil
	w.mu.Unlock()
	fake.ResetLog()
	if _, err := b.Reconfigure(ctx, id, settings); err != nil {
		t.Fatal(err)
	}
	// One at a time, by the requests' arrival: the next member's setMetadata comes after the last query of
	// the previous member's guest attributes (the one that found the new config applied).
	firstSet, lastQuery := map[string]time.Time{}, map[string]time.Time{}
	for _, r := range fake.Requests() {
		_, _, name, ok := instanceOfLink(r.Path)
		switch {
		case !ok:
		case strings.HasSuffix(r.Path, "/setMetadata"):
			if _, seen := firstSet[name]; !seen {
				firstSet[name] = r.Time
			}
		case strings.HasSuffix(r.Path, "/getGuestAttributes"):
			lastQuery[name] = r.Time
		}
	}
	for k := 1; k < 3; k++ {
		prev, next := memberName("web", k), memberName("web", k+1)
		if !lastQuery[prev].Before(firstSet[next]) {
			t.Errorf("%s's setMetadata (%v) came before %s's guest reported (last query %v): not one at a time", next, firstSet[next], prev, lastQuery[prev])
		}
	}
	w.mu.Lock()
	events := slices.Clone(w.events)
	w.mu.Unlock()
	if want := []string{"set web-1", "applied web-1", "set web-2", "applied web-2", "set web-3", "applied web-3"}; !slices.Equal(events, want) {
		t.Errorf("reconfigure: %v, want one member at a time: %v", events, want)
	}
	for _, m := range inst.Members {
		if applied := fake.GuestAttribute(testProject, m.Scope, m.Name, "egress/"+gcpguest.GuestAttributeApplied); applied == "" {
			t.Errorf("%s: no config applied", m.Name)
		}
	}

	for range 2 {
		if err := b.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		if left := fake.LoadBalancerObjects(); len(left) != 0 || len(fake.Instances()) != 0 {
			t.Fatalf("after delete: %v and %d VMs", left, len(fake.Instances()))
		}
	}
	if _, err := b.Get(ctx, id); !backend.IsNotFound(err) {
		t.Fatalf("get after delete: %v, want NotFound", err)
	}
}

// TestHAPartialCreateIsListedAndDeleted: a create that stops before the forwarding rule leaves VMs, groups,
// a health check and a backend service; the listing reports the proxy under its id, a second Create adopts
// what the first made, and Delete of the id removes everything.
func TestHAPartialCreateIsListedAndDeleted(t *testing.T) {
	t.Parallel()
	w := newHAWorld(t)
	fake, b, ctx := w.fake, w.b, ctxT(t)
	spec := haSpec("uid-part", 3)
	fake.AddFault(computefake.Fault{Method: http.MethodPost, PathRE: regexp.MustCompile(`/forwardingRules$`), Status: http.StatusBadRequest, Reason: "invalid"})
	inst, err := b.Create(ctx, spec)
	if err == nil {
		t.Fatal("create succeeded through the fault")
	}
	id := backend.ProviderID{Backend: Kind, Target: testProject, Scope: "us-central1-b", Name: "web"}
	if inst.ID != id {
		t.Fatalf("partial create returned %+v, want it recorded under %s", inst, id)
	}
	if n := len(fake.LoadBalancerObjects()); n != 5 {
		t.Fatalf("after the failed create: %v, want 3 groups, the health check and the backend service", fake.LoadBalancerObjects())
	}
	listed, err := b.ListByTag(ctx, backend.Selector{Owner: "owner-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].ID != id || listed[0].State != backend.StateFailed {
		t.Fatalf("listed %+v, want the half-made proxy once, Failed", listed)
	}
	fake.ClearFaults()
	if inst, err := b.Create(ctx, spec); err != nil || inst.State != backend.StateRunning {
		t.Fatalf("create again: %+v %v, want the parts adopted and the proxy running", inst, err)
	}
	if err := b.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if left := fake.LoadBalancerObjects(); len(left) != 0 || len(fake.Instances()) != 0 {
		t.Fatalf("after delete: %v and %d VMs", left, len(fake.Instances()))
	}
}

// TestHALeftoversAtEveryStep: a create stopped at each step of the load balancer, and a delete stopped at each
// of its steps, leave what they made listed once under the proxy's id, and Delete of that id removes all of it.
func TestHALeftoversAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, stop := range []struct{ method, path string }{
		{http.MethodPost, `/instanceGroups$`},
		{http.MethodPost, `/addInstances$`},
		{http.MethodPost, `/healthChecks$`},
		{http.MethodPost, `/backendServices$`},
		{http.MethodDelete, `/backendServices/web$`},
		{http.MethodDelete, `/healthChecks/web$`},
		{http.MethodDelete, `/instanceGroups/web$`},
		{http.MethodDelete, `/instances/web-2$`},
	} {
		t.Run(stop.method+" "+stop.path, func(t *testing.T) {
			t.Parallel()
			w := newHAWorld(t)
			fake, b, ctx := w.fake, w.b, ctxT(t)
			spec := haSpec("uid-step", 3)
			id := backend.ProviderID{Backend: Kind, Target: testProject, Scope: "us-central1-b", Name: "web"}
			fault := computefake.Fault{Method: stop.method, PathRE: regexp.MustCompile(stop.path), Status: http.StatusBadRequest, Reason: "invalid"}
			if stop.method == http.MethodPost {
				fake.AddFault(fault)
				if _, err := b.Create(ctx, spec); err == nil {
					t.Fatal("create succeeded through the fault")
				}
			} else {
				if _, err := b.Create(ctx, spec); err != nil {
					t.Fatal(err)
				}
				fake.AddFault(fault)
				if err := b.Delete(ctx, id); err == nil {
					t.Fatal("delete succeeded through the fault")
				}
			}
			if fake.Fired() == 0 {
				t.Fatal("the fault never fired")
			}
			listed, err := b.ListByTag(ctx, backend.Selector{Owner: "owner-a"})
			if err != nil {
				t.Fatal(err)
			}
			if len(listed) != 1 || listed[0].ID != id {
				t.Fatalf("listed %v with %d VMs and %v left, want the proxy once under %s", listed, len(fake.Instances()), fake.LoadBalancerObjects(), id)
			}
			fake.ClearFaults()
			if err := b.Delete(ctx, listed[0].ID); err != nil {
				t.Fatal(err)
			}
			if left := fake.LoadBalancerObjects(); len(left) != 0 || len(fake.Instances()) != 0 {
				t.Fatalf("after delete: %v and %d VMs", left, len(fake.Instances()))
			}
		})
	}
}

// TestHAForeignObjectsAreNeverTaken: a health check of the proxy's name that this provider did not make, or
// that another proxy of that name in another zone of the region made, stops the create and is not deleted.
func TestHAForeignObjectsAreNeverTaken(t *testing.T) {
	t.Parallel()
	w := newHAWorld(t)
	fake, b, ctx := w.fake, w.b, ctxT(t)
	first := haSpec("uid-first", 2)
	if _, err := b.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	other := haSpec("uid-other", 2)
	other.Placement.Scope = "us-central1-c"
	_, err := b.Create(ctx, other)
	if backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "belongs to the egress proxy web in zone us-central1-b") {
		t.Fatalf("create of a second proxy web in the region: %v, want Permanent naming the first", err)
	}
	// The member VMs of the second proxy collide with the first's (web-1, web-2 in other zones): either
	// way, the first proxy's objects are intact.
	if fake.HealthCheck(testProject, "us-central1", "web") == nil || fake.ForwardingRule(testProject, "us-central1", "web") == nil {
		t.Fatal("the first proxy's load balancer was touched")
	}
	err = b.Delete(ctx, backend.ProviderID{Backend: Kind, Target: testProject, Scope: "us-central1-c", Name: "web"})
	if err != nil && backend.ClassOf(err) != backend.ClassPermanent {
		t.Fatalf("delete of the second id: %v", err)
	}
	if fake.ForwardingRule(testProject, "us-central1", "web") == nil {
		t.Fatal("deleting the second proxy deleted the first's forwarding rule")
	}
}

func TestValidateInstances(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts Options
		name string
		ok   bool
	}{
		{Options{Instances: 0}, "web", true},
		{Options{Instances: MaxInstances}, "web", true},
		{Options{Instances: MaxInstances + 1}, "web", false},
		{Options{Instances: -1}, "web", false},
		{Options{Instances: 2, StaticEgressIP: true}, "web", false},
		{Options{Instances: 2, EgressAddressName: "a"}, "web", false},
		{Options{Instances: 1, StaticEgressIP: true}, "web", true},
		{Options{Instances: 3}, strings.Repeat("a", 61), true},
		{Options{Instances: 3}, strings.Repeat("a", 62), false},
	} {
		err := ValidateInstances(c.opts)
		if err == nil {
			err = ValidateHAName(c.name, c.opts.Instances)
		}
		if (err == nil) != c.ok {
			t.Errorf("%+v %s: %v, want ok %v", c.opts, c.name, err, c.ok)
		}
	}
	_ = fmt.Sprint
}

// TestHAWithMetricsIsRefused: metrics on a proxy of several VMs are refused before anything is made.
func TestHAWithMetricsIsRefused(t *testing.T) {
	t.Parallel()
	w := newHAWorld(t)
	spec := haSpec("uid-metrics", 2)
	spec.Proxy.Metrics = &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"10.0.0.0/8"}}
	spec.Proxy.LogFormat = proxyconf.LogFormatJSON // what metrics need: without the refusal, the create would go ahead
	if _, err := w.b.Create(ctxT(t), spec); !errors.Is(err, ErrHAMetrics) || backend.ClassOf(err) != backend.ClassPermanent {
		t.Fatalf("create with metrics: %v, want Permanent %v", err, ErrHAMetrics)
	}
	if n := len(w.fake.Instances()); n != 0 {
		t.Fatalf("%d VMs made", n)
	}
}
