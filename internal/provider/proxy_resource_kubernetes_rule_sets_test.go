package provider

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

// On a real cluster, with real requests through the proxy's Service: a rule set in report mode lets through
// what it does not list, the same rule set switched to enforce refuses it, and the deny list refuses what the
// rule set allows; each change in place (same id, same Service address), each followed by an empty plan.
func TestAccProxyKubernetes_ruleSetsInPlace(t *testing.T) {
	env := k8sAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	config := func(mode, denied string) string {
		return k8sProviderBlock(t, env, owner, "default") + fmt.Sprintf(`
resource "egress_proxy" "k8s" {
  kubernetes            = { cluster = "test", namespace = "default" }
  allowed_client_cidrs  = ["10.244.0.0/16", "172.31.255.0/24"]
  allowed_destinations  = []
  allowed_private_cidrs = [%q]
  denied_destinations   = [%s]
  rule_sets = [
    { name = "cluster", clients = { source_cidrs = ["10.244.0.0/16", "172.31.255.0/24"] }, destinations = [%q], ports = [80], mode = %q },
  ]
}
`, k8sOriginCIDR, denied, k8sOther, mode)
	}
	sameID := statecheck.CompareValue(compare.ValuesSame())
	var address string
	steps := []struct {
		mode, denied  string
		origin, other string // the status of a request for each
	}{
		{"report", "", "200", "200"},                           // outside the rule set, but only reported
		{"enforce", "", "403", "200"},                          // the same request refused
		{"enforce", fmt.Sprintf("%q", k8sOther), "403", "403"}, // the deny list wins over the rule set
	}
	var testSteps []resource.TestStep
	for i, s := range steps {
		step := resource.TestStep{
			Config:            config(s.mode, s.denied),
			ConfigStateChecks: []statecheck.StateCheck{sameID.AddStateValue("egress_proxy.k8s", tfjsonpath.New("id"))},
			ConfigPlanChecks:  resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			Check: k8sCheckServes(t, env, "k8s", &address,
				k8sRequest{url: "http://" + k8sOrigin + "/", status: s.origin},
				k8sRequest{url: "http://" + k8sOther + "/", status: s.other},
			),
		}
		if i > 0 {
			step.ConfigPlanChecks.PreApply = []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.k8s", plancheck.ResourceActionUpdate)}
		}
		testSteps = append(testSteps, step)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { k8sAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             k8sCheckNothingLabelled(env, owner),
		Steps:                    testSteps,
	})
}
