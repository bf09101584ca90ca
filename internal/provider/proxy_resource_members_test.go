package provider

import (
	"regexp"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

// expectAction is a step's plan check that egress_proxy.test's planned action is a.
func expectAction(a plancheck.ResourceActionType) resource.ConfigPlanChecks {
	return resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.test", a)}}
}

// memberPath is members[i].attr in egress_proxy.test's state.
func memberPath(i int, attr string) tfjsonpath.Path {
	return tfjsonpath.New("members").AtSliceIndex(i).AtMapKey(attr)
}

// threeInstancesRead is what egress_proxy.test of three instances on backend kind, every one serving, reads
// back whatever the backend: Running, the placement's instances, no single egress address but three of them,
// three members, the last of them healthy. (Every test of several instances makes three.)
func threeInstancesRead(kind string) []statecheck.StateCheck {
	const n = 3
	return []statecheck.StateCheck{
		statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("state"), knownvalue.StringExact("Running")),
		statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New(kind).AtMapKey("instances"), knownvalue.Int64Exact(int64(n))),
		statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("egress_address"), knownvalue.Null()),
		statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("egress_addresses"), knownvalue.ListSizeExact(n)),
		statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("members"), knownvalue.ListSizeExact(n)),
		statecheck.ExpectKnownValue("egress_proxy.test", memberPath(n-1, "healthy"), knownvalue.Bool(true)),
	}
}

// secondMemberFailing is what egress_proxy.test reads back once its second member fails its health check:
// Degraded, that member unhealthy for a reason reason matches, the first still healthy.
func secondMemberFailing(reason *regexp.Regexp) []statecheck.StateCheck {
	return []statecheck.StateCheck{
		statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("state"), knownvalue.StringExact("Degraded")),
		statecheck.ExpectKnownValue("egress_proxy.test", memberPath(1, "healthy"), knownvalue.Bool(false)),
		statecheck.ExpectKnownValue("egress_proxy.test", memberPath(1, "reason"), knownvalue.StringRegexp(reason)),
		statecheck.ExpectKnownValue("egress_proxy.test", memberPath(0, "healthy"), knownvalue.Bool(true)),
	}
}
