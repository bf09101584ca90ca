package aws

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// TestClientRulesAgainstTheQuota: each client range is one rule of the proxy's security group, under the
// region's quota of rules per group (issue 35, item 9). Create and Reconfigure read the quota from Service
// Quotas and refuse, before anything is made or changed, clients that do not fit; where the quota cannot be
// read, EC2's own refusal (RulesPerSecurityGroupLimitExceeded) is Quota with the same advice.
func TestClientRulesAgainstTheQuota(t *testing.T) {
	t.Parallel()
	ranges := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("10.%d.0.0/16", i))
		}
		return out
	}
	for name, tc := range map[string]struct {
		clients     int
		quota       int
		denyQuotas  bool
		reconfigure bool
		wantMade    bool // the group exists after the refusal (EC2 refused its rules)
	}{
		"create, the quota read":         {clients: 4, quota: 3},
		"create, the quota not readable": {clients: 4, quota: 3, denyQuotas: true, wantMade: true},
		"reconfigure, the quota read":    {clients: 4, quota: 3, reconfigure: true, wantMade: true},
		"create, within a raised quota":  {clients: 70, quota: 100},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, ec2fake.Options{MaxRulesPerGroup: tc.quota})
			if tc.denyQuotas {
				fake.Deny("servicequotas:GetServiceQuota")
			}
			ctx := context.Background()
			spec := testSpec(fake, "many")
			if tc.reconfigure {
				in, err := b.Create(ctx, spec)
				if err != nil {
					t.Fatal(err)
				}
				settings := spec.Proxy
				settings.AllowedClientCIDRs = ranges(tc.clients)
				_, err = b.Reconfigure(backend.WithOwnership(ctx, backend.Ownership{Owner: spec.Owner, UID: spec.UID}), in.ID, settings)
				checkRulesRefusal(t, err)
				g := fake.SecurityGroups(testRegion)
				for _, grp := range g {
					if grp.Name == securityGroupName(spec.Name) && len(grp.Ingress) != 1 {
						t.Errorf("after the refused reconfigure the group has %d rules, want the one it had", len(grp.Ingress))
					}
				}
				return
			}
			spec.Proxy.AllowedClientCIDRs = ranges(tc.clients)
			_, err := b.Create(ctx, spec)
			if tc.clients <= tc.quota {
				if err != nil {
					t.Fatalf("Create with %d ranges under a quota of %d: %v", tc.clients, tc.quota, err)
				}
				return
			}
			checkRulesRefusal(t, err)
			made := false
			for _, g := range fake.SecurityGroups(testRegion) {
				made = made || g.Name == securityGroupName(spec.Name)
			}
			if made != tc.wantMade {
				t.Errorf("the proxy's group exists after the refusal: %v, want %v", made, tc.wantMade)
			}
		})
	}
}

func checkRulesRefusal(t *testing.T, err error) {
	t.Helper()
	if backend.ClassOf(err) != backend.ClassQuota || !strings.Contains(backend.AdviceOf(err), "allowed_client_cidrs") {
		t.Fatalf("= %v (class %s, advice %q), want Quota with advice on allowed_client_cidrs", err, backend.ClassOf(err), backend.AdviceOf(err))
	}
}
