package provider

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	awsguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"

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

// An aws proxy verifies client certificates (issue 39, item 5): a proxy with a client CA and a rule set by
// certificate subject applies, its guest's config carries the CA, and the next plan is empty; another CA
// with a CRL is an update in place, on the same instance, and again plans empty.
func TestAccProxyAWS_clientCA(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	fake.PlayGuests()
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	caA, caB := testutil.NewClientCA(t, "clients A"), testutil.NewClientCA(t, "clients B")
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
  rule_sets = [
    { name = "payments", clients = { certificate_subjects = ["payments"] }, destinations = ["pay.example.com"] },
  ]
}
`, fake.Subnets(awsTestRegion)[0].ID, cert, key, clientCA))
	}
	withA := config("client_ca_pem = " + strconv.Quote(caA.PEM))
	withB := config("client_ca_pem = " + strconv.Quote(caB.PEM) + "\n    client_crl_pem = " + strconv.Quote(caB.CRL(t, 1)))
	var instance string
	guestHolds := func(ca string, sameInstance bool) resource.TestCheckFunc {
		return func(*terraform.State) error {
			live := liveInstances(fake)
			if len(live) != 1 || sameInstance && live[0].ID != instance {
				return fmt.Errorf("instances %v, want the one proxy (%s)", live, instance)
			}
			instance = live[0].ID
			if c := guestConfig(t, fake, "egress-client-ca"); c.ClientCA != ca || !strings.Contains(c.SquidConf, "clientca=") {
				return fmt.Errorf("the guest's config carries client CA %.60q and no clientca= in squid.conf", c.ClientCA)
			}
			return nil
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		Steps: []resource.TestStep{
			{Config: withA, Check: guestHolds(caA.PEM, false)},
			{Config: withA, PlanOnly: true},
			{
				Config: withB, Check: guestHolds(caB.PEM, true),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
				}},
			},
			{Config: withB, PlanOnly: true},
		},
	})
}

// guestConfig is the proxy's config as its guest reads it from the fake's parameters.
func guestConfig(t *testing.T, fake *ec2fake.Server, name string) awsguest.Config {
	t.Helper()
	values := map[string]string{}
	for _, p := range fake.Parameters(awsTestRegion) {
		values[p.Name] = p.Value
	}
	c, _, err := awsguest.LoadConfig(values[awsguest.ParameterPath(name, awsguest.ParameterConfig)], func(i int) (string, bool) {
		v, ok := values[awsguest.ParameterPath(name, awsguest.PartName(awsguest.ParameterConfig, i))]
		return v, ok
	})
	if err != nil {
		t.Fatalf("the guest's config: %v", err)
	}
	return c
}
