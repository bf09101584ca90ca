package provider

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
)

// A gcp proxy of three instances on the Compute fake: three VMs over the region's zones behind an internal
// passthrough load balancer, read back as members with their own egress addresses and the forwarding rule's
// address as internal_address; the health check on the health port; a member failing it makes the proxy
// Degraded at the next refresh; import reads the same proxy back; destroy leaves no VM and no part of the
// load balancer.
func TestAccProxyGCP_instances(t *testing.T) {
	fake := gcpFake(t)
	gcpGuests(t, fake)
	const name = "egress-acc-ha"
	config := gcpThreeInstancesConfig(fake, name)
	root := func(attr string) tfjsonpath.Path { return tfjsonpath.New(attr) }
	zones := []string{"us-central1-a", "us-central1-b", "us-central1-c"}
	sameID := statecheck.CompareValue(compare.ValuesSame())
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		CheckDestroy:             gcpNothingLeft(fake),
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigStateChecks: append(threeInstancesRead("gcp"),
					statecheck.ExpectKnownValue("egress_proxy.test", root("id"), knownvalue.StringExact("gcp/"+gcpTestProject+"/us-central1-a/"+name)),
					sameID.AddStateValue("egress_proxy.test", root("id")),
					statecheck.ExpectKnownValue("egress_proxy.test", memberPath(0, "name"), knownvalue.StringExact(name+"-1")),
					statecheck.ExpectKnownValue("egress_proxy.test", memberPath(1, "scope"), knownvalue.StringExact("us-central1-b")),
					statecheck.ExpectKnownValue("egress_proxy.test", memberPath(2, "scope"), knownvalue.StringExact("us-central1-c")),
				),
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources["egress_proxy.test"].Primary.Attributes
					fr := fake.ForwardingRule(gcpTestProject, "us-central1", name)
					if fr == nil || a["internal_address"] != fr.GetIPAddress() || !slices.Equal(fr.GetPorts(), []string{"3128"}) {
						return fmt.Errorf("internal_address %q, forwarding rule %v", a["internal_address"], fr)
					}
					hc := fake.HealthCheck(gcpTestProject, "us-central1", name)
					if hc.GetHttpHealthCheck().GetPort() != proxyconf.DefaultHealthPort || hc.GetHttpHealthCheck().GetRequestPath() != proxyconf.HealthPath {
						return fmt.Errorf("health check %v, want HTTP on the health port %d", hc, proxyconf.DefaultHealthPort)
					}
					for i, z := range zones {
						vm := fake.Instance(gcpTestProject, z, fmt.Sprintf("%s-%d", name, i+1))
						if vm == nil {
							return fmt.Errorf("no VM %s-%d in %s", name, i+1, z)
						}
						nat := vm.GetNetworkInterfaces()[0].GetAccessConfigs()[0].GetNatIP()
						if a[fmt.Sprintf("members.%d.egress_address", i)] != nat || a[fmt.Sprintf("egress_addresses.%d", i)] != nat {
							return fmt.Errorf("member %d egresses from %q (egress_addresses %q), its VM from %s", i, a[fmt.Sprintf("members.%d.egress_address", i)], a[fmt.Sprintf("egress_addresses.%d", i)], nat)
						}
						if _, held := fake.InstanceGroup(gcpTestProject, z, name); len(held) != 1 {
							return fmt.Errorf("group %s in %s holds %v", name, z, held)
						}
					}
					return nil
				},
			},
			{Config: config, PlanOnly: true},
			{
				ResourceName:      "egress_proxy.test",
				ImportState:       true,
				ImportStateVerify: true,
				// wait_for_proxy says how the create waited: nothing of the VMs records it.
				ImportStateVerifyIgnore: []string{"timeouts", "gcp.wait_for_proxy"},
			},
			{
				// The second VM fails the load balancer's health check: the refresh reads the proxy Degraded,
				// naming the member and why, under the same id.
				PreConfig: func() { fake.SetHealthy(gcpTestProject, "us-central1-b", name+"-2", false) },
				Config:    config,
				ConfigStateChecks: append(secondMemberFailing(regexp.MustCompile(`health check \(HTTP on port 3129\) reports UNHEALTHY`)),
					sameID.AddStateValue("egress_proxy.test", root("id")),
				),
			},
		},
	})
}

