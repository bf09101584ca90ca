package provider

import (
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// The provider tells the backend whose the proxy in state is (backend.Ownership, on the context): a provider
// configuration of another owner reading the same id, as a second team's copy of the configuration would, is
// refused with both owners named, and the proxy is neither dropped from state nor changed; its own owner's
// configuration goes on as before.
func TestAccProxy_anotherOwnerIsRefused(t *testing.T) {
	mem := newMemoryBackends()
	body := `
resource "egress_proxy" "test" {
  name                 = "shared-name"
  kvm                  = { host = "hv1" }
  allowed_client_cidrs = ["10.0.0.0/8"]
}
`
	asTeamB := strings.Replace(testProviderBlock, `owner          = "team-a"`, `owner          = "team-b"`, 1)
	if asTeamB == testProviderBlock {
		t.Fatal("the test provider block no longer sets owner team-a: the test would prove nothing")
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		CheckDestroy:             checkDestroyed(mem),
		Steps: []resource.TestStep{
			{Config: testProviderBlock + body},
			{
				Config:      asTeamB + body,
				ExpectError: regexp.MustCompile(`(?s)belongs to owner\s+"team-a".*not to this provider's\s+owner\s+"team-b"`),
			},
			{Config: testProviderBlock + body, PlanOnly: true},
		},
	})
}
