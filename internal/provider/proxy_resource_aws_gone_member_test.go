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

// TestAccProxyAWS_goneMemberMadeAgainInPlace: two instances of an aws proxy of three, the first (which holds
// the proxy's name and parameters) and the second, are terminated behind Terraform's back, through EC2. The
// refresh reads the proxy Degraded through its third, the plan updates it in place (no replacement: its load
// balancer, and so proxy_url and internal_address, stay, and so does created_at), the apply launches one
// instance in each lost member's subnet, registered with the load balancer's target group, and the plan after
// is empty.
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
	sameCreated := statecheck.CompareValue(compare.ValuesSame())
	unchanged := func() []statecheck.StateCheck {
		return []statecheck.StateCheck{
			sameID.AddStateValue("egress_proxy.test", root("id")),
			sameURL.AddStateValue("egress_proxy.test", root("proxy_url")),
			sameAddress.AddStateValue("egress_proxy.test", root("internal_address")),
			sameCreated.AddStateValue("egress_proxy.test", root("created_at")),
		}
	}
	var lost []string
	var kept string
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
					lost = []string{a["members.0.name"], a["members.1.name"]}
					kept = a["members.2.name"]
					return nil
				},
			},
			{
				PreConfig: func() {
					_, err := ec2.NewFromConfig(fake.AdminAWSConfig(awsTestRegion)).TerminateInstances(context.Background(),
						&ec2.TerminateInstancesInput{InstanceIds: lost})
					if err != nil {
						t.Fatalf("terminating %s behind Terraform's back: %v", lost, err)
					}
				},
				RefreshState:       true,
				ExpectNonEmptyPlan: true, // the update that makes the members again
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources["egress_proxy.test"].Primary.Attributes
					if a["state"] != "Degraded" || a["members.0.healthy"] != "false" || a["members.1.healthy"] != "false" || a["members.2.healthy"] != "true" {
						return fmt.Errorf("after the refresh: state %q, members healthy %s, %s, %s; want Degraded, the first two not",
							a["state"], a["members.0.healthy"], a["members.1.healthy"], a["members.2.healthy"])
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
					for k := range lost {
						again := a[fmt.Sprintf("members.%d.name", k)]
						if again == lost[k] {
							return fmt.Errorf("member %d after the apply is %s, the instance terminated", k, again)
						}
						in, ok := fake.Instance(awsTestRegion, again)
						if !ok || in.State != ec2fake.StateRunning || in.SubnetID != subnets[k].ID {
							return fmt.Errorf("member %d made again is %+v, want running in %s", k, in, subnets[k].ID)
						}
					}
					if a["members.2.name"] != kept {
						return fmt.Errorf("member 2 after the apply is %s, want %s as before", a["members.2.name"], kept)
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