// instances is refused at plan time, on the attribute, outside 1 to gcp.MaxInstances, beside a static address or
// metrics, and with a name that leaves its VMs' names no room.
func TestAccProxyGCP_instancesRefusedAtPlan(t *testing.T) {
	fake := gcpFake(t)
	config := func(name, gcpBody string, more ...string) string {
		return gcpConfig(fake, "acc-token", fmt.Sprintf(`  name                 = %q
  gcp                  = { %s }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]
  %s`, name, gcpBody, strings.Join(more, "\n  ")))
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		Steps: []resource.TestStep{
			{Config: config("egress-acc", "instances = 10"), PlanOnly: true, ExpectError: regexp.MustCompile(`(?s)gcp.instances.*between\s+1\s+and\s+9`)},
			{Config: config("egress-acc", "instances = 0"), PlanOnly: true, ExpectError: regexp.MustCompile(`(?s)gcp.instances.*between\s+1\s+and\s+9`)},
			{Config: config("egress-acc", "instances = 2, static_egress_ip = true"), PlanOnly: true,
				ExpectError: regexp.MustCompile(`(?s)gcp.instances.*static_egress_ip\s+and\s+egress_address_name\s+are\s+for\s+a\s+proxy\s+of\s+one`)},
			{Config: config("egress-acc", "instances = 2", `metrics = { allowed_client_cidrs = ["10.0.0.0/8"] }`), PlanOnly: true,
				ExpectError: regexp.MustCompile(`(?s)gcp.instances.*metrics\s+are\s+not\s+served`)},
			{Config: config(strings.Repeat("a", 62), "instances = 3"), PlanOnly: true,
				ExpectError: regexp.MustCompile(`(?s)gcp.instances.*would\s+be\s+named\s+up\s+to`)},
		},
	})
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("%d requests to Compute Engine: a plan-time refusal must not reach the API", n)
	}
}

// gcpNothingLeft is a CheckDestroy that finds no VM and no load balancer object left on the fake.
func gcpNothingLeft(fake *computefake.Server) resource.TestCheckFunc {
	return func(*terraform.State) error {
		if n, left := len(fake.Instances()), fake.LoadBalancerObjects(); n != 0 || len(left) != 0 {
			return fmt.Errorf("after destroy: %d VMs and %v", n, left)
		}
		return nil
	}
}

// gcpThreeInstancesConfig is egress_proxy.test named name, of three VMs over the fake's region's zones.
func gcpThreeInstancesConfig(fake *computefake.Server, name string) string {
	return gcpInstancesConfig(fake, name, 3)
}

// gcpInstancesConfig is egress_proxy.test named name, of n VMs over the fake's region's zones.
func gcpInstancesConfig(fake *computefake.Server, name string, n int) string {
	return gcpHAConfig(fake, name, fmt.Sprintf("instances = %d", n))
}

// gcpHAConfig is egress_proxy.test named name, its gcp block waiting for the proxy and setting attrs (HCL
// object entries) besides.
func gcpHAConfig(fake *computefake.Server, name, attrs string) string {
	return gcpConfig(fake, "acc-token", fmt.Sprintf(`  name                 = %q
  gcp                  = { %s, wait_for_proxy = true }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]`, name, attrs))
}

