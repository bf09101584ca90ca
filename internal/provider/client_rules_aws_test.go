package provider

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// An aws proxy's client ranges are rules of its security group, at most 60 of each family by VPC's default
// quota: a plan with more fails on allowed_client_cidrs before anything is asked of AWS (issue 35, item 9);
// 60 plan.
func TestAccProxyAWS_clientRangesPerGroup(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	config := func(ipv4, ipv6 int) string {
		var cidrs []string
		for i := range ipv4 {
			cidrs = append(cidrs, fmt.Sprintf("%q", fmt.Sprintf("10.%d.%d.0/24", i/250, i%250)))
		}
		for i := range ipv6 {
			cidrs = append(cidrs, fmt.Sprintf("%q", fmt.Sprintf("fd00:%x::/64", i+1)))
		}
		return awsConfig(t, fake, "", fmt.Sprintf(`
resource "egress_proxy" "test" {
  name = "egress-many"
  aws = {
    subnet_id            = %q
    iam_instance_profile = "egress-proxy"
  }
  allowed_client_cidrs = [%s]
  allowed_destinations = [".example.com"]
}
`, fake.Subnets(awsTestRegion)[0].ID, strings.Join(cidrs, ", ")))
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		Steps: []resource.TestStep{
			{Config: config(61, 0), PlanOnly: true, ExpectError: regexp.MustCompile(`(?s)allowed_client_cidrs.*61 IPv4 and 0 IPv6 ranges.*60 rules`)},
			{Config: config(1, 61), PlanOnly: true, ExpectError: regexp.MustCompile(`(?s)allowed_client_cidrs.*1 IPv4 and 61 IPv6 ranges`)},
			{Config: config(60, 60), PlanOnly: true, ExpectNonEmptyPlan: true},
		},
	})
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("%d requests reached AWS during the plans, want none", n)
	}
}

// An aws proxy's agent installs no client CA yet: a plan that sets one fails on tls.client_ca_pem before
// anything is asked of AWS, rather than at apply; the same proxy without it plans.
func TestAccProxyAWS_clientCARefusedAtPlan(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	ca := testutil.NewClientCA(t, "clients")
	config := func(clientCA string) string {
		return awsConfig(t, fake, "", fmt.Sprintf(`
resource "egress_proxy" "test" {
  name = "egress-client-ca"
  aws = {
    subnet_id            = %q
    iam_instance_profile = "egress-proxy"
  }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]
  tls = {
    certificate_pem            = %q
    private_key_pem_wo         = %q
    private_key_pem_wo_version = 1
    %s
  }
}
`, fake.Subnets(awsTestRegion)[0].ID, cert, key, clientCA))
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		Steps: []resource.TestStep{
			{Config: config("client_ca_pem = " + strconv.Quote(ca.PEM)), PlanOnly: true,
				ExpectError: regexp.MustCompile(`(?s)Client certificates are not supported on aws yet.*tls.client_ca_pem is set`)},
			{Config: config(""), PlanOnly: true, ExpectNonEmptyPlan: true},
		},
	})
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("%d requests reached AWS during the plans, want none", n)
	}
}
