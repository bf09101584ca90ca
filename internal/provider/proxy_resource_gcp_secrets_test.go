package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
// a password, a password hash the backend wrote, a private key or any PRIVATE KEY block. The metadata itself
// is the gcp backend's test (TestReadableInstanceHoldsNoSecret).
func TestAccProxyGCP_secretsInNoStatePlanOrLog(t *testing.T) {
	fake := gcpFake(t)
	gcpGuests(t, fake)
	logFile := filepath.Join(t.TempDir(), "trace.log")
	t.Setenv("TF_ACC_LOG_PATH", logFile)
	t.Setenv("TF_LOG", "TRACE")
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
	secrets := append([]string{password(1), password(2), "PRIVATE KEY"}, append(keyBodyLines(t, key1), keyBodyLines(t, key2)...)...)
	made := len(secrets)
	recordHashes := func(*terraform.State) error {
		for _, in := range fake.Instances() {
			for _, it := range in.GetMetadata().GetItems() {
				if it.GetKey() == proxyconf.MetadataHtpasswd {
					_, hash, _ := strings.Cut(strings.TrimSpace(it.GetValue()), ":")
					secrets = append(secrets, hash)
				}
			}
		}
		return nil
	}
	noSecretInState := func(s *terraform.State) error {
		for _, secret := range secrets {
			if err := checkNoSecretInState(secret)(s); err != nil {
				return fmt.Errorf("%w (%.12q...)", err, secret)
			}
		}
		return nil
	}
	planChecks := func(action plancheck.ResourceActionType) resource.ConfigPlanChecks {
		// The check reads secrets when it runs, so it looks for the hashes recorded by the steps before.
		return resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
			plancheck.ExpectResourceAction("egress_proxy.test", action),
			planCheckFunc(func(ctx context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) error {
				noSecretInPlan{secrets: secrets}.CheckPlan(ctx, req, resp)
				return resp.Error
			}),
		}}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		Steps: []resource.TestStep{
			{
				Config:           config(1, 1),
				ConfigPlanChecks: planChecks(plancheck.ResourceActionCreate),
				Check:            resource.ComposeTestCheckFunc(recordHashes, noSecretInState),
			},
			{
				// A new password, in place.
				Config:           config(2, 1),
				ConfigPlanChecks: planChecks(plancheck.ResourceActionUpdate),
				Check:            resource.ComposeTestCheckFunc(recordHashes, noSecretInState),
			},
			{
				// A new key, by replacement.
				Config:           config(2, 2),
				ConfigPlanChecks: planChecks(plancheck.ResourceActionDestroyBeforeCreate),
				Check:            resource.ComposeTestCheckFunc(recordHashes, noSecretInState),
			},
		},
	})
	trace, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatalf("reading the trace log: %v", err)
	}
	logged := withoutConfigEchoes(string(trace))
	// The provider's own TRACE lines must be there, or the search below would prove nothing.
	if !strings.Contains(logged, "ApplyResourceChange") || len(secrets) == made {
		t.Fatalf("the trace log holds no provider RPC, or no hash was recorded (%d secrets): the search would prove nothing", len(secrets))
	}
	for _, secret := range secrets {
		if strings.Contains(logged, secret) {
			t.Errorf("the TRACE log %s holds a secret: %.12q...", logFile, secret)
		}
	}
}

// keyBodyLines are the base64 lines of a PEM key: found wherever the key is, whatever escapes the newlines
// between them (JSON, a log line).
func keyBodyLines(t *testing.T, keyPEM string) []string {
	t.Helper()
	var body []string
	for _, line := range strings.Split(strings.TrimSpace(keyPEM), "\n") {
		if !strings.HasPrefix(line, "-----") {
			body = append(body, line)
		}
	}
	if len(body) == 0 {
		t.Fatalf("not a PEM key: %.20q", keyPEM)
	}
	return body
}
