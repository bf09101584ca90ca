package provider

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"golang.org/x/crypto/bcrypt"

	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/secretmanagerfake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// A gcp proxy with a write-only password and a write-only TLS key, on a VM with a service account, its
// password rotated in place and then its key (which replaces it): no state, no plan and no line of the CLI's
// and the provider's TRACE log holds a password, a password hash the backend wrote (any bcrypt hash, in
// fact), a private key or any PRIVATE KEY block; at every step the proxy's Secret Manager secret holds the
// current password's hash and key, no metadata item holds either, and destroy deletes the secret. The rest
// of the instance is the gcp backend's test (TestReadableInstanceHoldsNoSecret).
func TestAccProxyGCP_secretsInNoStatePlanOrLog(t *testing.T) {
	fake := gcpFake(t)
	sm := secretmanagerfake.New(secretmanagerfake.Options{AdminToken: "acc-token", AdminPermissions: gcpDocumentedRole(t)})
	t.Cleanup(sm.Close)
	gcpGuests(t, fake)
	logFile := traceLogTo(t)
	password := func(v int) string { return fmt.Sprintf("gcp-secret-password-v%d", v) }
	cert1, key1 := testutil.SelfSignedPEM(t, "proxy.test")
	cert2, key2 := testutil.SelfSignedPEM(t, "proxy.test")
	keys := map[int][2]string{1: {cert1, key1}, 2: {cert2, key2}}
	config := func(passwordVersion, keyVersion int) string {
		return fmt.Sprintf(`
provider "egress" {
  owner = "team-a"
  gcp = {
    project                 = %q
    compute_endpoint        = %q
    secret_manager_endpoint = %q
    access_token            = "acc-token"
    default_zone            = "us-central1-a"
  }
}
resource "egress_proxy" "test" {
  gcp                  = { service_account = "proxy@%s.iam.gserviceaccount.com" }
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
  }
}
`, gcpTestProject, fake.URL, sm.URL, gcpTestProject, password(passwordVersion), passwordVersion,
			strconv.Quote(keys[keyVersion][0]), strconv.Quote(keys[keyVersion][1]), keyVersion)
	}
	// Every secret the test made or the backend wrote so far; hashes are added as the fake receives them.
	scan := &secretScan{secrets: append([]string{password(1), password(2), "PRIVATE KEY"}, append(keyBodyLines(t, key1), keyBodyLines(t, key2)...)...)}
	made := len(scan.secrets)
	// inSecretManager proves where the secrets are: the latest version of the proxy's secret holds the hash of
	// the password and the key of the step, and no metadata item of any instance holds a hash or a key.
	inSecretManager := func(passwordVersion, keyVersion int) resource.TestCheckFunc {
		return func(*terraform.State) error {
			ids := sm.Secrets(gcpTestProject)
			if len(ids) != 1 {
				return fmt.Errorf("secrets in Secret Manager: %v, want the proxy's one", ids)
			}
			versions := sm.Payloads(gcpTestProject, ids[0])
			if len(versions) == 0 {
				return fmt.Errorf("secret %s has no version", ids[0])
			}
			for _, v := range versions {
				for _, line := range strings.Split(string(v), "\n") {
					if name, b64, ok := strings.Cut(line, " "); ok && name == gcpguest.SecretLineHtpasswd {
						hashLine, _ := base64.StdEncoding.DecodeString(b64)
						_, hash, _ := strings.Cut(strings.TrimSpace(string(hashLine)), ":")
						scan.secrets = append(scan.secrets, hash)
					}
				}
			}
			latest := map[string]string{}
			for _, line := range strings.Split(string(versions[len(versions)-1]), "\n") {
				if name, b64, ok := strings.Cut(line, " "); ok {
					b, _ := base64.StdEncoding.DecodeString(b64)
					latest[name] = string(b)
				}
			}
			_, hash, _ := strings.Cut(strings.TrimSpace(latest[gcpguest.SecretLineHtpasswd]), ":")
			if bcrypt.CompareHashAndPassword([]byte(hash), []byte(password(passwordVersion))) != nil {
				return fmt.Errorf("the secret's latest version does not hold the hash of password %d", passwordVersion)
			}
			if latest[gcpguest.SecretLineTLSKey] != keys[keyVersion][1] {
				return fmt.Errorf("the secret's latest version does not hold key %d", keyVersion)
			}
			for _, in := range fake.Instances() {
				for _, it := range in.GetMetadata().GetItems() {
					if it.GetKey() == gcpguest.MetadataHtpasswd || it.GetKey() == gcpguest.MetadataTLSKey {
						return fmt.Errorf("instance %s holds metadata item %s", in.GetName(), it.GetKey())
					}
				}
			}
			return nil
		}
	}
	planChecks := func(action plancheck.ResourceActionType) resource.ConfigPlanChecks {
		// The check reads the scan's secrets when it runs, so it looks for the hashes recorded by the steps before.
		return resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.test", action), scan.inPlan()}}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		CheckDestroy: func(*terraform.State) error {
			if ids := sm.Secrets(gcpTestProject); len(ids) != 0 {
				return fmt.Errorf("destroy left the secrets %v", ids)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config:           config(1, 1),
				ConfigPlanChecks: planChecks(plancheck.ResourceActionCreate),
				Check:            resource.ComposeTestCheckFunc(inSecretManager(1, 1), scan.inState),
			},
			{
				// A new password, in place.
				Config:           config(2, 1),
				ConfigPlanChecks: planChecks(plancheck.ResourceActionUpdate),
				Check:            resource.ComposeTestCheckFunc(inSecretManager(2, 1), scan.inState),
			},
			{
				// A new key, by replacement.
				Config:           config(2, 2),
				ConfigPlanChecks: planChecks(plancheck.ResourceActionDestroyBeforeCreate),
				Check:            resource.ComposeTestCheckFunc(inSecretManager(2, 2), scan.inState),
			},
		},
	})
	if len(scan.secrets) == made {
		t.Fatal("no hash was recorded: the search would prove nothing")
	}
	scan.inTraceLog(t, logFile)
}
