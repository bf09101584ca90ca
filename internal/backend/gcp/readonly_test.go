package gcp

import (
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
)

// TestGetChangesNothing: Get of a proxy whose VM was deleted behind the provider's back answers NotFound and
// leaves the address reserved for it alone (a read changes nothing); the address is then listed as kept, so
// egress_proxy_orphans shows it, and a Delete of the id the list gives releases it.
func TestGetChangesNothing(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, computefake.Options{})
	ctx := ctxT(t)
	spec := testSpec("uid-readonly", "us-central1-a")
	optionsOf(spec.Placement).StaticEgressIP = true
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !fake.DeleteInstance(testProject, "us-central1-a", spec.Name) {
		t.Fatal("the fake had no instance to delete")
	}
	if _, err := b.Get(backend.WithOwnership(ctx, backend.OwnershipOfSpec(spec)), inst.ID); !backend.IsNotFound(err) {
		t.Fatalf("Get of a deleted VM: %v, want NotFound", err)
	}
	addressName := spec.Name + "-ip"
	if fake.Address(testProject, "us-central1", addressName) == nil {
		t.Fatal("Get released the address: a read must change nothing")
	}
	listed, err := b.ListByTag(ctx, backend.Selector{Owner: spec.Owner})
	if err != nil {
		t.Fatal(err)
	}
	var kept *backend.Instance
	for i := range listed {
		if listed[i].EgressAddress == inst.EgressAddress {
			kept = &listed[i]
		}
	}
	if kept == nil {
		t.Fatalf("the kept address %s is not listed for garbage collection: %+v", inst.EgressAddress, listed)
	}
	if err := b.Delete(ctx, kept.ID); err != nil {
		t.Fatalf("deleting the listed address: %v", err)
	}
	if fake.Address(testProject, "us-central1", addressName) != nil {
		t.Error("the address is still reserved after the Delete of its listed id")
	}
}
