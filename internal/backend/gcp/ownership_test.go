package gcp

import (
	"context"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Two owners share a project and choose one name. Owner a's proxy runs in one zone with its static address,
// or has been replaced away and left the address kept for its successor. Nothing owner b does under that
// name, Create, Get, Update, Reconfigure or Delete, in a's zone or in another zone of the region, touches
// a's instance or address: each is refused with a Permanent error naming both owners, or (a Delete in
// another zone, where b has nothing) finds nothing of b's to remove.
func TestTwoOwnersOneName(t *testing.T) {
	t.Parallel()
	const name, zoneA, zoneB, region = "partner-egress", "us-central1-a", "us-central1-b", "us-central1"
	specOf := func(owner, uid, zone string) backend.Spec {
		s := testSpec(uid, zone)
		s.Name, s.Owner = name, owner
		s.Placement.Options = &Options{StaticEgressIP: true}
		return s
	}
	asB := func(ctx context.Context) context.Context {
		return backend.WithOwnership(ctx, backend.Ownership{Owner: "owner-b", UID: "uid-b"})
	}
	idIn := func(scope string) backend.ProviderID {
		return backend.ProviderID{Backend: Kind, Target: testProject, Scope: scope, Name: name}
	}
	tests := map[string]struct {
		kept    bool // a's proxy was replaced away and kept its address; otherwise it runs in zone a
		act     func(ctx context.Context, b *Backend) error
		refused bool // Permanent naming both owners; otherwise the act succeeds and a's things stay
	}{
		"create in a's zone": {act: func(ctx context.Context, b *Backend) error {
			_, err := b.Create(ctx, specOf("owner-b", "uid-b", zoneA))
			return err
		}, refused: true},
		"create in another zone takes the running address": {act: func(ctx context.Context, b *Backend) error {
			_, err := b.Create(ctx, specOf("owner-b", "uid-b", zoneB))
			return err
		}, refused: true},
		"create takes the kept address": {kept: true, act: func(ctx context.Context, b *Backend) error {
			_, err := b.Create(ctx, specOf("owner-b", "uid-b", zoneA))
			return err
		}, refused: true},
		"get": {act: func(ctx context.Context, b *Backend) error {
			_, err := b.Get(asB(ctx), idIn(zoneA))
			return err
		}, refused: true},
		"update": {act: func(ctx context.Context, b *Backend) error {
			_, err := b.Update(asB(ctx), idIn(zoneA), specOf("owner-b", "uid-b", zoneA))
			return err
		}, refused: true},
		"reconfigure": {act: func(ctx context.Context, b *Backend) error {
			_, err := b.Reconfigure(asB(ctx), idIn(zoneA), specOf("owner-b", "uid-b", zoneA).Proxy)
			return err
		}, refused: true},
		"delete": {act: func(ctx context.Context, b *Backend) error {
			return b.Delete(asB(ctx), idIn(zoneA))
		}, refused: true},
		"delete in another zone leaves the running address": {act: func(ctx context.Context, b *Backend) error {
			return b.Delete(asB(ctx), idIn(zoneB))
		}},
		"delete in another zone leaves the kept address": {kept: true, act: func(ctx context.Context, b *Backend) error {
			return b.Delete(asB(ctx), idIn(zoneB))
		}},
		"get in another zone leaves the kept address": {kept: true, act: func(ctx context.Context, b *Backend) error {
			if _, err := b.Get(asB(ctx), idIn(zoneB)); !backend.IsNotFound(err) {
				return err
			}
			return nil
		}},
		"garbage collection of the kept address": {kept: true, act: func(ctx context.Context, b *Backend) error {
			return b.Delete(asB(ctx), backend.ProviderID{Backend: Kind, Target: testProject, Scope: region, Name: reservedAddressName(name)})
		}, refused: true},
	}
	for desc, tc := range tests {
		t.Run(desc, func(t *testing.T) {
			t.Parallel()
			fake, b, _ := newTestWithGuest(t)
			ctx := ctxT(t)
			a := specOf("owner-a", "uid-a", zoneA)
			fake.MetadataInstance(testProject, zoneA, name)
			if _, err := b.Create(ctx, a); err != nil {
				t.Fatal(err)
			}
			if tc.kept {
				if err := b.DeleteForReplacement(ctx, idIn(zoneA)); err != nil {
					t.Fatal(err)
				}
			}
			addr := fake.Address(testProject, region, reservedAddressName(name))
			if addr == nil {
				t.Fatal("owner a's address is missing before the test")
			}

			err := tc.act(ctx, b)
			switch {
			case tc.refused && backend.ClassOf(err) != backend.ClassPermanent:
				t.Fatalf("owner b's call = %v, want Permanent", err)
			case tc.refused && (!strings.Contains(err.Error(), `"owner-a"`) || !strings.Contains(err.Error(), `"owner-b"`)):
				t.Fatalf("owner b's call = %v, want it to name both owners", err)
			case !tc.refused && err != nil:
				t.Fatalf("owner b's call = %v, want nil", err)
			}

			after := fake.Address(testProject, region, reservedAddressName(name))
			if after == nil || after.GetAddress() != addr.GetAddress() || after.GetLabels()[backend.LabelOwner] != "owner-a" {
				t.Fatalf("owner a's address after owner b's call = %v, want %s still owner a's", after, addr.GetAddress())
			}
			if tc.kept {
				return
			}
			in := fake.Instance(testProject, zoneA, name)
			if in == nil || in.GetLabels()[backend.LabelOwner] != "owner-a" || in.GetLabels()[backend.LabelUID] != "uid-a" {
				t.Fatalf("owner a's instance after owner b's call = %v, want it still owner a's", in.GetLabels())
			}
			if got := after.GetUsers(); len(got) != 1 || lastSegment(got[0]) != name {
				t.Fatalf("owner a's address is used by %v, want owner a's instance", got)
			}
			if n := len(fake.Instances()); n != 1 {
				t.Fatalf("instances = %d, want owner a's alone", n)
			}
		})
	}
}
