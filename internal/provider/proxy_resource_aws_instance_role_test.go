package provider

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/aws"
	awsguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/aws/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
)

// awsOwnRoleProxies are two proxies, a and b, each with its own instance role (aws.create_instance_role), or
// with the settings in aws of each.
func awsOwnRoleProxies(fake *ec2fake.Server, aws string) string {
	var out strings.Builder
	for _, name := range []string{"a", "b"} {
		fmt.Fprintf(&out, `
resource "egress_proxy" %[1]q {
  name = "own-role-%[1]s"
  aws = {
    subnet_id = %[2]q
    %[3]s
  }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]
}
`, name, fake.Subnets(awsTestRegion)[0].ID, aws)
	}
	return out.String()
}

// adminIAMOf reads IAM behind Terraform's back, as a user's console would.
func adminIAMOf(fake *ec2fake.Server) *iam.Client {
	return iam.NewFromConfig(fake.AdminAWSConfig(ec2fake.IAMSigningRegion), func(o *iam.Options) { o.RetryMaxAttempts = 1 })
}

// TestAccProxyAWS_createdInstanceRole: with aws.create_instance_role, the provider makes each proxy a role and
// an instance profile of its own, with the documented caller policy and nothing more; proxy a's instance,
// signing with what IMDS serves it, reads its own parameters and none of b's; the plan after apply is empty,
// an import reads the setting back, and destroy removes roles and profiles. Naming a profile as well, or
// neither, is refused at plan time on the attribute.
func TestAccProxyAWS_createdInstanceRole(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	fake.PlayGuests()
	roles := []string{"egress-proxy-own-role-a-" + awsTestRegion, "egress-proxy-own-role-b-" + awsTestRegion}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: awsProviderFactories(),
		CheckDestroy: func(*terraform.State) error {
			if n := len(liveInstances(fake)); n != 0 {
				return fmt.Errorf("%d instances left after destroy", n)
			}
			for _, name := range roles {
				_, roleErr := adminIAMOf(fake).GetRole(t.Context(), &iam.GetRoleInput{RoleName: awssdk.String(name)})
				_, profileErr := adminIAMOf(fake).GetInstanceProfile(t.Context(), &iam.GetInstanceProfileInput{InstanceProfileName: awssdk.String(name)})
				if roleErr == nil || profileErr == nil {
					return fmt.Errorf("role %s or its instance profile left after destroy", name)
				}
				if err := errors.Join(roleErr, profileErr); strings.Count(err.Error(), "NoSuchEntity") != 2 {
					return fmt.Errorf("reading role %s and its instance profile after destroy: %w", name, err)
				}
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: awsConfig(t, fake, "", awsOwnRoleProxies(fake, `create_instance_role = true
    iam_instance_profile = "egress-proxy"`)),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)Conflicting aws.create_instance_role.*iam_instance_profile\s+must\s+not\s+be\s+set`),
			},
			{
				Config:      awsConfig(t, fake, "", awsOwnRoleProxies(fake, `create_instance_role = false`)),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)Missing aws.iam_instance_profile.*create_instance_role\s+=\s+true`),
			},
			{
				Config: awsConfig(t, fake, "", awsOwnRoleProxies(fake, `create_instance_role = true`)),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("egress_proxy.a", tfjsonpath.New("aws").AtMapKey("create_instance_role"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("egress_proxy.a", tfjsonpath.New("aws").AtMapKey("iam_instance_profile"), knownvalue.Null()),
				},
				Check: func(*terraform.State) error {
					ids := map[string]string{}
					for _, in := range liveInstances(fake) {
						ids[in.Tags["Name"]] = in.ID
						if want := aws.InstanceRolePrefix + in.Tags["Name"] + "-" + awsTestRegion; in.IAMInstanceProfile != want {
							return fmt.Errorf("instance %s runs with profile %q, want %q", in.ID, in.IAMInstanceProfile, want)
						}
					}
					k, sk, tok := fake.InstanceCredentials(awsTestRegion, ids["own-role-a"], time.Hour)
					cfg := fake.AWSConfig(awsTestRegion)
					cfg.Credentials = credentials.NewStaticCredentialsProvider(k, sk, tok)
					asA := ssm.NewFromConfig(cfg, func(o *ssm.Options) { o.RetryMaxAttempts = 1 })
					read := func(proxy string) error {
						_, err := asA.GetParameters(t.Context(), &ssm.GetParametersInput{WithDecryption: awssdk.Bool(true), Names: []string{
							awsguest.ParameterPath(proxy, awsguest.ParameterConfig), awsguest.ParameterPath(proxy, awsguest.ParameterSecrets)}})
						return err
					}
					if err := read("own-role-a"); err != nil {
						return fmt.Errorf("proxy a's instance reading its own parameters: %w", err)
					}
					switch err := read("own-role-b"); {
					case err == nil:
						return fmt.Errorf("proxy a's instance read b's secrets, want AccessDeniedException")
					case !strings.Contains(err.Error(), "AccessDeniedException"):
						return fmt.Errorf("proxy a's instance reading b's secrets: %w, want AccessDeniedException", err)
					}
					return nil
				},
			},
			{
				Config:   awsConfig(t, fake, "", awsOwnRoleProxies(fake, `create_instance_role = true`)),
				PlanOnly: true,
			},
			{
				ResourceName:            "egress_proxy.a",
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts"},
			},
		},
	})
}
