package provider

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// A gcp proxy with a write-only password and a write-only TLS key, its password rotated in place and then
// its key (which replaces it): no state, no plan and no line of the CLI's and the provider's TRACE log holds
// a password, a password hash the backend wrote (any bcrypt hash, in fact), a private key or any PRIVATE KEY
// block. The metadata itself
// is the gcp backend's test (TestReadableInstanceHoldsNoSecret).
func TestAccProxyGCP_secretsInNoStatePlanOrLog(t *testing.T) {
	fake := gcpFake(t)
	gcpGuests(t, fake)
	logFile := traceLogTo(t)
	password := func(v int) string { return fmt.Sprintf("gcp-secret-password-v%d", v) }
	cert1, key1 := testutil.SelfSignedPEM(t, "proxy.test")
	cert2, key2 := testutil.SelfSignedPEM(t, "proxy.test")
	keys := map[int][2]string{1: {cert1, key1}, 2: {cert2, key2}}
	config := func(passwordVersion, keyVersion int) string {
		return gcpConfig(fake, "acc-token", fmt.Sprintf(`  gcp                  = {}
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]
  auth = {
    username            = "u"
    password_wo         = %q
    password_wo_version = %d
  }
  tls = {
    certificate_pem            = %s
    private_key_pem_wo         = %s
    private_key_pem_wo_version = %d
  }`, password(passwordVersion), passwordVersion, strconv.Quote(keys[keyVersion][0]), strconv.Quote(keys[keyVersion][1]), keyVersion))
	}
	// Every secret the test made or the backend wrote so far; hashes are added as the fake receives them.
	scan := &secretScan{secrets: append([]string{password(1), password(2), "PRIVATE KEY"}, append(keyBodyLines(t, key1), keyBodyLines(t, key2)...)...)}
	made := len(scan.secrets)
	recordHashes := func(*terraform.State) error {
		for _, in := range fake.Instances() {
			for _, it := range in.GetMetadata().GetItems() {
				if it.GetKey() == proxyconf.MetadataHtpasswd {
					_, hash, _ := strings.Cut(strings.TrimSpace(it.GetValue()), ":")
					scan.secrets = append(scan.secrets, hash)
				}
			}
		}
		return nil
	}
	planChecks := func(action plancheck.ResourceActionType) resource.ConfigPlanChecks {
		// The check reads the scan's secrets when it runs, so it looks for the hashes recorded by the steps before.
		return resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.test", action), scan.inPlan()}}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		Steps: []resource.TestStep{
			{
				Config:           config(1, 1),
				ConfigPlanChecks: planChecks(plancheck.ResourceActionCreate),
				Check:            resource.ComposeTestCheckFunc(recordHashes, scan.inState),
			},
			{
				// A new password, in place.
				Config:           config(2, 1),
				ConfigPlanChecks: planChecks(plancheck.ResourceActionUpdate),
				Check:            resource.ComposeTestCheckFunc(recordHashes, scan.inState),
			},
			{
				// A new key, by replacement.
				Config:           config(2, 2),
				ConfigPlanChecks: planChecks(plancheck.ResourceActionDestroyBeforeCreate),
				Check:            resource.ComposeTestCheckFunc(recordHashes, scan.inState),
			},
		},
	})
	if len(scan.secrets) == made {
		t.Fatal("no hash was recorded: the search would prove nothing")
	}
	scan.inTraceLog(t, logFile)
}
