package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// An unhealthy target is data: the read succeeds, the check block warns, and the apply goes on.
func TestAccBackends_unhealthyTargetIsData(t *testing.T) {
	mem := newMemoryBackends()
	mem[backend.KindKVM].SetHealth([]backend.Health{
		{Target: "hv1", Healthy: true, Reason: "Healthy", Details: map[string]string{"libvirt_version": "9.0.0"}},
		{Target: "hv2", Healthy: false, Reason: "ConnectionFailed", Details: map[string]string{"error": "dial unix: no such file"}},
	})
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		Steps: []resource.TestStep{{
			Config: `
provider "egress" {
  owner = "team-a"
  kvm   = {}
}

check "backends_healthy" {
  data "egress_backends" "scoped" {}
  assert {
    condition     = data.egress_backends.scoped.healthy
    error_message = "an egress backend target is unhealthy"
  }
}

data "egress_backends" "all" {}
`,
			// A failing check block re-reads its scoped data source on every plan: the plan is never empty.
			ExpectNonEmptyPlan: true,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("healthy"), knownvalue.Bool(false)),
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectExact(map[string]knownvalue.Check{
						"backend": knownvalue.StringExact("kvm"), "target": knownvalue.StringExact("hv1"), "healthy": knownvalue.Bool(true),
						"reason": knownvalue.StringExact("Healthy"), "details": knownvalue.MapExact(map[string]knownvalue.Check{"libvirt_version": knownvalue.StringExact("9.0.0")}),
					}),
					knownvalue.ObjectPartial(map[string]knownvalue.Check{
						"target": knownvalue.StringExact("hv2"), "healthy": knownvalue.Bool(false), "reason": knownvalue.StringExact("ConnectionFailed"),
					}),
				})),
			},
		}},
	})
}

// A backend that cannot even be built is reported as an unhealthy entry, not as an error.
func TestAccBackends_unavailableBackendIsData(t *testing.T) {
	resource.Test(t, resource.TestCase{
		PreCheck: func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: map[string]func() (tfprotov6.ProviderServer, error){
			"egress": providerserver.NewProtocol6WithError(&egressProvider{version: "test", factories: defaultFactories}),
		},
		Steps: []resource.TestStep{{
			Config: `
provider "egress" {
  owner = "team-a"
  gcp   = {}
}
data "egress_backends" "all" {}
`,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("healthy"), knownvalue.Bool(false)),
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectPartial(map[string]knownvalue.Check{
						"backend": knownvalue.StringExact("gcp"), "target": knownvalue.StringExact("*"),
						"healthy": knownvalue.Bool(false), "reason": knownvalue.StringExact("BackendUnavailable"),
					}),
				})),
			},
		}},
	})
}
