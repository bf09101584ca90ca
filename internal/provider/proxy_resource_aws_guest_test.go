package provider

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"

	awsguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// awsWaitedProxy is a proxy with wait_for_proxy, whose updates wait at most update for the guest.
func awsWaitedProxy(fake *ec2fake.Server, destination, update string) string {
	return fmt.Sprintf(`
resource "egress_proxy" "test" {
  name = "egress-guest"
  aws = {
    subnet_id            = %q
    iam_instance_profile = "egress-proxy"
    wait_for_proxy       = true
  }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [%q]
  timeouts {
    update = %q
  }
}
`, fake.Subnets(awsTestRegion)[0].ID, destination, update)
}

// Through the provider, wait_for_proxy and an update wait for the guest (issue 35, items 13 and 1): a guest
// that refuses the new rules fails the apply at once with its reason, a silent one at the update timeout,
// and the next plan shows the update that writes the rules again, as it does when someone rewrote the
// config parameter behind Terraform's back.
func TestAccProxyAWS_guestWait(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	fake.PlayGuests()
	const name = "egress-guest"
	update := resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
		plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
	}}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		Steps: []resource.TestStep{
			{Config: awsConfig(t, fake, "", awsWaitedProxy(fake, "a.example", "10m"))},
			{
				PreConfig:   func() { fake.SetGuest(awsTestRegion, name, ec2fake.GuestRefuses) },
				Config:      awsConfig(t, fake, "", awsWaitedProxy(fake, "b.example", "10m")),
				ExpectError: regexp.MustCompile(`(?s)guest\s+refused\s+config.*` + strings.ReplaceAll(ec2fake.GuestRefusal, " ", `\s+`)),
			},
			{
				// The refused rules read back as drift: the plan writes them again.
				Config:             awsConfig(t, fake, "", awsWaitedProxy(fake, "b.example", "10m")),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
			{
				// A guest that takes them now ends the apply, and the plan after it is empty.
				PreConfig: func() { fake.SetGuest(awsTestRegion, name, ec2fake.GuestApplies) },
				Config:    awsConfig(t, fake, "", awsWaitedProxy(fake, "b.example", "10m")),
			},
			{
				PreConfig: func() {
					fake.SetParameter(awsTestRegion, awsguest.ParameterPath(name, awsguest.ParameterConfig), "",
						`{"config_id":"x","squid_conf":"url_rewrite_program /bin/sh\n"}`)
				},
				Config:           awsConfig(t, fake, "", awsWaitedProxy(fake, "b.example", "10m")),
				ConfigPlanChecks: update,
			},
			{
				PreConfig: func() { fake.SetGuest(awsTestRegion, name, ec2fake.GuestSilent) },
				// Long enough for the update to write the parameters on a loaded machine under the race detector (5 s
				// was not, once: the write itself timed out), so that what times out is the wait.
				Config:      awsConfig(t, fake, "", awsWaitedProxy(fake, "c.example", "30s")),
				ExpectError: regexp.MustCompile(`(?s)waiting\s+for\s+the\s+guest\s+to\s+apply\s+config`),
			},
		},
	})
}
