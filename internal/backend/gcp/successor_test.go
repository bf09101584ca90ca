package gcp

import (
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
)

// The delete half of a replacement keeps the static address for the successor of the same name, which
// adopts it; a destroy, a name derived from the UID, or a successor of another owner never gets it.
func TestDeleteForReplacementKeepsAddressForSuccessor(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		proxyName      string // "" derives the name from the UID, as the provider does when name is unset
		forReplacement bool
		successorOwner string
		wantKept       bool
		wantAdopted    bool
		wantRefused    bool
		successorQuota bool // the successor's VM is refused for quota: the kept address must survive that too
		releaseOrphan  bool // no successor comes: deleting the listed orphan releases the address
	}{
		"replaced, no successor: orphan deleted":   {proxyName: "team-proxy", forReplacement: true, wantKept: true, releaseOrphan: true},
		"replaced, user-named: kept and adopted":   {proxyName: "team-proxy", forReplacement: true, successorOwner: "owner-a", wantKept: true, wantAdopted: true},
		"destroyed, user-named: released":          {proxyName: "team-proxy", successorOwner: "owner-a"},
		"replaced, derived name: released":         {forReplacement: true, successorOwner: "owner-a"},
		"replaced, successor of another owner: no": {proxyName: "team-proxy", forReplacement: true, successorOwner: "owner-b", wantKept: true, wantRefused: true},
		"replaced, successor refused: still kept":  {proxyName: "team-proxy", forReplacement: true, successorOwner: "owner-a", wantKept: true, successorQuota: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, computefake.Options{})
			ctx := ctxT(t)
			first := testSpec("uid-first", "us-central1-a")
			if tc.proxyName != "" {
				first.Name = tc.proxyName
			}
			optionsOf(first.Placement).StaticEgressIP = true
			inst, err := b.Create(ctx, first)
			if err != nil {
				t.Fatal(err)
			}
			ip := inst.EgressAddress
			if tc.forReplacement {
				err = b.DeleteForReplacement(ctx, inst.ID)
			} else {
				err = b.Delete(ctx, inst.ID)
			}
			if err != nil {
				t.Fatal(err)
			}
			kept := fake.Address(testProject, "us-central1", first.Name+"-ip")
			if (kept != nil) != tc.wantKept {
				t.Fatalf("address after delete = %v, want kept %v", kept, tc.wantKept)
			}
			if !tc.wantKept {
				return
			}
			if kept.GetStatus() != "RESERVED" {
				t.Fatalf("kept address is %s, want RESERVED", kept.GetStatus())
			}
			// While no successor has come, the address is the owner's orphan: listed, never lost.
			listed, err := b.ListByTag(ctx, backend.Selector{Owner: "owner-a"})
			if err != nil || len(listed) != 1 || listed[0].Name != first.Name+"-ip" || listed[0].EgressAddress != ip || listed[0].State != backend.StateStopped {
				t.Fatalf("ListByTag with the address kept = %+v, %v; want the address alone", listed, err)
			}

			if tc.releaseOrphan {
				// Garbage collection deletes the listed orphan by its id: that must release the address.
				if err := b.Delete(ctx, listed[0].ID); err != nil {
					t.Fatalf("deleting the kept address's orphan: %v", err)
				}
				if a := fake.Address(testProject, "us-central1", first.Name+"-ip"); a != nil {
					t.Fatalf("deleting the orphan left the address %v", a)
				}
				return
			}

			successor := testSpec("uid-second", "us-central1-a")
			successor.Name, successor.Owner = first.Name, tc.successorOwner
			optionsOf(successor.Placement).StaticEgressIP = true
			if tc.successorQuota {
				fake.SetQuota("us-central1", "CPUS", 1)
				if _, err := b.Create(ctx, successor); backend.ClassOf(err) != backend.ClassQuota {
					t.Fatalf("successor over quota: %v, want Quota", err)
				}
				if a := fake.Address(testProject, "us-central1", first.Name+"-ip"); a == nil || a.GetAddress() != ip {
					t.Fatalf("the refused successor gave back the kept address: %v", a)
				}
				return
			}
			got, err := b.Create(ctx, successor)
			if tc.wantRefused {
				if backend.ClassOf(err) != backend.ClassPermanent {
					t.Fatalf("successor of another owner: %v, want Permanent", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantAdopted && got.EgressAddress != ip {
				t.Fatalf("successor egress %s, want the kept %s", got.EgressAddress, ip)
			}
			if err := b.Delete(ctx, got.ID); err != nil {
				t.Fatal(err)
			}
			if fake.Address(testProject, "us-central1", first.Name+"-ip") != nil {
				t.Fatal("destroying the successor left the adopted address")
			}
		})
	}
}
