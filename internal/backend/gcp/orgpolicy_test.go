package gcp

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
)

// Organization policies refuse what no retry can bring: each refusal is Permanent at once (not retried until
// the timeout, as a 412 of a stale fingerprint is), names the constraint, and its advice says what it stops
// and what to do. A create refused gives back its static address.
func TestOrganizationPolicies(t *testing.T) {
	t.Parallel()
	const zone = "us-central1-a"
	tests := map[string]struct {
		policy       func(f *computefake.Server, name string)
		waitForProxy bool
		reconfigure  bool // the policy comes after the create, and a change of rules meets it
		wantAdvice   []string
		wantCreated  bool
	}{
		"no external IP for any VM": {
			policy:     func(f *computefake.Server, _ string) { f.SetVMExternalIPAccess(testProject, []string{}) },
			wantAdvice: []string{"constraints/compute.vmExternalIpAccess", "allowed values"},
		},
		"external IP for other VMs": {
			policy: func(f *computefake.Server, _ string) {
				f.SetVMExternalIPAccess(testProject, []string{"projects/" + testProject + "/zones/" + zone + "/instances/other"})
			},
			wantAdvice: []string{"constraints/compute.vmExternalIpAccess"},
		},
		"external IP for this VM": {
			policy: func(f *computefake.Server, name string) {
				f.SetVMExternalIPAccess(testProject, []string{"projects/" + testProject + "/zones/" + zone + "/instances/" + name})
			},
			wantCreated: true,
		},
		"guest attributes off, waiting for the proxy": {
			policy:       func(f *computefake.Server, _ string) { f.DisableGuestAttributesAccess(testProject, true) },
			waitForProxy: true,
			wantAdvice:   []string{"constraints/compute.disableGuestAttributesAccess", "wait_for_proxy = false"},
			wantCreated:  true,
		},
		"guest attributes off, not waiting": {
			policy:      func(f *computefake.Server, _ string) { f.DisableGuestAttributesAccess(testProject, true) },
			wantCreated: true,
		},
		"guest attributes off, a change of rules": {
			policy:      func(f *computefake.Server, _ string) { f.DisableGuestAttributesAccess(testProject, true) },
			reconfigure: true,
			wantAdvice:  []string{"constraints/compute.disableGuestAttributesAccess", "lift"},
			wantCreated: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b, _ := newTestWithGuest(t)
			// Bounds the test should a refusal be retried: the refusals come at once.
			ctx, cancel := context.WithTimeout(ctxT(t), 30*time.Second)
			defer cancel()
			spec := testSpec("uid-policy", zone)
			spec.Placement.Options = &Options{StaticEgressIP: true, WaitForProxy: tc.waitForProxy}
			fake.MetadataInstance(testProject, zone, spec.Name)
			if !tc.reconfigure {
				tc.policy(fake, spec.Name)
			}
			inst, err := b.Create(ctx, spec)
			if tc.reconfigure {
				if err != nil {
					t.Fatal(err)
				}
				tc.policy(fake, spec.Name)
				changed := spec.Proxy
				changed.AllowedDestinations = []string{".example.org"}
				_, err = b.Reconfigure(ctx, inst.ID, changed)
			}
			if len(tc.wantAdvice) == 0 {
				if err != nil {
					t.Fatalf("= %v, want success", err)
				}
			} else {
				if backend.ClassOf(err) != backend.ClassPermanent {
					t.Fatalf("= %v (%s), want Permanent", err, backend.ClassOf(err))
				}
				for _, w := range tc.wantAdvice {
					if !strings.Contains(backend.AdviceOf(err)+" "+err.Error(), w) {
						t.Errorf("error %q with advice %q: want it to say %q", err, backend.AdviceOf(err), w)
					}
				}
			}
			created := fake.Instance(testProject, zone, spec.Name) != nil
			if created != tc.wantCreated {
				t.Fatalf("instance made: %v, want %v", created, tc.wantCreated)
			}
			if addr := fake.Address(testProject, "us-central1", reservedAddressName(spec.Name)); !created && addr != nil {
				t.Error("a refused create left its reserved address")
			}
		})
	}
}
