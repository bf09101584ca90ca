package provider

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	awsguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
	"golang.org/x/crypto/bcrypt"
)

// An aws proxy with a write-only password and a write-only TLS key, its password rotated in place and then
// its key (which replaces it): no state, no plan and no line of the CLI's and the provider's TRACE log holds
// a password, a hash the backend wrote (any bcrypt hash, in fact), a private key or any PRIVATE KEY block; on
// the fake, only the secrets parameter, a SecureString, holds the hash and the key: not the user-data, not a
// tag, not a description, not another parameter. And the SecureString does hold them: read back through SSM
// as the guest reads it, its htpasswd entry verifies against the password of the step (not an earlier one) and
// its TLS key is the step's.
func TestAccProxyAWS_secretsOnlyInTheSecureString(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	fake.PlayGuests()
	logFile := traceLogTo(t)
	password := func(v int) string { return fmt.Sprintf("aws-secret-password-v%d", v) }
	cert1, key1 := testutil.SelfSignedPEM(t, "proxy.test")
	cert2, key2 := testutil.SelfSignedPEM(t, "proxy.test")
	keys := map[int][2]string{1: {cert1, key1}, 2: {cert2, key2}}
	subnet := fake.Subnets(awsTestRegion)[0].ID
	config := func(passwordVersion, keyVersion int) string {
		return awsConfig(t, fake, "", fmt.Sprintf(`
resource "egress_proxy" "test" {
  aws                  = { subnet_id = %q, iam_instance_profile = "egress-proxy" }
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
}`, subnet, password(passwordVersion), passwordVersion, strconv.Quote(keys[keyVersion][0]), strconv.Quote(keys[keyVersion][1]), keyVersion))
	}
	scan := &secretScan{secrets: append([]string{password(1), password(2), "PRIVATE KEY"}, append(keyBodyLines(t, key1), keyBodyLines(t, key2)...)...)}
	made := len(scan.secrets)
	// recordHashes adds the hashes the backend wrote to the secrets, and checks that nothing the fake holds
	// but the secrets parameter carries any of them.
	recordHashes := func(*terraform.State) error {
		readable := map[string]string{} // where on the fake: what it holds
		for _, p := range fake.Parameters(awsTestRegion) {
			if !strings.HasSuffix(p.Name, "/"+awsguest.ParameterSecrets) {
				readable["parameter "+p.Name] = p.Name + " " + p.Value + " " + p.Description + fmt.Sprint(p.Tags)
				continue
			}
			if p.Type != "SecureString" {
				return fmt.Errorf("parameter %s is a %s, want a SecureString", p.Name, p.Type)
			}
			var s awsguest.Secrets
			if err := json.Unmarshal([]byte(p.Value), &s); err != nil {
				return fmt.Errorf("parameter %s: %w", p.Name, err)
			}
			_, hash, _ := strings.Cut(strings.TrimSpace(s.Htpasswd), ":")
			scan.secrets = append(scan.secrets, hash)
		}
		for _, in := range fake.Instances(awsTestRegion) {
			packed, err := base64.StdEncoding.DecodeString(in.UserData)
			if err != nil {
				return fmt.Errorf("user-data of %s: %w", in.ID, err)
			}
			// As cloud-init reads it: the script, uncompressed.
			userData, err := awsguest.DecodeUserData(packed)
			if err != nil {
				return fmt.Errorf("user-data of %s: %w", in.ID, err)
			}
			readable["instance "+in.ID] = string(userData) + " " + in.UserData + " " + fmt.Sprint(in.Tags)
		}
		for _, g := range fake.SecurityGroups(awsTestRegion) {
			readable["security group "+g.ID] = g.Description + fmt.Sprint(g.Tags)
		}
		for _, a := range fake.Addresses(awsTestRegion) {
			readable["address "+a.AllocationID] = fmt.Sprint(a.Tags)
		}
		var found []error
		for where, text := range readable {
			found = append(found, scan.find(where+", outside the SecureString,", text))
		}
		return errors.Join(found...)
	}
	// holds reads the proxy's secrets parameter through SSM, decrypted, as the guest does, and checks that it
	// holds the htpasswd entry of user u for the password of passwordVersion and the TLS key of keyVersion.
	ssmClient := ssm.NewFromConfig(fake.AWSConfig(awsTestRegion))
	holds := func(passwordVersion, keyVersion int) resource.TestCheckFunc {
		return func(s *terraform.State) error {
			name := s.RootModule().Resources["egress_proxy.test"].Primary.Attributes["name"]
			path := awsguest.ParameterPath(name, awsguest.ParameterSecrets)
			out, err := ssmClient.GetParameter(t.Context(), &ssm.GetParameterInput{Name: awssdk.String(path), WithDecryption: awssdk.Bool(true)})
			if err != nil {
				return fmt.Errorf("reading %s: %w", path, err)
			}
			if out.Parameter.Type != ssmtypes.ParameterTypeSecureString {
				return fmt.Errorf("%s is a %s, want a SecureString", path, out.Parameter.Type)
			}
			var sec awsguest.Secrets
			if err := json.Unmarshal([]byte(awssdk.ToString(out.Parameter.Value)), &sec); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			user, hash, _ := strings.Cut(strings.TrimSpace(sec.Htpasswd), ":")
			if user != "u" {
				return fmt.Errorf("%s holds an htpasswd entry of user %q, want u", path, user)
			}
			if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte(password(passwordVersion))); err != nil {
				return fmt.Errorf("%s: its htpasswd entry does not verify against password v%d: %w", path, passwordVersion, err)
			}
			for v := 1; v < passwordVersion; v++ {
				if bcrypt.CompareHashAndPassword([]byte(hash), []byte(password(v))) == nil {
					return fmt.Errorf("%s: its htpasswd entry still verifies against the rotated password v%d", path, v)
				}
			}
			if got, want := pemDER(sec.TLSKey), pemDER(keys[keyVersion][1]); want == nil || !bytes.Equal(got, want) {
				return fmt.Errorf("%s holds a TLS key that is not key v%d", path, keyVersion)
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
		ProtoV6ProviderFactories: awsProviderFactories(),
		Steps: []resource.TestStep{
			{Config: config(1, 1), ConfigPlanChecks: planChecks(plancheck.ResourceActionCreate), Check: resource.ComposeTestCheckFunc(holds(1, 1), recordHashes, scan.inState)},
			{Config: config(2, 1), ConfigPlanChecks: planChecks(plancheck.ResourceActionUpdate), Check: resource.ComposeTestCheckFunc(holds(2, 1), recordHashes, scan.inState)},
			{Config: config(2, 2), ConfigPlanChecks: planChecks(plancheck.ResourceActionDestroyBeforeCreate), Check: resource.ComposeTestCheckFunc(holds(2, 2), recordHashes, scan.inState)},
		},
	})
	if len(scan.secrets) == made {
		t.Fatal("no hash was recorded: the search would prove nothing")
	}
	scan.inTraceLog(t, logFile)
}

// pemDER is the content of the first PEM block of text; nil when it has none.
func pemDER(text string) []byte {
	b, _ := pem.Decode([]byte(text))
	if b == nil {
		return nil
	}
	return b.Bytes
}
