package provider

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// A kvm proxy with a write-only password and a write-only TLS key, on both CLIs, without waiting for the VM to
// boot (the secrets reach the seed volume at create, whether the guest ever reads them or not): no state, no
// plan and no line of the CLI's and the provider's TRACE log holds the password, any bcrypt hash, the key's
// body or a PRIVATE KEY block. The booted test proves the same for in-place changes on OpenTofu; this one is
// the check the Terraform leg runs too.
func TestAccProxyKVM_secretsInNoStatePlanOrLog(t *testing.T) {
	uri := kvmAccPreCheck(t)
	logFile := traceLogTo(t)
	owner := "sec-" + uuid.NewString()[:8]
	b := kvmBackend(t, uri)
	password := "kvm-secret-password-" + uuid.NewString()[:8]
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	config := kvmProviderBlock(owner, uri) + fmt.Sprintf(`
resource "egress_proxy" "test" {
  kvm                  = { memory_mib = 128, wait_for_address = false }
  allowed_client_cidrs = ["198.18.0.0/24"]
  allowed_destinations = [".example.com"]
  auth = {
    username            = "u"
    password_wo         = %q
    password_wo_version = 1
  }
  tls = {
    certificate_pem            = %s
    private_key_pem_wo         = %s
    private_key_pem_wo_version = 1
  }
}
`, password, strconv.Quote(cert), strconv.Quote(key))
	scan := secretScan{secrets: append([]string{password, "PRIVATE KEY"}, keyBodyLines(t, key)...)}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             checkOwnerHasNothingLeft(b, owner),
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionCreate), scan.inPlan(),
				}},
				Check: scan.inState,
			},
			{
				// A refresh and a plan of the made proxy: its read-back carries nothing secret either.
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectEmptyPlan(), scan.inPlan(),
				}},
				Check: scan.inState,
			},
		},
	})
	scan.inTraceLog(t, logFile)
}
