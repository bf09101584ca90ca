package gcp

import (
	"net/http"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// TestHAUpdateMakesAGoneMemberAgain: of a proxy of three VMs, one stopped (TERMINATED) is unhealthy but not
// Gone; one deleted behind Terraform's back is Gone, the proxy Degraded and still Reconfigurable (Update comes
// first). Update makes that one VM again, under its name in its zone, with the Spec's labels, in its zone's
// group, inserting nothing else: the health check, the backend service and the forwarding rule stay, and so
// does the proxy's address.
func TestHAUpdateMakesAGoneMemberAgain(t *testing.T) {
	t.Parallel()
	w := newHAWorld(t)
	fake, b, ctx := w.fake, w.b, ctxT(t)
	spec := haSpec("uid-ha-gone", 3)
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	id := inst.ID
	lost := inst.Members[1] // web-2 in us-central1-c

	fake.SetInstanceStatus(testProject, inst.Members[2].Scope, inst.Members[2].Name, "TERMINATED")
	stopped, err := b.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if m := stopped.Members[2]; m.Gone || m.Healthy || !strings.Contains(m.Reason, "TERMINATED") || stopped.State != backend.StateDegraded {
		t.Fatalf("with %s stopped: %s, member %+v; want Degraded, it unhealthy (TERMINATED), not Gone", m.Name, stopped.State, m)
	}
	fake.SetInstanceStatus(testProject, inst.Members[2].Scope, inst.Members[2].Name, "RUNNING")

	if !fake.DeleteInstance(testProject, lost.Scope, lost.Name) {
		t.Fatalf("the fake holds no %s in %s", lost.Name, lost.Scope)
	}
	got, err := b.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != backend.StateDegraded || !got.Members[1].Gone || got.Members[0].Gone || got.Members[2].Gone || !got.Reconfigurable {
		t.Fatalf("Get with %s deleted = %s, reconfigurable %v, members %+v; want Degraded, it alone Gone, reconfigurable", lost.Name, got.State, got.Reconfigurable, got.Members)
	}

	next := spec
	next.Labels = map[string]string{"team": "sec"}
	fake.ResetLog()
	updated, err := b.Update(ctx, id, next)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if n := fake.Count(http.MethodPost, `/instances$`); n != 1 {
		t.Errorf("Update inserted %d VMs, want 1 (the gone one)", n)
	}
	if n := fake.Count(http.MethodPost, `/(healthChecks|backendServices|forwardingRules)$`); n != 0 {
		t.Errorf("Update tried %d inserts of the load balancer's objects, want none", n)
	}
	if n := fake.Count(http.MethodDelete, ``); n != 0 {
		t.Errorf("Update deleted %d objects, want none", n)
	}
	vm := fake.Instance(testProject, lost.Scope, lost.Name)
	if vm == nil || vm.GetLabels()["team"] != "sec" || vm.GetLabels()[backend.LabelUID] != spec.UID {
		t.Fatalf("%s in %s after Update: %v, want it made again with the Spec's labels", lost.Name, lost.Scope, vm)
	}
	if zone, name, count, ok := memberOf(vm); !ok || zone != id.Scope || name != id.Name || count != 3 {
		t.Errorf("%s made again as a member of %s/%s of %d, want %s/%s of 3", lost.Name, zone, name, count, id.Scope, id.Name)
	}
	if _, held := fake.InstanceGroup(testProject, lost.Scope, "web"); len(held) != 1 || !strings.HasSuffix(held[0], "/instances/"+lost.Name) {
		t.Errorf("group web in %s holds %v, want %s", lost.Scope, held, lost.Name)
	}
	if updated.State != backend.StateRunning || updated.InternalAddress != inst.InternalAddress || !updated.Reconfigurable {
		t.Errorf("Update = %s at %s, reconfigurable %v; want Running at %s, reconfigurable", updated.State, updated.InternalAddress, updated.Reconfigurable, inst.InternalAddress)
	}
	for i, m := range updated.Members {
		if m.Gone || !m.Healthy || m.Name != inst.Members[i].Name || m.Scope != inst.Members[i].Scope {
			t.Errorf("member %d after Update = %+v, want %s in %s, healthy", i, m, inst.Members[i].Name, inst.Members[i].Scope)
		}
	}
	if fr := fake.ForwardingRule(testProject, "us-central1", "web"); fr.GetIPAddress() != inst.InternalAddress {
		t.Errorf("forwarding rule at %s after Update, want %s", fr.GetIPAddress(), inst.InternalAddress)
	}

	// Nothing gone: another Update inserts nothing.
	fake.ResetLog()
	if _, err := b.Update(ctx, id, next); err != nil {
		t.Fatal(err)
	}
	if n := fake.Count(http.MethodPost, `/instances$`); n != 0 {
		t.Errorf("an Update with no member gone inserted %d VMs", n)
	}
}
