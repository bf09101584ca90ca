package aws

import (
	"context"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// A replacement keeps the proxy's Elastic IP for the successor of its name. When the successor never comes,
// the address is not lost: ListByTag lists it as that proxy, Failed, and deleting that id releases it.
func TestKeptAddressWithoutSuccessorIsListedAndReleased(t *testing.T) {
	t.Parallel()
	fake, b := newTest(t, ec2fake.Options{})
	fake.PlayGuests()
	ctx := context.Background()
	spec := testSpec(fake, "kept")
	spec.Placement.Options.(*Options).StaticEgressIP = true //nolint:forcetypeassert // testSpec's own options
	inst, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteForReplacement(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Addresses(testRegion)); n != 1 {
		t.Fatalf("%d Elastic IPs after the replacement's delete, want the kept one", n)
	}
	listed, err := b.ListByTag(ctx, backend.Selector{Owner: spec.Owner})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].ID != inst.ID || listed[0].State != backend.StateFailed || listed[0].CreatedAt.IsZero() ||
		len(listed[0].Notes) != 1 || !strings.Contains(listed[0].Notes[0], "Elastic IP") {
		t.Fatalf("ListByTag = %+v, want %s alone, Failed, with its creation time and a note naming the Elastic IP", listed, inst.ID)
	}
	if err := b.Delete(ctx, listed[0].ID); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Addresses(testRegion)); n != 0 {
		t.Fatalf("%d Elastic IPs after deleting the listed id, want none", n)
	}
	if listed, err := b.ListByTag(ctx, backend.Selector{Owner: spec.Owner}); err != nil || len(listed) != 0 {
		t.Fatalf("ListByTag after the delete = %v, %v; want nothing", listed, err)
	}
}
