package provider

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// auth's two forms, one user or several, are refused at plan time when mixed or wrong, each error naming the
// attribute at fault, before the backend is called.
func TestAccProxy_invalidUsersRejectedAtPlan(t *testing.T) {
	const base = "  allowed_client_cidrs = [\"10.0.0.0/8\"]\n  kvm = {}\n"
	tests := map[string]refusedConfig{
		"username and users": {base + "  auth = { username = \"a\", password = \"longenough\", users = [{ username = \"b\", password_wo = \"longenough\", password_wo_version = 1 }] }\n",
			`Invalid Attribute Combination.*2 attributes specified when one \(and only one\) of \[auth.username,auth.users\] is required`},
		"neither username nor users": {base + "  auth = { password = \"longenough\" }\n",
			`Invalid Attribute Combination.*No attribute specified when one \(and only one\) of \[auth.username,auth.users\] is required`},
		"users and a password": {base + "  auth = { password = \"longenough\", users = [{ username = \"b\", password_wo = \"longenough\", password_wo_version = 1 }] }\n",
			`Invalid Attribute Combination.*Attribute "auth.users" cannot be specified when "auth.password" is specified`},
		"users twice": {base + "  auth = { users = [{ username = \"b\", password_wo = \"longenough\", password_wo_version = 1 }, { username = \"b\", password_wo = \"longenough2\", password_wo_version = 1 }] }\n",
			`Duplicate username.*Attribute auth.users\[1\].username: "b" already names auth.users\[0\]`},
		"user short password": {base + "  auth = { users = [{ username = \"b\", password_wo = \"short\", password_wo_version = 1 }] }\n",
			`Invalid password.*Attribute auth.users\[0\].password_wo: password must be 8 to 72 bytes`},
		"user without version": {base + "  auth = { users = [{ username = \"b\", password_wo = \"longenough\" }] }\n",
			`Incorrect attribute value type.*attribute "users": element 0: attribute "password_wo_version" is required`},
	}
	expectRefused(t, tests)
}

// Several users, each with a write-only password: the proxy gets every user, a new version of one password
// or a new user changes it in place, and no password reaches the state.
func TestAccProxy_severalUsersChangeInPlace(t *testing.T) {
	mem := newMemoryBackends()
	sameID := statecheck.CompareValue(compare.ValuesSame())
	config := func(users string) string {
		return proxyConfig(fmt.Sprintf(`
  kvm                  = { host = "hv1" }
  allowed_client_cidrs = ["10.0.0.0/8"]
  auth                 = { users = [%s] }
`, users))
	}
	const builder = `{ username = "builder", password_wo = "builder-secret-%d", password_wo_version = %[1]d }`
	const deployer = `{ username = "deployer", password_wo = "deployer-secret", password_wo_version = 1 }`
	steps := []struct {
		users string
		want  []string
	}{
		{fmt.Sprintf(builder, 1) + ", " + deployer, []string{"builder", "deployer"}},
		{fmt.Sprintf(builder, 2) + ", " + deployer, []string{"builder", "deployer"}}, // a new password
		{fmt.Sprintf(builder, 2) + ", " + deployer + `, { username = "auditor", password_wo = "auditor-secret", password_wo_version = 1 }`,
			[]string{"builder", "deployer", "auditor"}}, // a new user
	}
	var testSteps []resource.TestStep
	for i, s := range steps {
		step := resource.TestStep{
			Config: config(s.users),
			ConfigStateChecks: []statecheck.StateCheck{
				sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id")),
				statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("auth").AtMapKey("users").AtSliceIndex(0).AtMapKey("password_wo"), knownvalue.Null()),
			},
			ConfigPlanChecks: resource.ConfigPlanChecks{PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			Check: func(*terraform.State) error {
				for _, inst := range mem[kvm.Kind].Instances() {
					if got := proxyconf.Usernames(inst.Proxy.Users); !slices.Equal(got, s.want) {
						return fmt.Errorf("%s has users %v, want %v", inst.ID, got, s.want)
					}
				}
				if n := mem[kvm.Kind].Calls("reconfigure"); n != i {
					return fmt.Errorf("reconfigure was called %d times, want %d (one per changed apply)", n, i)
				}
				return nil
			},
		}
		if i > 0 {
			step.ConfigPlanChecks.PreApply = []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate)}
		}
		testSteps = append(testSteps, step)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		CheckDestroy:             checkDestroyed(mem),
		Steps:                    testSteps,
	})
}
