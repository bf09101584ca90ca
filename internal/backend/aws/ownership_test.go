package aws

import (
	"context"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// Two owners, one name (issue 35, item 4): what team-a made is neither adopted, read, nor deleted by
// team-b, and each refusal names both owners. Before the fix, team-b's create took team-a's kept Elastic IP.
func TestTwoOwnersOneName(t *testing.T) {
	t.Parallel()
	const name = "shared"
	for tcName, tc := range map[string]struct {
		// a is what team-a leaves: a live proxy, or only the Elastic IP a replacement kept.
		keptAddressOnly bool
		// b is team-b's act on the name.
		b       func(ctx context.Context, b *Backend, spec backend.Spec, aID backend.ProviderID) error
		wantErr bool
	}{
		"create over a live proxy": {b: func(ctx context.Context, b *Backend, spec backend.Spec, _ backend.ProviderID) error {
			_, err := b.Create(ctx, spec)
			return err
		}, wantErr: true},
		"create over a kept Elastic IP": {keptAddressOnly: true, b: func(ctx context.Context, b *Backend, spec backend.Spec, _ backend.ProviderID) error {
			_, err := b.Create(ctx, spec)
			return err
		}, wantErr: true},
		"read": {b: func(ctx context.Context, b *Backend, _ backend.Spec, id backend.ProviderID) error {
			_, err := b.Get(ctx, id)
			return err
		}, wantErr: true},
		"reconfigure": {b: func(ctx context.Context, b *Backend, spec backend.Spec, id backend.ProviderID) error {
			_, err := b.Reconfigure(ctx, id, spec.Proxy)
			return err
		}, wantErr: true},
		"delete a live proxy": {b: func(ctx context.Context, b *Backend, _ backend.Spec, id backend.ProviderID) error {
			return b.Delete(ctx, id)
		}, wantErr: true},
		// Nothing of team-b's is there: its delete succeeds and leaves team-a's address alone.
		"delete over a kept Elastic IP": {keptAddressOnly: true, b: func(ctx context.Context, b *Backend, _ backend.Spec, id backend.ProviderID) error {
			return b.Delete(ctx, id)
		}},
	} {
		t.Run(tcName, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, ec2fake.Options{})
			fake.PlayGuests()
			a := testSpec(fake, name)
			a.Owner, a.UID = "team-a", "uid-a"
			a.Placement.Options.(*Options).StaticEgressIP = true //nolint:forcetypeassert // testSpec's own options
			made, err := b.Create(backend.WithOwnership(context.Background(), backend.OwnershipOfSpec(a)), a)
			if err != nil {
				t.Fatal(err)
			}
			address := made.EgressAddress
			if tc.keptAddressOnly {
				if err := b.DeleteForReplacement(backend.WithOwnership(context.Background(), backend.OwnershipOfSpec(a)), made.ID); err != nil {
					t.Fatal(err)
				}
			}
			spec := testSpec(fake, name)
			spec.Owner, spec.UID = "team-b", "uid-b"
			spec.Placement.Options.(*Options).StaticEgressIP = true //nolint:forcetypeassert // testSpec's own options
			err = tc.b(backend.WithOwnership(context.Background(), backend.OwnershipOfSpec(spec)), b, spec, made.ID)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), `"team-a"`) || !strings.Contains(err.Error(), `"team-b"`) || backend.ClassOf(err) != backend.ClassPermanent {
					t.Fatalf("team-b's act = %v, want a Permanent refusal naming team-a and team-b", err)
				}
			} else if err != nil {
				t.Fatalf("team-b's act = %v", err)
			}
			// team-a's part is as it was, read over the wire.
			addrs := fake.Addresses(testRegion)
			if len(addrs) != 1 || addrs[0].PublicIP != address || addrs[0].Tags[backend.LabelOwner] != "team-a" {
				t.Fatalf("Elastic IPs after team-b's act: %+v, want team-a's %s alone, still team-a's", addrs, address)
			}
			if !tc.keptAddressOnly {
				got, err := b.Get(backend.WithOwnership(context.Background(), backend.OwnershipOfSpec(a)), made.ID)
				if err != nil || got.UID != "uid-a" || got.Owner != "team-a" || got.EgressAddress != address || got.Drift != "" {
					t.Fatalf("team-a's proxy after team-b's act: %+v, %v", got, err)
				}
			}
		})
	}
}
