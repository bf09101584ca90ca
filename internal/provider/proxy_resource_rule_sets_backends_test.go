package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// On the aws and gcp backends, against their fakes: a proxy applied with rule sets and a deny list takes a
// change of a rule set, of its mode and of the deny list in place (the same instance, its configuration
// rewritten and applied by the guest before the apply returns), and plans nothing afterwards.
func TestAccProxy_ruleSetsInPlaceOnCloudBackends(t *testing.T) {
	policy := func(mode, destination, denied string) string {
		return fmt.Sprintf(`
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]
  denied_destinations  = [%q]
  rule_sets = [
    { name = "builds", clients = { source_cidrs = ["10.9.0.0/16"] }, destinations = [%q], mode = %q },
  ]
`, denied, destination, mode)
	}
	tests := map[string]func(t *testing.T) (config func(policy string) string, squidConf func() (string, error), instances func() int){
		"aws": func(t *testing.T) (func(string) string, func() (string, error), func() int) {
			fake := awsFake(t, ec2fake.Options{})
			fake.PlayGuests()
			config := func(policy string) string {
				return awsConfig(t, fake, "", fmt.Sprintf(`
resource "egress_proxy" "test" {
  name = "egress-acc"
  aws  = { subnet_id = %q, iam_instance_profile = "egress-proxy" }
%s
}
`, fake.Subnets(awsTestRegion)[0].ID, policy))
			}
			squidConf := func() (string, error) {
				c, err := awsGuestConfig(fake, "egress-acc")
				return c.SquidConf, err
			}
			return config, squidConf, func() int { return len(liveInstances(fake)) }
		},
		"gcp": func(t *testing.T) (func(string) string, func() (string, error), func() int) {
			fake := gcpFake(t)
			gcpGuests(t, fake)
			config := func(policy string) string {
				return gcpConfig(fake, "acc-token", `  name = "egress-acc"
  gcp  = {}
`+policy)
			}
			squidConf := func() (string, error) {
				for _, item := range fake.Instance(gcpTestProject, "us-central1-a", "egress-acc").GetMetadata().GetItems() {
					if item.GetKey() == gcpguest.MetadataSquidConf {
						return item.GetValue(), nil
					}
				}
				return "", fmt.Errorf("the VM's metadata holds no squid.conf")
			}
			return config, squidConf, func() int { return len(fake.Instances()) }
		},
	}
	for name, setUp := range tests {
		t.Run(name, func(t *testing.T) {
			config, squidConf, instances := setUp(t)
			sameID := statecheck.CompareValue(compare.ValuesSame())
			steps := []struct{ mode, destination, denied string }{
				{"report", "api.github.com", "bad.example.com"},
				{"report", ".github.com", "bad.example.com"},    // a rule set's destinations
				{"enforce", ".github.com", "bad.example.com"},   // its mode
				{"enforce", ".github.com", "worse.example.com"}, // the deny list
			}
			var testSteps []resource.TestStep
			for i, s := range steps {
				step := resource.TestStep{
					Config:            config(policy(s.mode, s.destination, s.denied)),
					ConfigStateChecks: []statecheck.StateCheck{sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id"))},
					ConfigPlanChecks:  resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
					Check: func(*terraform.State) error {
						if n := instances(); n != 1 {
							return fmt.Errorf("%d instances, want the one proxy", n)
						}
						conf, err := squidConf()
						if err != nil {
							return err
						}
						for _, want := range []string{"builds", s.destination, s.denied} {
							if !strings.Contains(conf, want) {
								return fmt.Errorf("the squid.conf the guest reads lacks %q", want)
							}
						}
						return nil
					},
				}
				if i > 0 {
					step.ConfigPlanChecks.PreApply = []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate)}
				}
				testSteps = append(testSteps, step)
			}
			resource.Test(t, resource.TestCase{
				PreCheck:                 func() { testAccPreCheck(t) },
				ProtoV6ProviderFactories: gcpProviderFactories(),
				Steps:                    testSteps,
			})
		})
	}
}
