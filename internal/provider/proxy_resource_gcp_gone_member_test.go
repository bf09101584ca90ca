package provider

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

// TestAccProxyGCP_goneMemberMadeAgainInPlace: one VM of a gcp proxy of three is deleted behind Terraform's back
// on the Compute fake. The refresh reads it gone, the plan updates the proxy in place (no replacement: the
// forwarding rule and its address stay), the apply makes that one VM again under its name in its zone and
// adds it to its zone's group, and the plan after is empty.
func TestAccProxyGCP_goneMemberMadeAgainInPlace(t *testing.T) {
	fake := gcpFake(t)
	gcpGuests(t, fake)
	const name, lostZone = "egress-acc-gone", "us-central1-c"
	lost := name + "-3"
	config := gcpThreeInstancesConfig(fake, name)
	sameID := statecheck.CompareValue(compare.ValuesSame())
	sameAddress := statecheck.CompareValue(compare.ValuesSame())
	unchanged := func() []statecheck.StateCheck {
		return []statecheck.StateCheck{
			sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id")),
			sameAddress.AddStateValue("egress_proxy.test", tfjsonpath.New("internal_address")),
		}
	}
	var address string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		CheckDestroy:             gcpNothingLeft(fake),
		Steps: []resource.TestStep{
			{
				Config:            config,
				ConfigStateChecks: append(threeInstancesRead("gcp"), unchanged()...),
				Check: func(s *terraform.State) error {
					address = s.RootModule().Resources["egress_proxy.test"].Primary.Attributes["internal_address"]
					if fake.Instance(gcpTestProject, lostZone, lost) == nil || address == "" {
						return fmt.Errorf("no VM %s in %s, or no internal address (%q)", lost, lostZone, address)
					}
					return nil
				},
			},
			{
				PreConfig: func() {
					if !fake.DeleteInstance(gcpTestProject, lostZone, lost) {
						t.Fatalf("no VM %s in %s to delete", lost, lostZone)
					}
				},
				RefreshState:       true,
				ExpectNonEmptyPlan: true, // the update that makes the member again
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources["egress_proxy.test"].Primary.Attributes
					if a["state"] != "Degraded" || a["members.2.healthy"] != "false" || a["members.2.name"] != lost {
						return fmt.Errorf("after the refresh: state %s, member 3 %s healthy %s; want Degraded, %s unhealthy", a["state"], a["members.2.name"], a["members.2.healthy"], lost)
					}
					return nil
				},
			},
			{
				PreConfig: fake.ResetLog,
				Config:    config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
					plancheck.ExpectUnknownValue("egress_proxy.test", tfjsonpath.New("members")),
				}},
				ConfigStateChecks: append(threeInstancesRead("gcp"), unchanged()...),
				Check: func(s *terraform.State) error {
					vm := fake.Instance(gcpTestProject, lostZone, lost)
					if vm == nil {
						return fmt.Errorf("after the apply there is no VM %s in %s", lost, lostZone)
					}
					if n := fake.Count(http.MethodPost, `/instances$`); n != 1 {
						return fmt.Errorf("the apply inserted %d VMs, want 1 (%s)", n, lost)
					}
					if n := fake.Count(http.MethodDelete, ``); n != 0 {
						return fmt.Errorf("the apply deleted %d objects, want none", n)
					}
					if _, held := fake.InstanceGroup(gcpTestProject, lostZone, name); len(held) != 1 || !strings.HasSuffix(held[0], "/instances/"+lost) {
						return fmt.Errorf("group %s in %s holds %v, want %s", name, lostZone, held, lost)
					}
					if fr := fake.ForwardingRule(gcpTestProject, "us-central1", name); fr.GetIPAddress() != address {
						return fmt.Errorf("forwarding rule at %s after the apply, want %s", fr.GetIPAddress(), address)
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
