package gcp

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
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
	if n := fake.Count(http.MethodGet, `/backendServices/web$`) + fake.Count(http.MethodPatch, ``) + fake.Count(http.MethodPost, `/setMetadata$`); n != 0 {
		t.Errorf("an Update that changes no count read or wrote the backend service or a VM's metadata %d times, want none", n)
	}
}

// TestHAUpdateChangesTheNumberOfVMs: Update of a proxy of two VMs asking for four makes web-3 and web-4 in the
// next zones of the region (their groups made, and added to the backend service, which did not have them),
// and every member then records four; asking for two again removes web-4 and web-3 from their groups and
// deletes them, leaving the groups as backends. The proxy's address, health check and forwarding rule stay
// throughout, Get reads the members the count says, and Delete leaves nothing.
func TestHAUpdateChangesTheNumberOfVMs(t *testing.T) {
	t.Parallel()
	w := newHAWorld(t)
	fake, b, ctx := w.fake, w.b, ctxT(t)
	spec := haSpec("uid-ha-resize", 2)
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	id := inst.ID
	counts := func(want int) {
		t.Helper()
		got, err := b.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Members) != want || got.State != backend.StateRunning || got.InternalAddress != inst.InternalAddress {
			t.Fatalf("Get = %s at %s with members %+v; want Running at %s with %d", got.State, got.InternalAddress, got.Members, inst.InternalAddress, want)
		}
		if n := optionsOf(got.Placement).Instances; n != want {
			t.Errorf("Get reads instances = %d, want %d", n, want)
		}
		p, err := b.clients(ctx, testProject)
		if err != nil {
			t.Fatal(err)
		}
		vms, err := b.listMembers(ctx, p, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, vm := range vms {
			if _, _, n, ok := memberOf(vm); !ok || n != want {
				t.Errorf("%s records a proxy of %d VMs, want %d", vm.GetName(), n, want)
			}
		}
	}

	grown := spec
	optionsOf(grown.Placement).Instances = 4
	fake.ResetLog()
	if _, err := b.Update(ctx, id, grown); err != nil {
		t.Fatalf("Update to 4 VMs: %v", err)
	}
	if n := fake.Count(http.MethodPost, `/instances$`); n != 2 {
		t.Errorf("Update to 4 inserted %d VMs, want 2", n)
	}
	if n := fake.Count(http.MethodPost, `/(healthChecks|backendServices|forwardingRules)$`) + fake.Count(http.MethodDelete, ``); n != 0 {
		t.Errorf("Update to 4 inserted or deleted %d other objects, want none", n)
	}
	counts(4)
	bs := fake.BackendService(testProject, "us-central1", "web")
	zones := map[string]bool{}
	got, _ := b.Get(ctx, id)
	for _, m := range got.Members {
		zones[m.Scope] = true
		if !m.Healthy {
			t.Errorf("member %+v after the Update: want healthy (its zone's group a backend of the service)", m)
		}
	}
	if len(bs.GetBackends()) != len(zones) {
		t.Errorf("backend service has %d backends for members in %d zones: %v", len(bs.GetBackends()), len(zones), bs.GetBackends())
	}

	shrunk := spec
	optionsOf(shrunk.Placement).Instances = 2
	fake.ResetLog()
	if _, err := b.Update(ctx, id, shrunk); err != nil {
		t.Fatalf("Update to 2 VMs: %v", err)
	}
	if n := fake.Count(http.MethodPost, `/removeInstances$`); n != 2 {
		t.Errorf("Update to 2 removed %d VMs from their groups, want 2", n)
	}
	if n := fake.Count(http.MethodPost, `/instances$`); n != 0 {
		t.Errorf("Update to 2 inserted %d VMs", n)
	}
	for _, m := range got.Members[2:] {
		if fake.Instance(testProject, m.Scope, m.Name) != nil {
			t.Errorf("%s in %s is left after the Update to 2", m.Name, m.Scope)
		}
	}
	counts(2)
	if fr := fake.ForwardingRule(testProject, "us-central1", "web"); fr.GetIPAddress() != inst.InternalAddress {
		t.Errorf("forwarding rule at %s, want %s", fr.GetIPAddress(), inst.InternalAddress)
	}

	if err := b.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if left := fake.LoadBalancerObjects(); len(left) != 0 {
		t.Errorf("left after Delete: %v", left)
	}
}

