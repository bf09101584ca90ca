package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

// The three addresses reach the state as the backend reports them, each in its own attribute, and an update
// in place plans them as what they will be: kept where the update cannot change them, unknown for the
// egress address of a kubernetes proxy, whose pods the update may move to nodes with another address (a
// kept value there would make the CLI reject the apply's result as inconsistent).
func TestAccProxy_addressesAcrossAnUpdate(t *testing.T) {
	tests := map[string]struct {
		placement        string
		egressKeptOnPlan bool
	}{
		"kvm":        {`kvm = { host = "hv1" }`, true},
		"gcp":        {`gcp = { project = "p1", zone = "europe-west1-b" }`, true},
		"kubernetes": {`kubernetes = { namespace = "proxies" }`, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			mem := newMemoryBackends()
			config := func(team string) string {
				return proxyConfig(`
  ` + tt.placement + `
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = ["api.example.com"]
  labels               = { team = "` + team + `" }
`)
			}
			addresses := func() []statecheck.StateCheck {
				return []statecheck.StateCheck{
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("internal_address"), knownvalue.StringExact("10.0.0.10")),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("egress_address"), knownvalue.StringExact("203.0.113.10")),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("ingress_address"), knownvalue.StringExact("198.51.100.10")),
				}
			}
			egressPlanned := plancheck.ExpectUnknownValue("egress_proxy.test", tfjsonpath.New("egress_address"))
			if tt.egressKeptOnPlan {
				egressPlanned = plancheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("egress_address"), knownvalue.StringExact("203.0.113.10"))
			}
			resource.Test(t, resource.TestCase{
				PreCheck:                 func() { testAccPreCheck(t) },
				ProtoV6ProviderFactories: mem.protoV6(),
				CheckDestroy:             checkDestroyed(mem),
				Steps: []resource.TestStep{
					{Config: config("net"), ConfigStateChecks: addresses()},
					{
						Config: config("platform"),
						ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
							plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
							egressPlanned,
							plancheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("ingress_address"), knownvalue.StringExact("198.51.100.10")),
							plancheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("internal_address"), knownvalue.StringExact("10.0.0.10")),
						}},
						ConfigStateChecks: addresses(),
					},
				},
			})
		})
	}
}
