package gcp

import (
	"net/http"
	"regexp"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
)

// TestHACreateOverAnotherProxysMembers: a create of a proxy's name killed after its first VM (the others
// never made) leaves that VM, which no state holds. The next create of the name, under another UID, is
// refused before it makes anything and returns no instance to record: VMs of two proxies under one id would
// be recorded as one proxy that no delete removes whole (each refuses the other's UID). The killed proxy
// stays listed, and its id deletes it.
func TestHACreateOverAnotherProxysMembers(t *testing.T) {
	t.Parallel()
	w := newHAWorld(t)
	fake, b, ctx := w.fake, w.b, ctxT(t)
	killed := haSpec("uid-killed", 3)
	// web-1 goes in us-central1-b, web-2 and web-3 in the region's next zones: those two are never made.
	for _, zone := range []string{"us-central1-c", "us-central1-a"} {
		fake.AddFault(computefake.Fault{Method: http.MethodPost, PathRE: regexp.MustCompile(`/zones/` + zone + `/instances$`), Status: http.StatusBadRequest, Reason: "invalid"})
	}
	if _, err := b.Create(ctx, killed); err == nil {
		t.Fatal("the create succeeded through the faults")
	}
	fake.ClearFaults()
	if vms := fake.Instances(); len(vms) != 1 || vms[0].GetName() != "web-1" {
		t.Fatalf("the stopped create left %d VMs, want web-1 alone", len(vms))
	}

	inst, err := b.Create(ctx, haSpec("uid-next", 3))
	if backend.ClassOf(err) != backend.ClassPermanent {
		t.Fatalf("the next create of the name: %v, want Permanent", err)
	}
	if inst.ID.Name != "" {
		t.Errorf("the refused create returned %s to record", inst.ID)
	}
	for _, in := range fake.Instances() {
		if uid := in.GetLabels()[backend.LabelUID]; uid != "uid-killed" {
			t.Errorf("the refused create made %s (uid %s)", in.GetName(), uid)
		}
	}
	listed, err := b.ListByTag(ctx, backend.Selector{Owner: "owner-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].UID != "uid-killed" {
		t.Fatalf("listed %+v, want the killed proxy once", listed)
	}
	if err := b.Delete(ctx, listed[0].ID); err != nil {
		t.Fatal(err)
	}
	if left := fake.LoadBalancerObjects(); len(left) != 0 || len(fake.Instances()) != 0 {
		t.Fatalf("after deleting the listed proxy: %v and %d VMs", left, len(fake.Instances()))
	}
}