// TestHAUpdateToFewerVMsWithTheFirstGone: of a proxy of three VMs, web-1 and web-2 deleted behind Terraform's
// back, asked for two: Update makes both again before web-3 goes, so the proxy keeps a VM throughout, and ends
// with web-1 and web-2 serving.
func TestHAUpdateToFewerVMsWithTheFirstGone(t *testing.T) {
	t.Parallel()
	w := newHAWorld(t)
	fake, b, ctx := w.fake, w.b, ctxT(t)
	spec := haSpec("uid-ha-fewer", 3)
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range inst.Members[:2] {
		if !fake.DeleteInstance(testProject, m.Scope, m.Name) {
			t.Fatalf("the fake holds no %s in %s", m.Name, m.Scope)
		}
	}
	fewer := spec
	optionsOf(fewer.Placement).Instances = 2
	got, err := b.Update(ctx, inst.ID, fewer)
	if err != nil {
		t.Fatalf("Update to 2 VMs with the first two gone: %v", err)
	}
	if got.State != backend.StateRunning || len(got.Members) != 2 || got.Members[0].Name != "web-1" || got.Members[1].Name != "web-2" {
		t.Errorf("Update = %s with members %+v, want Running with web-1 and web-2", got.State, got.Members)
	}
	if m := inst.Members[2]; fake.Instance(testProject, m.Scope, m.Name) != nil {
		t.Errorf("%s is left after the Update to 2", m.Name)
	}
}

// TestHAUpdateCutBeforeTheGroupIsFinishedByTheNext: an Update that made a gone member's VM again but was cut
// before the VM joined its zone's group (the add refused once) leaves the VM outside the load balancer; the
// next Update finds the VM present and must still add it, or Get reads it "not a backend" for good.
func TestHAUpdateCutBeforeTheGroupIsFinishedByTheNext(t *testing.T) {
	t.Parallel()
	w := newHAWorld(t)
	fake, b, ctx := w.fake, w.b, ctxT(t)
	spec := haSpec("uid-ha-cut", 3)
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	lost := inst.Members[1]
	if !fake.DeleteInstance(testProject, lost.Scope, lost.Name) {
		t.Fatalf("the fake holds no %s in %s", lost.Name, lost.Scope)
	}
	fake.AddFault(computefake.Fault{Method: http.MethodPost, PathRE: regexp.MustCompile(`/addInstances$`), Status: http.StatusForbidden, Reason: "forbidden", Times: 1})
	if _, err := b.Update(ctx, inst.ID, spec); err == nil {
		t.Fatal("Update with the group's add refused succeeded")
	}
	if fake.Instance(testProject, lost.Scope, lost.Name) == nil {
		t.Fatalf("the cut Update did not make %s again: the test cuts too early", lost.Name)
	}
	fake.ClearFaults()
	got, err := b.Update(ctx, inst.ID, spec)
	if err != nil {
		t.Fatalf("the next Update: %v", err)
	}
	if _, held := fake.InstanceGroup(testProject, lost.Scope, "web"); len(held) != 1 || !strings.HasSuffix(held[0], "/instances/"+lost.Name) {
		t.Errorf("group web in %s holds %v after the next Update, want %s", lost.Scope, held, lost.Name)
	}
	if got.State != backend.StateRunning || !got.Members[1].Healthy {
		t.Errorf("the next Update = %s, member %+v; want Running, %s healthy", got.State, got.Members[1], lost.Name)
	}

	// Every member a backend: a further Update adds nothing.
	fake.ResetLog()
	if _, err := b.Update(ctx, inst.ID, spec); err != nil {
		t.Fatal(err)
	}
	if n := fake.Count(http.MethodPost, `/addInstances$`); n != 0 {
		t.Errorf("an Update with every member a backend made %d addInstances calls, want none", n)
	}
}

// withImage is spec asking for image, its options copied so that spec keeps its own.
func withImage(spec backend.Spec, image string) backend.Spec {
	o := *optionsOf(spec.Placement)
	o.Image = image
	spec.Placement.Options = &o
	return spec
}

