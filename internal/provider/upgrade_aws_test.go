package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/ec2fake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// TestAccUpgrade_aws: a proxy the baseline made on EC2 (an instance, its security group, an Elastic IP, its
// parameters and SecureString) is planned and applied by HEAD without a change, and without one call to EC2 or
// SSM that changes anything. Runs on the fake, which the baseline reaches through the provider's endpoints.
func TestAccUpgrade_aws(t *testing.T) {
	fake := awsFake(t, ec2fake.Options{})
	fake.PlayGuests()
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	// The baseline commit's aws backend panics on its first request when AWS_CA_BUNDLE is unset (fixed in
	// 34dac67), so a user of it had one set, as every shell of ours does but a fresh machine's `env -i` does not.
	// Any bundle serves: the fake answers plain HTTP. Drop this when the baseline moves past that fix.
	bundle := filepath.Join(t.TempDir(), "bundle.pem")
	if err := os.WriteFile(bundle, []byte(cert), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CA_BUNDLE", bundle)
	config := awsConfig(t, fake, "", fmt.Sprintf(`
resource "egress_proxy" "test" {
  name = "egress-upgrade"
  aws = {
    subnet_id            = %q
    iam_instance_profile = "egress-proxy"
    static_egress_ip     = true
  }
  %s
  %s
  %s
}
`, fake.Subnets(awsTestRegion)[0].ID, upgradeRules, writeOnlyAuth("upgrade-password", 1), writeOnlyTLS(cert, key)))
	var before map[string]string
	var mark int
	resource.Test(t, resource.TestCase{
		PreCheck: func() { testAccPreCheck(t) },
		Steps: upgradeSteps(t, config,
			func() error {
				before, mark = awsUpgradeObjects(fake), len(fake.Requests())
				if len(liveInstances(fake)) != 1 {
					return fmt.Errorf("the baseline made %d instances, want 1", len(liveInstances(fake)))
				}
				return nil
			},
			func() error {
				var changes []string
				for _, r := range fake.Requests()[mark:] {
					if awsMutates(r.Action) {
						changes = append(changes, r.Service+" "+r.Action)
					}
				}
				if len(changes) != 0 {
					return fmt.Errorf("HEAD's plan and apply changed the backend: %v", changes)
				}
				if changed := changedSince(before, awsUpgradeObjects(fake)); len(changed) != 0 {
					return fmt.Errorf("the fake's objects changed after HEAD's apply:\n%s", strings.Join(changed, "\n"))
				}
				return nil
			}),
	})
}

// awsMutates tells a call that may change something from one that only reads: EC2's Describe*, SSM's
// Get*/List*, STS's GetCallerIdentity and AssumeRole (a session, nothing in the account) and Service Quotas'
// Get* read. Any other action the fake serves (RunInstances, CreateTags, PutParameter, ...) writes.
func awsMutates(action string) bool {
	for _, read := range []string{"Describe", "Get", "List"} {
		if strings.HasPrefix(action, read) {
			return false
		}
	}
	return action != "AssumeRole"
}

// awsUpgradeObjects describes every object of the fake's region the proxy is made of, by id: each printed whole (its
// state, tags, rules, association, a parameter's version and value), so that any change shows.
func awsUpgradeObjects(fake *ec2fake.Server) map[string]string {
	out := map[string]string{}
	for _, in := range fake.Instances(awsTestRegion) {
		out["instance "+in.ID] = fmt.Sprintf("%+v", in)
	}
	for _, g := range fake.SecurityGroups(awsTestRegion) {
		out["security group "+g.ID] = fmt.Sprintf("%+v", g)
	}
	for _, a := range fake.Addresses(awsTestRegion) {
		out["address "+a.AllocationID] = fmt.Sprintf("%+v", a)
	}
	for _, p := range fake.Parameters(awsTestRegion) {
		out["parameter "+p.Name] = fmt.Sprintf("%+v", p)
	}
	return out
}
