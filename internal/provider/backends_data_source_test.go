package provider

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
)

// An unhealthy target is data: the read succeeds, the check block warns, and the apply goes on.
func TestAccBackends_unhealthyTargetIsData(t *testing.T) {
	mem := newMemoryBackends()
	mem[kvm.Kind].SetHealth([]backend.Health{
		{Target: "hv1", Healthy: true, Reason: "Healthy", Details: map[string]string{"libvirt_version": "9.0.0"}},
		{Target: "hv2", Healthy: false, Reason: backend.HealthUnreachable, Details: map[string]string{backend.DetailMessage: "dial unix: no such file"}},
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
						"degraded_proxies": knownvalue.ListExact([]knownvalue.Check{}), "proxy_errors": knownvalue.ListExact([]knownvalue.Check{}),
					}),
					knownvalue.ObjectPartial(map[string]knownvalue.Check{
						"target": knownvalue.StringExact("hv2"), "healthy": knownvalue.Bool(false), "reason": knownvalue.StringExact(backend.HealthUnreachable),
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

// The reasons are the documented words on a real libvirtd too: a host that answers is Healthy, one whose
// socket does not exist is Unreachable within its connect_timeout, with the cause in details.message.
func TestAccBackendsKVM_reasonsFromRealLibvirt(t *testing.T) {
	uri := kvmAccPreCheck(t)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		Steps: []resource.TestStep{{
			Config: fmt.Sprintf(`
provider "egress" {
  owner = "acc-health"
  kvm = {
    hosts = {
      local = { uri = %q }
      gone  = { uri = "qemu:///system?socket=/nonexistent/libvirt-sock", connect_timeout = "3s" }
    }
    pool        = "egress-test"
    network     = "egress-test"
    base_volume = "egress-base.qcow2"
  }
}
data "egress_backends" "all" {}
`, uri),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("healthy"), knownvalue.Bool(false)),
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectPartial(map[string]knownvalue.Check{
						"target": knownvalue.StringExact("gone"), "healthy": knownvalue.Bool(false), "reason": knownvalue.StringExact(backend.HealthUnreachable),
						"details": knownvalue.MapPartial(map[string]knownvalue.Check{
							backend.DetailMessage: knownvalue.StringRegexp(regexp.MustCompile(`nonexistent/libvirt-sock`)),
						}),
					}),
					knownvalue.ObjectPartial(map[string]knownvalue.Check{
						"target": knownvalue.StringExact("local"), "healthy": knownvalue.Bool(true), "reason": knownvalue.StringExact(backend.HealthHealthy),
					}),
				})),
			},
		}},
	})
}