// TestHAUpdateRollsANewImage: Update of a proxy of three VMs asking for another boot image makes a surge VM,
// web-4, with the new image before any old VM goes, then makes web-3, web-2 and web-1 again with it one at a
// time, then removes web-4: the proxy ends with three VMs of the new image in their zones, behind the same
// address, and at no point fewer than three VMs of the proxy exist. An Update cut in the middle leaves a proxy
// Get reads with both images named (or the surge VM), which the next Update finishes.
func TestHAUpdateRollsANewImage(t *testing.T) {
	t.Parallel()
	const newImage = "projects/debian-cloud/global/images/family/debian-13"
	for _, cut := range []bool{false, true} {
		t.Run(map[bool]string{false: "whole", true: "cut at the second VM made again"}[cut], func(t *testing.T) {
			t.Parallel()
			w := newHAWorld(t)
			fake, b, ctx := w.fake, w.b, ctxT(t)
			spec := haSpec("uid-ha-image", 3)
			inst, err := b.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			next := withImage(spec, newImage)
			fake.ResetLog()
			if cut {
				// The surge VM is the first insert, web-3 the second: the third, web-2's, is refused.
				fake.AddFault(computefake.Fault{Method: http.MethodPost, PathRE: regexp.MustCompile(`/zones/[^/]+/instances$`), Status: http.StatusForbidden, Reason: "forbidden",
					Skip: 2, Times: 1})
				if _, err := b.Update(ctx, inst.ID, next); err == nil {
					t.Fatal("the cut Update succeeded")
				}
				mid, err := b.Get(ctx, inst.ID)
				if err != nil {
					t.Fatalf("Get after the cut: %v", err)
				}
				if img := optionsOf(mid.Placement).Image; !strings.Contains(img, newImage) || img == newImage {
					t.Errorf("Get after the cut reads image %q, want both images named", img)
				}
				fake.ClearFaults()
			}
			got, err := b.Update(ctx, inst.ID, next)
			if err != nil {
				t.Fatalf("Update to a new image: %v", err)
			}
			if got.State != backend.StateRunning || len(got.Members) != 3 || got.InternalAddress != inst.InternalAddress || optionsOf(got.Placement).Image != newImage {
				t.Fatalf("Update = %s, %d members at %s, image %q; want Running, 3 at %s, %s",
					got.State, len(got.Members), got.InternalAddress, optionsOf(got.Placement).Image, inst.InternalAddress, newImage)
			}
			for i, m := range got.Members {
				vm := fake.Instance(testProject, m.Scope, m.Name)
				st, _ := readStoredSpec(vm)
				if m.Name != inst.Members[i].Name || m.Scope != inst.Members[i].Scope || st.Image != newImage || !m.Healthy {
					t.Errorf("member %d after Update = %+v of image %s, want %s in %s, healthy, of %s", i, m, st.Image, inst.Members[i].Name, inst.Members[i].Scope, newImage)
				}
			}
			if vm := fake.Instance(testProject, "us-central1-b", "web-4"); vm != nil {
				t.Errorf("the surge VM web-4 is left")
			}
			if !cut {
				// The order: the surge VM is made before the first old VM is deleted.
				var order []string
				for _, r := range fake.Requests() {
					switch {
					case r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/instances"):
						order = append(order, "insert")
					case r.Method == http.MethodDelete && strings.Contains(r.Path, "/instances/"):
						order = append(order, "delete "+r.Path[strings.LastIndex(r.Path, "/")+1:])
					}
				}
				want := []string{"insert", "delete web-3", "insert", "delete web-2", "insert", "delete web-1", "insert", "delete web-4"}
				if !slices.Equal(order, want) {
					t.Errorf("inserts and deletes of VMs: %v, want %v", order, want)
				}
			}
			again, err := b.Update(ctx, inst.ID, next)
			if err != nil || optionsOf(again.Placement).Image != newImage {
				t.Fatalf("an Update with the image in place: %v, image %q", err, optionsOf(again.Placement).Image)
			}
		})
	}
}
