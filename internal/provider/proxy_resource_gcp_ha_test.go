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
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

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
		CheckDestroy: func(*terraform.State) error {
			if n, left := len(fake.Instances()), fake.LoadBalancerObjects(); n != 0 || len(left) != 0 {
				return fmt.Errorf("after destroy: %d VMs and %v", n, left)
			}
			return nil
		},
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

// gcpThreeInstancesConfig is egress_proxy.test named name, of three VMs over the fake's region's zones.
func gcpThreeInstancesConfig(fake *computefake.Server, name string) string {
	return gcpConfig(fake, "acc-token", fmt.Sprintf(`  name                 = %q
  gcp                  = { instances = 3, wait_for_proxy = true }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]`, name))
}