// A change of gcp.instances between two counts above one is an update in place: from two VMs to three the
// third joins in the region's third zone behind the same forwarding rule (its zone's group added to the
// backend service), and back to two it leaves and is deleted; the id and the address stay, and the next plan
// is empty. From two to one the proxy is replaced: one VM and several are different objects.
func TestAccProxyGCP_instancesChangedInPlace(t *testing.T) {
	fake := gcpFake(t)
	gcpGuests(t, fake)
	const name = "egress-acc-resize"
	sameID := statecheck.CompareValue(compare.ValuesSame())
	sameAddress := statecheck.CompareValue(compare.ValuesSame())
	vms := func(want int) resource.TestCheckFunc {
		return func(*terraform.State) error {
			if n := len(fake.Instances()); n != want {
				return fmt.Errorf("the fake holds %d VMs, want %d", n, want)
			}
			return nil
		}
	}
	step := func(n int, action plancheck.ResourceActionType, check resource.TestCheckFunc, kept ...statecheck.StateCheck) resource.TestStep {
		members := n
		if n == 1 {
			members = 0 // a proxy of one VM lists no members
		}
		return resource.TestStep{
			Config:            gcpInstancesConfig(fake, name, n),
			ConfigPlanChecks:  expectAction(action),
			ConfigStateChecks: append(kept, statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("members"), knownvalue.ListSizeExact(members))),
			Check:             check,
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		CheckDestroy:             gcpNothingLeft(fake),
		Steps: []resource.TestStep{
			step(2, plancheck.ResourceActionCreate, vms(2),
				sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id")),
				sameAddress.AddStateValue("egress_proxy.test", tfjsonpath.New("internal_address"))),
			step(3, plancheck.ResourceActionUpdate, func(s *terraform.State) error {
				if err := vms(3)(s); err != nil {
					return err
				}
				if vm := fake.Instance(gcpTestProject, "us-central1-c", name+"-3"); vm == nil {
					return fmt.Errorf("no VM %s-3 in us-central1-c", name)
				}
				if bs := fake.BackendService(gcpTestProject, "us-central1", name); len(bs.GetBackends()) != 3 {
					return fmt.Errorf("the backend service has %d backends, want the groups of the three zones", len(bs.GetBackends()))
				}
				return nil
			},
				sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id")),
				sameAddress.AddStateValue("egress_proxy.test", tfjsonpath.New("internal_address")),
				statecheck.ExpectKnownValue("egress_proxy.test", memberPath(2, "healthy"), knownvalue.Bool(true))),
			{Config: gcpInstancesConfig(fake, name, 3), PlanOnly: true},
			step(2, plancheck.ResourceActionUpdate, vms(2),
				sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id")),
				sameAddress.AddStateValue("egress_proxy.test", tfjsonpath.New("internal_address"))),
			{Config: gcpInstancesConfig(fake, name, 2), PlanOnly: true},
			step(1, plancheck.ResourceActionReplace, vms(1)),
		},
	})
}

// gcpImageConfig is egress_proxy.test named egress-acc-image, of n VMs booting image.
func gcpImageConfig(fake *computefake.Server, n int, image string) string {
	return gcpHAConfig(fake, "egress-acc-image", fmt.Sprintf("instances = %d, image = %q", n, image))
}

// A new gcp.image for a proxy of several VMs is an update in place: every VM is made again with it, one at a
// time behind the same forwarding rule, so the id and the address stay and the next plan is empty; for a
// proxy of one VM it is a replacement.
func TestAccProxyGCP_imageRolledInPlace(t *testing.T) {
	fake := gcpFake(t)
	gcpGuests(t, fake)
	const newImage = "projects/debian-cloud/global/images/family/debian-13"
	sameID := statecheck.CompareValue(compare.ValuesSame())
	sameAddress := statecheck.CompareValue(compare.ValuesSame())
	booted := func(n int, image string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			vms := fake.Instances()
			if len(vms) != n {
				return fmt.Errorf("the fake holds %d VMs, want %d", len(vms), n)
			}
			for _, vm := range vms {
				if got := vm.GetDisks()[0].GetInitializeParams().GetSourceImage(); got != image {
					return fmt.Errorf("VM %s booted %s, want %s", vm.GetName(), got, image)
				}
			}
			return nil
		}
	}
	kept := func() []statecheck.StateCheck {
		return []statecheck.StateCheck{
			sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id")),
			sameAddress.AddStateValue("egress_proxy.test", tfjsonpath.New("internal_address")),
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		CheckDestroy:             gcpNothingLeft(fake),
		Steps: []resource.TestStep{
			{Config: gcpImageConfig(fake, 2, gcp.DefaultImage), Check: booted(2, gcp.DefaultImage), ConfigStateChecks: kept()},
			{Config: gcpImageConfig(fake, 2, newImage), ConfigPlanChecks: expectAction(plancheck.ResourceActionUpdate), Check: booted(2, newImage),
				ConfigStateChecks: append(kept(), statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("gcp").AtMapKey("image"), knownvalue.StringExact(newImage)))},
			{Config: gcpImageConfig(fake, 2, newImage), PlanOnly: true},
			{Config: gcpImageConfig(fake, 1, newImage), ConfigPlanChecks: expectAction(plancheck.ResourceActionReplace), Check: booted(1, newImage)},
			{Config: gcpImageConfig(fake, 1, gcp.DefaultImage), ConfigPlanChecks: expectAction(plancheck.ResourceActionReplace), Check: booted(1, gcp.DefaultImage)},
		},
	})
}
