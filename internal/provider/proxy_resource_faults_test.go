package provider

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/memory"
)

// faultConfig uses the block syntax the timeouts block requires.
func faultConfig() string {
	return testProviderBlock + `
resource "egress_proxy" "test" {
  gcp                  = { project = "proj-1", zone = "europe-west1-b" }
  allowed_client_cidrs = ["192.168.0.0/16"]
  timeouts {
    create = "3s"
    read   = "3s"
    delete = "3s"
  }
}
`
}

func TestAccProxy_errorClassDiagnostics(t *testing.T) {
	tests := map[string]struct {
		class backend.Class
		want  string
	}{
		"quota":        {backend.ClassQuota, `(?s)Egress proxy backend limit reached.*Error class: Quota.*not retried.*Free capacity`},
		"permanent":    {backend.ClassPermanent, `(?s)refused by the backend.*Error class: Permanent.*Correct the configuration`},
		"transient":    {backend.ClassTransient, `(?s)temporarily unavailable.*Error class: Transient.*gave up after context deadline exceeded.*zone exhausted`},
		"unclassified": {backend.ClassUnclassified, `(?s)Unexpected egress proxy backend error.*Error class: Unclassified.*last error`},
		// What a create finds missing is where the proxy was to go, never the proxy: no advice about deletion.
		"not found": {backend.ClassNotFound, `(?s)Egress proxy placement not found.*Error class: NotFound.*zone exhausted.*Something the proxy is placed in.*does not exist.*Create it first`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			mem := newMemoryBackends()
			err := fmt.Errorf("zone exhausted")
			if tc.class != backend.ClassUnclassified {
				err = memory.ClassError(tc.class, "gcp instance egress-x in proj-1/europe-west1-b", "zone exhausted")
			}
			mem[gcp.Kind].SetFaults(memory.Faults{Errors: map[string]error{"create": err}})
			resource.Test(t, resource.TestCase{
				PreCheck:                 func() { testAccPreCheck(t) },
				ProtoV6ProviderFactories: mem.protoV6(),
				Steps: []resource.TestStep{{
					Config:      faultConfig(),
					ExpectError: wrapped(tc.want),
				}},
			})
			retried := mem[gcp.Kind].Calls("create")
			switch tc.class {
			case backend.ClassQuota, backend.ClassPermanent, backend.ClassNotFound:
				if retried != 1 {
					t.Errorf("create was called %d times; %s errors must not be retried", retried, tc.class)
				}
			default:
				if retried < 2 {
					t.Errorf("create was called %d times; %s errors must be retried until the timeout", retried, tc.class)
				}
			}
		})
	}
}

// A proxy deleted behind Terraform's back leaves the state on the next refresh and is created again.
func TestAccProxy_driftRecreates(t *testing.T) {
	mem := newMemoryBackends()
	var firstID string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		CheckDestroy:             checkDestroyed(mem),
		Steps: []resource.TestStep{
			{
				Config: faultConfig(),
				Check: func(s *terraform.State) error {
					firstID = s.RootModule().Resources["egress_proxy.test"].Primary.ID
					return nil
				},
			},
			{
				PreConfig: func() {
					id, err := idForms.Parse(firstID)
					if err != nil {
						t.Fatal(err)
					}
					mem[gcp.Kind].Remove(id)
				},
				Config: faultConfig(),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionCreate),
				}},
				Check: checkBackendHoldsOne(mem, gcp.Kind),
			},
		},
	})
}

// A read that fails for any reason but NotFound is an error, never a removal from state.
func TestAccProxy_readErrorKeepsState(t *testing.T) {
	mem := newMemoryBackends()
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		CheckDestroy:             checkDestroyed(mem),
		Steps: []resource.TestStep{
			{Config: faultConfig()},
			{
				PreConfig: func() {
					mem[gcp.Kind].SetFaults(memory.Faults{Errors: map[string]error{
						"get": memory.ClassError(backend.ClassPermanent, "gcp instance", "permission denied on compute.instances.get"),
					}})
				},
				Config:      faultConfig(),
				ExpectError: wrapped(`(?s)Could not read gcp/proj-1/europe-west1-b/egress-.*Error class: Permanent.*permission denied`),
			},
			{
				PreConfig: func() { mem[gcp.Kind].SetFaults(memory.Faults{}) },
				Config:    faultConfig(),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionNoop),
				}},
			},
		},
	})
}

// A proxy that is created but never becomes ready is saved (tainted) and replaced on the next apply.
func TestAccProxy_partialCreateIsTainted(t *testing.T) {
	mem := newMemoryBackends()
	mem[gcp.Kind].SetFaults(memory.Faults{NeverReady: true})
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		CheckDestroy:             checkDestroyed(mem),
		Steps: []resource.TestStep{
			{
				Config: faultConfig(),
				// A Check would never run on a failing step: the next step's PreConfig holds the backend to one.
				ExpectError: wrapped(`(?s)Egress proxy saved as tainted.*next terraform apply deletes and replaces it`),
			},
			{
				PreConfig: func() {
					if n := len(mem[gcp.Kind].Instances()); n != 1 {
						t.Fatalf("after the failed create the backend holds %d instances, want the 1 half-made one", n)
					}
					mem[gcp.Kind].SetFaults(memory.Faults{})
				},
				Config: faultConfig(),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionDestroyBeforeCreate),
				}},
				Check: checkBackendHoldsOne(mem, gcp.Kind),
			},
		},
	})
}

// Delete of an object that is already gone succeeds: destroy never fails on NotFound.
func TestAccProxy_deleteIsIdempotent(t *testing.T) {
	mem := newMemoryBackends()
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		CheckDestroy:             checkDestroyed(mem),
		Steps: []resource.TestStep{
			{Config: faultConfig()},
			{
				PreConfig: func() {
					// The object vanishes between refresh and delete: Delete answers NotFound.
					mem[gcp.Kind].SetFaults(memory.Faults{Errors: map[string]error{
						"delete": memory.ClassError(backend.ClassNotFound, "gcp instance", "already deleted"),
					}})
				},
				Config:  faultConfig(),
				Destroy: true,
			},
		},
	})
}
