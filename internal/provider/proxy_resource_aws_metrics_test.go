package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

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
// metrics.allowed_client_cidrs before anything is asked of AWS (beside the refusal of metrics on aws, until
// the provider serves them there).
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
		},
	})
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("%d requests reached AWS during the plans, want none", n)
	}
}
