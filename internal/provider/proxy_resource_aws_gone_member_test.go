package provider

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// TestAccProxyAWS_goneMemberMadeAgainInPlace: one instance of an aws proxy of three is terminated behind
// Terraform's back, through EC2. The refresh reads it gone, the plan updates the proxy in place (no
// replacement: its load balancer, and so proxy_url and internal_address, stay), the apply launches one instance
// in that member's subnet, registered with the load balancer's target group, and the plan after is empty.
func TestAccProxyAWS_goneMemberMadeAgainInPlace(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	fake.PlayGuests()
	const name = "egress-acc-gone"
	subnets := fake.Subnets(awsTestRegion)
	config := awsThreeInstancesConfig(t, fake, name, "")
	root := func(attr string) tfjsonpath.Path { return tfjsonpath.New(attr) }
	sameID := statecheck.CompareValue(compare.ValuesSame())
	sameURL := statecheck.CompareValue(compare.ValuesSame())
	sameAddress := statecheck.CompareValue(compare.ValuesSame())
	unchanged := func() []statecheck.StateCheck {
		return []statecheck.StateCheck{
			sameID.AddStateValue("egress_proxy.test", root("id")),
			sameURL.AddStateValue("egress_proxy.test", root("proxy_url")),
			sameAddress.AddStateValue("egress_proxy.test", root("internal_address")),
		}
	}
	var lost string
	var kept []string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		CheckDestroy: func(*terraform.State) error {
			if n, lbs, tgs := len(liveInstances(fake)), fake.LoadBalancers(awsTestRegion), fake.TargetGroups(awsTestRegion); n != 0 || len(lbs)+len(tgs) != 0 {
				return fmt.Errorf("after destroy: %d instances, load balancers %v, target groups %v", n, lbs, tgs)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config:            config,
				ConfigStateChecks: append(threeInstancesRead("aws"), unchanged()...),
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources["egress_proxy.test"].Primary.Attributes
					lost = a["members.1.name"]
					kept = []string{a["members.0.name"], a["members.2.name"]}
					return nil
				},
			},
			{
				PreConfig: func() {
					_, err := ec2.NewFromConfig(fake.AdminAWSConfig(awsTestRegion)).TerminateInstances(context.Background(),
						&ec2.TerminateInstancesInput{InstanceIds: []string{lost}})
					if err != nil {
						t.Fatalf("terminating %s behind Terraform's back: %v", lost, err)
					}
				},
				RefreshState:       true,
				ExpectNonEmptyPlan: true, // the update that makes the member again
				Check: func(s *terraform.State) error {
					if st := s.RootModule().Resources["egress_proxy.test"].Primary.Attributes["state"]; st != "Degraded" {
						return fmt.Errorf("state after the refresh %q, want Degraded", st)
					}
					return nil
				},
			},
			{
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
					plancheck.ExpectUnknownValue("egress_proxy.test", root("members")),
				}},
				ConfigStateChecks: append(threeInstancesRead("aws"), unchanged()...),
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources["egress_proxy.test"].Primary.Attributes
					again := a["members.1.name"]
					if again == lost || a["members.0.name"] != kept[0] || a["members.2.name"] != kept[1] {
						return fmt.Errorf("members after the apply %s, %s, %s; want %s, a new instance in place of %s, %s",
							a["members.0.name"], again, a["members.2.name"], kept[0], lost, kept[1])
					}
					in, ok := fake.Instance(awsTestRegion, again)
					if !ok || in.State != ec2fake.StateRunning || in.SubnetID != subnets[1].ID {
						return fmt.Errorf("member 1 made again is %+v, want running in %s", in, subnets[1].ID)
					}
					if n := len(liveInstances(fake)); n != 3 {
						return fmt.Errorf("%d instances live after the apply, want 3", n)
					}
					return nil
				},
			},
			{
				// Made again, the member is no longer gone: nothing more to do.
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectEmptyPlan(),
				}},
			},
		},
	})
}
