package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// An aws proxy whose configuration no SSM parameter can hold fails the plan on allowed_destinations, before
// anything is asked of AWS (issue 35, item 7: before, the schema's 500 destinations planned and create failed
// with ValidationException); a few destinations plan.
func TestAccProxyAWS_parameterSizesAtPlan(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	config := func(n int) string {
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("%q", fmt.Sprintf("api-%03d.partner-service.example.com", i)))
		}
		return awsConfig(t, fake, "", fmt.Sprintf(`
resource "egress_proxy" "test" {
  name = "egress-long"
  aws = {
    subnet_id            = %q
    iam_instance_profile = "egress-proxy"
  }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [%s]
}
`, fake.Subnets(awsTestRegion)[0].ID, strings.Join(names, ", ")))
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		Steps: []resource.TestStep{
			{Config: config(200), PlanOnly: true, ExpectError: regexp.MustCompile(`(?s)allowed_destinations.*config parameter would hold \d+ characters.*8192`)},
			{Config: config(10), PlanOnly: true, ExpectNonEmptyPlan: true},
		},
	})
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("%d requests reached AWS during the plans, want none", n)
	}
}
