package kvm

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// Two owners share a host and choose one name. Owner a's proxy is defined there, or only its volumes are
// left (a create cut before the domain was defined). Nothing owner b does under that name touches them:
// Create, Get, Update, Reconfigure and Delete of the domain are refused with a Permanent error naming both
// owners, and b's Delete of the name where only a's leftovers are finds nothing of b's to remove.
func TestFakeTwoOwnersOneName(t *testing.T) {
	t.Parallel()
	const name = "partner-egress"
	specOf := func(owner, uid string) backend.Spec {
		s := fakeSpec(uid, owner)
		s.Name = name
		return s
	}
	asB := func(ctx context.Context) context.Context {
		return backend.WithOwnership(ctx, backend.Ownership{Owner: "owner-b", UID: "uid-b"})
	}
	id := backend.ProviderID{Backend: Kind, Target: "h", Name: name}
	tests := map[string]struct {
		leftover bool // a's domain is gone and its volumes are left
		act      func(ctx context.Context, b *Backend) error
		refused  bool
	}{
		"create": {act: func(ctx context.Context, b *Backend) error {
			_, err := b.Create(ctx, specOf("owner-b", "uid-b"))
			return err
		}, refused: true},
		"create with a's UID": {act: func(ctx context.Context, b *Backend) error {
			_, err := b.Create(ctx, specOf("owner-b", "uid-a"))
			return err
		}, refused: true},
		"create over leftovers": {leftover: true, act: func(ctx context.Context, b *Backend) error {
			_, err := b.Create(ctx, specOf("owner-b", "uid-b"))
			return err
		}, refused: true},
		"get": {act: func(ctx context.Context, b *Backend) error {
			_, err := b.Get(asB(ctx), id)
			return err
		}, refused: true},
		"update": {act: func(ctx context.Context, b *Backend) error {
			_, err := b.Update(asB(ctx), id, specOf("owner-b", "uid-b"))
			return err
		}, refused: true},
		"reconfigure": {act: func(ctx context.Context, b *Backend) error {
			_, err := b.Reconfigure(asB(ctx), id, specOf("owner-b", "uid-b").Proxy)
			return err
		}, refused: true},
		"delete": {act: func(ctx context.Context, b *Backend) error {
			return b.Delete(asB(ctx), id)
		}, refused: true},
		"delete of leftovers": {leftover: true, act: func(ctx context.Context, b *Backend) error {
			return b.Delete(asB(ctx), id)
		}},
	}
	for desc, tc := range tests {
		t.Run(desc, func(t *testing.T) {
			t.Parallel()
			f := newFakeHost()
			b, _ := fakeBackend(f)
			ctx := context.Background()
			if _, err := b.Create(ctx, specOf("owner-a", "uid-a")); err != nil {
				t.Fatal(err)
			}
			if tc.leftover {
				delete(f.domains, name)
			}
			before := volNames(f)
			slices.Sort(before)

			err := tc.act(ctx, b)
			switch {
			case tc.refused && backend.ClassOf(err) != backend.ClassPermanent:
				t.Fatalf("owner b's call = %v, want Permanent", err)
			case tc.refused && (!strings.Contains(err.Error(), `"owner-a"`) || !strings.Contains(err.Error(), `"owner-b"`)):
				t.Fatalf("owner b's call = %v, want it to name both owners", err)
			case !tc.refused && err != nil:
				t.Fatalf("owner b's call = %v, want nil", err)
			}

			after := volNames(f)
			slices.Sort(after)
			if !slices.Equal(before, after) {
				t.Fatalf("owner a's volumes %v became %v", before, after)
			}
			if tc.leftover {
				return
			}
			m, err := parseMetadata(f.domains[name].meta)
			if err != nil || m.Owner != "owner-a" || m.UID != "uid-a" || m.Labels[0].Value != "a" {
				t.Fatalf("owner a's domain after owner b's call: %+v, %v", m, err)
			}
		})
	}
}
