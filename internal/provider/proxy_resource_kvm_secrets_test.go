package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/egress-proxies/terraform-provider-egress/internal/testutil"
)

// bcryptHash matches any htpasswd bcrypt hash: the backend makes the proxy's from the password, so the test
// cannot know it, but can find one wherever it turns up.
var bcryptHash = regexp.MustCompile(`\$2[aby]\$[0-9]{2}\$[./A-Za-z0-9]{53}`)

// A kvm proxy with a write-only password and a write-only TLS key, on both CLIs, without waiting for the VM to
// boot (the secrets reach the seed volume at create, whether the guest ever reads them or not): no state, no
// plan and no line of the CLI's and the provider's TRACE log holds the password, any bcrypt hash, the key's
// body or a PRIVATE KEY block. The booted test proves the same for in-place changes on OpenTofu; this one is
// the check the Terraform leg runs too.
func TestAccProxyKVM_secretsInNoStatePlanOrLog(t *testing.T) {
	uri := kvmAccPreCheck(t)
	logFile := filepath.Join(t.TempDir(), "trace.log")
	t.Setenv("TF_ACC_LOG_PATH", logFile)
	t.Setenv("TF_LOG", "TRACE")
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
	secrets := append([]string{password, "PRIVATE KEY"}, keyBodyLines(t, key)...)
	noSecret := func(where, text string) error {
		for _, secret := range secrets {
			if strings.Contains(text, secret) {
				return fmt.Errorf("%s holds a secret: %.12q...", where, secret)
			}
		}
		if h := bcryptHash.FindString(text); h != "" {
			return fmt.Errorf("%s holds a bcrypt hash: %.12q...", where, h)
		}
		return nil
	}
	noSecretInState := func(s *terraform.State) error {
		for name, rs := range s.RootModule().Resources {
			for key, value := range rs.Primary.Attributes {
				if err := noSecret(fmt.Sprintf("state of %s, attribute %s", name, key), value); err != nil {
					return err
				}
			}
		}
		return nil
	}
	noSecretInPlanValues := planCheckFunc(func(ctx context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) error {
		noSecretInPlan{secrets: secrets}.CheckPlan(ctx, req, resp)
		return resp.Error
	})
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             checkOwnerHasNothingLeft(b, owner),
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionCreate), noSecretInPlanValues,
				}},
				Check: noSecretInState,
			},
			{
				// A refresh and a plan of the made proxy: its read-back carries nothing secret either.
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectEmptyPlan(), noSecretInPlanValues,
				}},
				Check: noSecretInState,
			},
		},
	})
	trace, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatalf("reading the trace log: %v", err)
	}
	logged := withoutConfigEchoes(string(trace))
	// The provider's own TRACE lines must be there, or the search below would prove nothing.
	if !strings.Contains(logged, "ApplyResourceChange") {
		t.Fatal("the trace log holds no provider RPC: the search would prove nothing")
	}
	if err := noSecret("the TRACE log "+logFile, logged); err != nil {
		t.Error(err)
	}
}
