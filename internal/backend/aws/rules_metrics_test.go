package aws

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// TestMetricsIngressRules: with metrics the proxy's security group admits the metrics ranges, and them alone,
// on both metrics ports beside the clients on the proxy port; Reconfigure re-ranges and moves them in place and
// takes them away when metrics are turned off, leaving the proxy port's rules as they were. Each case reads
// the group's rules back from the fake, exactly.
func TestMetricsIngressRules(t *testing.T) {
	t.Parallel()
	clients := []string{"10.0.0.0/8"}
	metrics := func(port, squidPort int, ranges ...string) *proxyconf.MetricsSettings {
		return &proxyconf.MetricsSettings{Port: port, SquidPort: squidPort, AllowedClientCIDRs: ranges}
	}
	for name, tc := range map[string]struct {
		create, reconfigure *proxyconf.MetricsSettings
		changes             bool // Reconfigure is called with reconfigure (nil: metrics off)
		want                []string
	}{
		"created with metrics, default ports": {
			create: metrics(0, 0, "192.0.2.0/24", "198.51.100.7/32"),
			want:   []string{"3128 10.0.0.0/8", "3903 192.0.2.0/24", "3903 198.51.100.7/32", "9301 192.0.2.0/24", "9301 198.51.100.7/32"},
		},
		"created without metrics": {
			want: []string{"3128 10.0.0.0/8"},
		},
		"turned on in place": {
			changes: true, reconfigure: metrics(0, 0, "192.0.2.0/24"),
			want: []string{"3128 10.0.0.0/8", "3903 192.0.2.0/24", "9301 192.0.2.0/24"},
		},
		"re-ranged in place": {
			create: metrics(0, 0, "192.0.2.0/24", "198.51.100.7/32"), changes: true, reconfigure: metrics(0, 0, "198.51.100.7/32", "203.0.113.0/24"),
			want: []string{"3128 10.0.0.0/8", "3903 198.51.100.7/32", "3903 203.0.113.0/24", "9301 198.51.100.7/32", "9301 203.0.113.0/24"},
		},
		"moved in place": {
			create: metrics(0, 0, "192.0.2.0/24"), changes: true, reconfigure: metrics(9100, 9101, "192.0.2.0/24"),
			want: []string{"3128 10.0.0.0/8", "9100 192.0.2.0/24", "9101 192.0.2.0/24"},
		},
		"turned off in place": {
			create: metrics(0, 0, "192.0.2.0/24", "198.51.100.7/32"), changes: true,
			want: []string{"3128 10.0.0.0/8"},
		},
		"the clients' range listed for metrics too": {
			create: metrics(0, 0, "10.0.0.0/8"),
			want:   []string{"3128 10.0.0.0/8", "3903 10.0.0.0/8", "9301 10.0.0.0/8"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, ec2fake.Options{})
			fake.PlayGuests() // the fake's guest reports each config applied, which Reconfigure waits for
			ctx := context.Background()
			spec := testSpec(fake, "metrics")
			spec.Proxy.AllowedClientCIDRs = clients
			spec.Proxy.LogFormat = proxyconf.LogFormatJSON
			spec.Proxy.Metrics = tc.create
			in, err := b.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if tc.changes {
				settings := spec.Proxy
				settings.Metrics = tc.reconfigure
				if _, err := b.Reconfigure(backend.WithOwnership(ctx, backend.Ownership{Owner: spec.Owner, UID: spec.UID}), in.ID, settings); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(tc.want, groupIngress(t, fake, spec.Name)); diff != "" {
				t.Errorf("the group's inbound rules (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMetricsRulesAgainstTheQuota: each metrics range is two rules of the group, one per metrics port, counted
// with the clients' against the region's quota before anything is made.
func TestMetricsRulesAgainstTheQuota(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		quota  int
		refuse bool
	}{
		"one client and two metrics ranges are five rules: over a quota of four": {quota: 4, refuse: true},
		"within a quota of five": {quota: 5},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake, b := newTest(t, ec2fake.Options{MaxRulesPerGroup: tc.quota})
			spec := testSpec(fake, "metrics-quota")
			spec.Proxy.LogFormat = proxyconf.LogFormatJSON
			spec.Proxy.Metrics = &proxyconf.MetricsSettings{AllowedClientCIDRs: []string{"192.0.2.0/24", "198.51.100.0/24"}}
			_, err := b.Create(context.Background(), spec)
			if !tc.refuse {
				if err != nil {
					t.Fatal(err)
				}
				if got := groupIngress(t, fake, spec.Name); len(got) != 5 {
					t.Errorf("rules %v, want 5", got)
				}
				return
			}
			checkRulesRefusal(t, err)
			for _, g := range fake.SecurityGroups(testRegion) {
				if g.Name == securityGroupName(spec.Name) {
					t.Errorf("the group was made before the refusal, with rules %v", g.Ingress)
				}
			}
		})
	}
}

// groupIngress lists the proxy's group's inbound rules as "port range", sorted; each rule is TCP on one port.
func groupIngress(t *testing.T, fake *ec2fake.Server, proxy string) []string {
	t.Helper()
	var out []string
	found := false
	for _, g := range fake.SecurityGroups(testRegion) {
		if g.Name != securityGroupName(proxy) {
			continue
		}
		found = true
		for _, r := range g.Ingress {
			if r.Protocol != "tcp" || r.FromPort != r.ToPort || r.PeerGroupID != "" {
				t.Errorf("rule %+v: want TCP on one port from a range", r)
			}
			out = append(out, fmt.Sprintf("%d %s", r.FromPort, r.CIDR))
		}
	}
	if !found {
		t.Fatalf("no security group %s", securityGroupName(proxy))
	}
	slices.Sort(out)
	return out
}
