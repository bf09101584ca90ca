package provider

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	awsguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// An aws proxy serves Prometheus metrics (issue 40, item 3): metrics on apply, with the metrics ranges
// alone on the two metrics ports of the group, the ports in the guest's config and metrics_url at the
// instance's private address; moved to another port and re-ranged in place, on the same instance; turned off
// in place, the rules and the URLs gone. Each apply is followed by an empty plan.
func TestAccProxyAWS_metrics(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	fake.PlayGuests()
	config := awsMetricsConfig(t, fake)
	clients := []string{"10.0.0.0/8"}
	on := config(clients, `metrics = { allowed_client_cidrs = ["192.0.2.0/24"] }`)
	moved := config(clients, `metrics = { allowed_client_cidrs = ["192.0.2.0/24", "198.51.100.7/32"], port = 9100 }`)
	off := config(clients, "")
	var instance string
	holds := func(rules []string, ports *awsguest.MetricsPorts) resource.TestCheckFunc {
		return func(s *terraform.State) error {
			live := liveInstances(fake)
			if len(live) != 1 || instance != "" && live[0].ID != instance {
				return fmt.Errorf("instances %v, want the one proxy (%s)", live, instance)
			}
			instance = live[0].ID
			var got []string
			for _, id := range live[0].SecurityGroupIDs {
				g, _ := fake.SecurityGroup(awsTestRegion, id)
				for _, r := range g.Ingress {
					got = append(got, fmt.Sprintf("%d %s", r.FromPort, r.CIDR))
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, rules) {
				return fmt.Errorf("the group's inbound rules are %q, want %q", got, rules)
			}
			c, err := awsGuestConfig(fake, "egress-metrics")
			if err != nil {
				return err
			}
			if (c.Metrics == nil) != (ports == nil) || ports != nil && *c.Metrics != *ports {
				return fmt.Errorf("the guest's config carries metrics %+v, want %+v", c.Metrics, ports)
			}
			attrs := s.RootModule().Resources["egress_proxy.test"].Primary.Attributes
			wantURL, wantSquid := "", ""
			if ports != nil {
				wantURL = fmt.Sprintf("http://%s:%d/metrics", live[0].PrivateIP, ports.Port)
				wantSquid = fmt.Sprintf("http://%s:%d/metrics", live[0].PrivateIP, ports.SquidPort)
			}
			if attrs["metrics_url"] != wantURL || attrs["squid_metrics_url"] != wantSquid {
				return fmt.Errorf("metrics_url %q and squid_metrics_url %q, want %q and %q", attrs["metrics_url"], attrs["squid_metrics_url"], wantURL, wantSquid)
			}
			return nil
		}
	}
	update := resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate)}}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		Steps: []resource.TestStep{
			{Config: on, Check: holds([]string{"3128 10.0.0.0/8", "3903 192.0.2.0/24", "9301 192.0.2.0/24"},
				&awsguest.MetricsPorts{Port: 3903, SquidPort: 9301, ManagerPort: proxyconf.DefaultManagerPort})},
			{Config: on, PlanOnly: true},
			{Config: moved, ConfigPlanChecks: update, Check: holds(
				[]string{"3128 10.0.0.0/8", "9100 192.0.2.0/24", "9100 198.51.100.7/32", "9301 192.0.2.0/24", "9301 198.51.100.7/32"},
				&awsguest.MetricsPorts{Port: 9100, SquidPort: 9301, ManagerPort: proxyconf.DefaultManagerPort})},
			{Config: moved, PlanOnly: true},
			{Config: off, ConfigPlanChecks: update, Check: holds([]string{"3128 10.0.0.0/8"}, nil)},
			{Config: off, PlanOnly: true},
		},
	})
}

// awsMetricsConfig is the configuration of one aws proxy with clients and the metrics attribute metrics.
func awsMetricsConfig(t *testing.T, fake *ec2fake.Server) func(clients []string, metrics string) string {
	return func(clients []string, metrics string) string {
		return awsConfig(t, fake, "", fmt.Sprintf(`
resource "egress_proxy" "test" {
  name = "egress-metrics"
  aws = {
    subnet_id            = %q
    iam_instance_profile = "egress-proxy"
  }
  allowed_client_cidrs = [%s]
  allowed_destinations = [".example.com"]
  log_format           = "json"
  %s
}
`, fake.Subnets(awsTestRegion)[0].ID, `"`+strings.Join(clients, `", "`)+`"`, metrics))
	}
}

// Each metrics range of an aws proxy is two inbound rules of its security group, one on each metrics port:
// 59 client ranges and one metrics range need 61 rules of the default 60, and the plan fails on
// metrics.allowed_client_cidrs before anything is asked of AWS; 58 and one plan.
func TestAccProxyAWS_metricsRulesPerGroup(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	config := awsMetricsConfig(t, fake)
	many := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("10.%d.0.0/16", i))
		}
		return out
	}
	metrics := `metrics = { allowed_client_cidrs = ["192.0.2.0/24"] }`
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		Steps: []resource.TestStep{
			{Config: config(many(59), metrics), PlanOnly: true,
				ExpectError: regexp.MustCompile(`(?s)metrics\.allowed_client_cidrs\s+need\s+61\s+IPv4\s+and\s+0\s+IPv6\s+inbound\s+rules.*two\s+per\s+metrics\s+range`)},
			{Config: config(many(58), metrics), PlanOnly: true, ExpectNonEmptyPlan: true},
		},
	})
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("%d requests reached AWS during the plans, want none", n)
	}
}
