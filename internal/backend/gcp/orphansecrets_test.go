package gcp

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
)

// TestOrphanSecretsAreListedAndDeleted: the Secret Manager secret of a proxy whose VM is gone (deleted behind
// the provider's back, or a create that failed between the two) holds that proxy's password hash and TLS key.
// ListByTag lists it, with one filtered list of the owner's secrets, as gcp/<project>/secrets/<secret id>, so
// egress_proxy_orphans shows it and the GC action's Delete of that id deletes it. The secret of a VM that
// runs, another owner's, and one in a zone whose VMs could not be listed are not orphans; a Delete of the id
// under another proxy's UID, or once the VM exists again, deletes nothing; a project where Secret Manager is
// off lists none.
func TestOrphanSecretsAreListedAndDeleted(t *testing.T) {
	t.Parallel()
	fake, sm, b := newTestWithSecrets(t, computefake.Options{})
	ctx := ctxT(t)
	const zoneGone, zoneLive = "us-central1-a", "us-central1-b"
	withAccount := func(uid, zone, owner string) backend.Spec {
		spec := testSpec(uid, zone)
		spec.Owner = owner
		spec.Placement.Options = &Options{ServiceAccount: "proxy@" + testProject + ".iam.gserviceaccount.com"}
		if _, err := b.Create(backend.WithOwnership(ctx, backend.OwnershipOfSpec(spec)), spec); err != nil {
			t.Fatal(err)
		}
		return spec
	}
	gone, live, theirs := withAccount("uid-gone", zoneGone, "owner-a"), withAccount("uid-live", zoneLive, "owner-a"), withAccount("uid-theirs", zoneGone, "owner-b")
	for _, spec := range []backend.Spec{gone, theirs} {
		if !fake.DeleteInstance(testProject, zoneGone, spec.Name) {
			t.Fatal("the fake had no instance to delete")
		}
	}
	goneSecret := secretID(zoneGone, gone.Name)
	orphanID := backend.ProviderID{Backend: Kind, Target: testProject, Scope: secretScope, Name: goneSecret}

	listed, err := b.ListByTag(ctx, backend.Selector{Owner: "owner-a"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range listed {
		ids = append(ids, in.ID.String())
	}
	slices.Sort(ids)
	want := []string{orphanID.String(), "gcp/" + testProject + "/" + zoneLive + "/" + live.Name}
	if !slices.Equal(ids, want) {
		t.Fatalf("ListByTag lists %v, want the live proxy and the gone one's secret %v", ids, want)
	}
	orphan := listed[slices.IndexFunc(listed, func(in backend.Instance) bool { return in.ID == orphanID })]
	if orphan.UID != gone.UID || orphan.Owner != "owner-a" || orphan.State != backend.StateStopped || orphan.CreatedAt.IsZero() ||
		orphan.Labels["team"] != "net" || len(orphan.Notes) != 1 || !strings.Contains(orphan.Notes[0], gone.Name) {
		t.Errorf("the orphan secret as listed: %+v", orphan)
	}

	// Not an orphan where the VMs of its zone could not be listed.
	fake.BreakZone(zoneGone, "UNREACHABLE")
	listed, err = b.ListByTag(ctx, backend.Selector{Owner: "owner-a"})
	var le *backend.ListError
	if !errors.As(err, &le) || slices.ContainsFunc(listed, func(in backend.Instance) bool { return in.ID == orphanID }) {
		t.Errorf("with %s unlisted: %+v, %v; want the zone failed and its secret not listed", zoneGone, listed, err)
	}
	fake.BreakZone(zoneGone, "")

	// Deleted only by its proxy's owner and UID, and only while its VM is gone.
	mine := backend.WithOwnership(ctx, backend.Ownership{Owner: "owner-a", UID: orphan.UID})
	if err := b.Delete(backend.WithOwnership(ctx, backend.Ownership{Owner: "owner-a", UID: "uid-other"}), orphanID); backend.ClassOf(err) != backend.ClassPermanent {
		t.Errorf("Delete under another UID: %v, want Permanent", err)
	}
	theirsID := backend.ProviderID{Backend: Kind, Target: testProject, Scope: secretScope, Name: secretID(zoneGone, theirs.Name)}
	if err := b.Delete(mine, theirsID); backend.ClassOf(err) != backend.ClassPermanent {
		t.Errorf("Delete of owner-b's secret as owner-a: %v, want Permanent", err)
	}
	if _, err := b.Create(backend.WithOwnership(ctx, backend.OwnershipOfSpec(gone)), gone); err != nil {
		t.Fatalf("the same proxy made again: %v", err)
	}
	if err := b.Delete(mine, orphanID); backend.ClassOf(err) != backend.ClassPermanent || !strings.Contains(err.Error(), "exists again") {
		t.Errorf("Delete of the secret of a VM that exists again: %v, want Permanent", err)
	}
	if !fake.DeleteInstance(testProject, zoneGone, gone.Name) {
		t.Fatal("the fake had no instance to delete")
	}
	if err := b.Delete(mine, orphanID); err != nil {
		t.Fatalf("Delete of the listed orphan: %v", err)
	}
	if got := sm.Secrets(testProject); !slices.Equal(got, []string{secretID(zoneGone, theirs.Name), secretID(zoneLive, live.Name)}) {
		t.Errorf("secrets left: %v, want the live proxy's and owner-b's", got)
	}
	if err := b.Delete(mine, orphanID); err != nil {
		t.Errorf("Delete again: %v, want done", err)
	}
	if listed, err = b.ListByTag(ctx, backend.Selector{Owner: "owner-a"}); err != nil || len(listed) != 1 {
		t.Errorf("ListByTag after the delete: %d, %v; want the live proxy alone", len(listed), err)
	}

	// Secret Manager off on the project: no secret to list, and no scope failed for it.
	sm.DisableAPI(testProject)
	if listed, err = b.ListByTag(ctx, backend.Selector{Owner: "owner-b"}); err != nil || len(listed) != 0 {
		t.Errorf("ListByTag with Secret Manager off: %d, %v; want nothing and no error", len(listed), err)
	}
}
