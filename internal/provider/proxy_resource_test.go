package provider

import (
	"fmt"
	"regexp"
	"slices"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/memory"
)

const testProviderBlock = `
provider "egress" {
  owner          = "team-a"
  default_labels = { env = "test" }
  kubernetes     = {}
  gcp            = {}
  kvm = {
    hosts = {
      local = { uri = "test:///default" }
      hv1   = { uri = "test:///default" }
      # a host name the backend accepts though the proxy-name rules would not
      "rack1.hv2" = { uri = "test:///default" }
    }
  }
}
`

func proxyConfig(body string) string {
	return testProviderBlock + fmt.Sprintf(`
resource "egress_proxy" "test" {
%s
}
`, body)
}

func TestAccProxy_lifecycle(t *testing.T) {
	mem := newMemoryBackends()
	sameID := statecheck.CompareValue(compare.ValuesSame())
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		CheckDestroy:             checkDestroyed(mem),
		Steps: []resource.TestStep{
			{
				Config: proxyConfig(`
  kvm                  = { host = "hv1" }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com", "api.github.com"]
  labels               = { team = "net" }
`),
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id")),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("id"), knownvalue.StringRegexp(regexp.MustCompile(`^kvm/hv1/egress-[0-9a-f]{16}$`))),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("state"), knownvalue.StringExact("Running")),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("port"), knownvalue.Int64Exact(3128)),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("proxy_url"), knownvalue.StringExact("http://10.0.0.10:3128")),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("all_labels"), knownvalue.MapExact(map[string]knownvalue.Check{
						"env": knownvalue.StringExact("test"), "team": knownvalue.StringExact("net"),
					})),
				},
				Check: checkBackendHoldsOne(mem, kvm.Kind),
			},
			{
				// Labels change in place: same id, an update, not a replacement.
				Config: proxyConfig(`
  kvm                  = { host = "hv1" }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com", "api.github.com"]
  labels               = { team = "platform", env = "prod" }
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id")),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("all_labels"), knownvalue.MapExact(map[string]knownvalue.Check{
						"env": knownvalue.StringExact("prod"), "team": knownvalue.StringExact("platform"),
					})),
				},
				Check: checkBackendLabel(mem, kvm.Kind, "team", "platform"),
			},
			{
				ResourceName:            "egress_proxy.test",
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts"},
			},
			{
				ResourceName:    "egress_proxy.test",
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithID,
			},
			{
				ResourceName:    "egress_proxy.test",
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithResourceIdentity,
				SkipFunc:        skipStepBelow(t, tfversion.Version1_12_0),
			},
			{
				// What Create waits for changes in place; what it makes does not.
				Config: proxyConfig(`
  kvm                  = { host = "hv1", wait_for_proxy = false }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com", "api.github.com"]
  labels               = { team = "platform", env = "prod" }
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id"))},
			},
			{
				Config: proxyConfig(`
  kvm                  = { host = "hv1", wait_for_proxy = false, memory_mib = 1024 }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com", "api.github.com"]
  labels               = { team = "platform", env = "prod" }
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionDestroyBeforeCreate),
				}},
			},
			{
				// The rules change in place where the backend can reconfigure the proxy: same id.
				Config: proxyConfig(`
  kvm                  = { host = "hv1", wait_for_proxy = false, memory_mib = 1024 }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]
  labels               = { team = "platform", env = "prod" }
`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeTestCheckFunc(checkBackendHoldsOne(mem, kvm.Kind), checkBackendDestinations(mem, kvm.Kind, ".example.com")),
			},
		},
	})
}

// The proxy's rules, password included, change in place on a backend that can reconfigure the proxy, and
// by replacement on one whose proxy said it cannot: decided at plan time, from the last read.
func TestAccProxy_rulesChangeInPlaceOrReplace(t *testing.T) {
	mem := newMemoryBackends()
	sameID := statecheck.CompareValue(compare.ValuesSame())
	rules := func(destinations, cidr, passwordVersion string) string {
		return proxyConfig(fmt.Sprintf(`
  kvm                  = { host = "hv1" }
  allowed_client_cidrs = [%q]
  allowed_destinations = [%q]
  allowed_ports        = [443, 8443]
  auth                 = { username = "ci", password_wo = "secret-%s", password_wo_version = %s }
`, cidr, destinations, passwordVersion, passwordVersion))
	}
	inPlace := func() resource.ConfigPlanChecks {
		return resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
			plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
		}}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		CheckDestroy:             checkDestroyed(mem),
		Steps: []resource.TestStep{
			{
				Config:            rules("a.example.com", "10.0.0.0/8", "1"),
				ConfigStateChecks: []statecheck.StateCheck{sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id"))},
			},
			{
				Config:            rules("b.example.com", "10.0.0.0/8", "1"),
				ConfigPlanChecks:  inPlace(),
				ConfigStateChecks: []statecheck.StateCheck{sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id"))},
				Check:             resource.ComposeTestCheckFunc(checkBackendHoldsOne(mem, kvm.Kind), checkBackendDestinations(mem, kvm.Kind, "b.example.com")),
			},
			{
				Config:            rules("b.example.com", "192.168.0.0/16", "2"),
				ConfigPlanChecks:  inPlace(),
				ConfigStateChecks: []statecheck.StateCheck{sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id"))},
				Check: func(*terraform.State) error {
					if n := mem[kvm.Kind].Calls("reconfigure"); n != 2 {
						return fmt.Errorf("reconfigure was called %d times, want 2 (one per changed apply)", n)
					}
					return checkBackendHoldsOne(mem, kvm.Kind)(nil)
				},
			},
			{
				// The proxy now says it cannot be reconfigured: the refresh records it, the plan replaces.
				PreConfig:        func() { mem[kvm.Kind].SetFaults(memory.Faults{NotReconfigurable: true}) },
				Config:           rules("c.example.com", "192.168.0.0/16", "2"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionDestroyBeforeCreate)}},
				Check:            resource.ComposeTestCheckFunc(checkBackendHoldsOne(mem, kvm.Kind), checkBackendDestinations(mem, kvm.Kind, "c.example.com")),
			},
		},
	})
}

func checkBackendDestinations(mem memoryBackends, kind backend.Kind, want ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		held := mem[kind].Instances()
		if len(held) == 0 {
			return fmt.Errorf("the %s backend holds no proxy to check the destinations of", kind)
		}
		for _, inst := range held {
			if inst.Proxy == nil || !slices.Equal(inst.Proxy.AllowedDestinations, want) {
				return fmt.Errorf("%s enforces destinations %+v, want %v", inst.ID, inst.Proxy, want)
			}
		}
		return nil
	}
}

func checkDestroyed(mem memoryBackends) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		for _, rs := range s.RootModule().Resources {
			if rs.Type != "egress_proxy" {
				continue
			}
			id, err := idForms.Parse(rs.Primary.ID)
			if err != nil {
				return err
			}
			_, err = mem[id.Backend].Get(t0ctx(), id)
			if !backend.IsNotFound(err) {
				return fmt.Errorf("%s still exists after destroy (get returned %w)", id, err)
			}
		}
		return nil
	}
}

func checkBackendHoldsOne(mem memoryBackends, kind backend.Kind) resource.TestCheckFunc {
	return func(*terraform.State) error {
		if got := len(mem[kind].Instances()); got != 1 {
			return fmt.Errorf("%s backend holds %d instances, want 1", kind, got)
		}
		return nil
	}
}

func checkBackendLabel(mem memoryBackends, kind backend.Kind, key, want string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		held := mem[kind].Instances()
		if len(held) == 0 {
			return fmt.Errorf("the %s backend holds no proxy to check label %s of", kind, key)
		}
		for _, inst := range held {
			if inst.Labels[key] != want {
				return fmt.Errorf("%s label %s = %q, want %q", inst.ID, key, inst.Labels[key], want)
			}
		}
		return nil
	}
}
