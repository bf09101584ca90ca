package provider

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/memory"
)

// syslog_target is checked at plan time on the attribute, and changes in place while the proxy can be
// reconfigured, by replacement once it said it cannot: decided at plan time, from the last read, as the rules.
func TestAccProxyKVM_syslogTarget(t *testing.T) {
	mem := newMemoryBackends()
	sameID := statecheck.CompareValue(compare.ValuesSame())
	withTarget := func(target string) string {
		kvmBlock := `kvm = { host = "hv1" }`
		if target != "" {
			kvmBlock = fmt.Sprintf(`kvm = { host = "hv1", syslog_target = %q }`, target)
		}
		return proxyConfig("  " + kvmBlock + "\n  allowed_client_cidrs = [\"10.0.0.0/8\"]\n  allowed_destinations = [\".example.com\"]\n")
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		CheckDestroy:             checkDestroyed(mem),
		Steps: []resource.TestStep{
			{Config: withTarget("http://logs.example.test:514"), ExpectError: regexp.MustCompile(`(?s)kvm.syslog_target.*udp://HOST:PORT or\s+tcp://HOST:PORT`)},
			{Config: withTarget("udp://logs.example.test"), ExpectError: regexp.MustCompile(`(?s)kvm.syslog_target.*names no port`)},
			{
				Config:            withTarget(""),
				ConfigStateChecks: []statecheck.StateCheck{sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id"))},
			},
			{
				Config:           withTarget("udp://198.18.0.1:5514"),
				ConfigPlanChecks: expectAction(plancheck.ResourceActionUpdate),
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id")),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("kvm").AtMapKey("syslog_target"), knownvalue.StringExact("udp://198.18.0.1:5514")),
				},
			},
			{
				Config:            withTarget("tcp://[2001:db8::1]:6514"),
				ConfigPlanChecks:  expectAction(plancheck.ResourceActionUpdate),
				ConfigStateChecks: []statecheck.StateCheck{sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id"))},
			},
			{
				// The proxy now says it cannot be reconfigured: the refresh records it, the plan replaces.
				PreConfig:        func() { mem[kvm.Kind].SetFaults(memory.Faults{NotReconfigurable: true}) },
				Config:           withTarget(""),
				ConfigPlanChecks: expectAction(plancheck.ResourceActionDestroyBeforeCreate),
				Check:            checkBackendHoldsOne(mem, kvm.Kind),
			},
		},
	})
}
