package provider

import (
	"fmt"
	"regexp"
	"slices"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/secretmanagerfake"
)

// gcpDocumentedRole is the custom role the docs tell users to grant the provider's account for the gcp
// backend, read from examples/: the gcp acceptance tests give the fakes exactly these permissions, so a call
// the role does not cover fails them.
func gcpDocumentedRole(t *testing.T) []string {
	t.Helper()
	role, err := computefake.DocumentedRole()
	if err != nil {
		t.Fatal(err)
	}
	return role.IncludedPermissions
}

// egress_backends reports, by name, the permissions the documented role has and the provider's account lacks,
// as Degraded (asking Resource Manager's testIamPermissions, which the Compute fake serves), and the data
// source still reads.
func TestAccProxyGCP_backendsNameMissingPermissions(t *testing.T) {
	lacking := slices.DeleteFunc(gcpDocumentedRole(t), func(p string) bool {
		return p == "compute.addresses.create" || p == "iam.serviceAccounts.actAs"
	})
	fake := computefake.New(computefake.Options{Token: "acc-token", Permissions: lacking})
	t.Cleanup(fake.Close)
	// egress_backends lists the owner's proxies too, which asks Secret Manager for the secrets of gone ones.
	sm := secretmanagerfake.New(secretmanagerfake.Options{AdminToken: "acc-token", AdminPermissions: gcpDocumentedRole(t)})
	t.Cleanup(sm.Close)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		Steps: []resource.TestStep{{
			Config: gcpProviderWithSecrets(fake, sm.URL, "") + `
data "egress_backends" "all" {}
`,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("healthy"), knownvalue.Bool(false)),
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends").AtSliceIndex(0), knownvalue.ObjectPartial(map[string]knownvalue.Check{
					"backend": knownvalue.StringExact("gcp"),
					"healthy": knownvalue.Bool(false),
					"reason":  knownvalue.StringExact(backend.HealthDegraded),
					"details": knownvalue.MapPartial(map[string]knownvalue.Check{
						gcp.DetailMissingPermissions: knownvalue.StringExact("compute.addresses.create, iam.serviceAccounts.actAs"),
						backend.DetailMessage:        knownvalue.StringRegexp(regexp.MustCompile(regexp.QuoteMeta(gcp.RoleFile))),
					}),
				})),
			},
		}},
	})
}

// A create the account is not allowed fails at once, its diagnostic naming the permission and the role file that
// grants it, and leaves nothing behind (the static address reserved first is given back).
func TestAccProxyGCP_createWithoutPermissionNamesIt(t *testing.T) {
	lacking := slices.DeleteFunc(gcpDocumentedRole(t), func(p string) bool { return p == "compute.subnetworks.useExternalIp" })
	fake := computefake.New(computefake.Options{Token: "acc-token", Permissions: lacking})
	t.Cleanup(fake.Close)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		Steps: []resource.TestStep{{
			Config:      gcpConfig(fake, "acc-token", gcpProxy("", "")),
			ExpectError: regexp.MustCompile(`(?s)compute\.subnetworks\.useExternalIp.*` + regexp.QuoteMeta(gcp.RoleFile)),
		}},
		CheckDestroy: func(*terraform.State) error {
			if n, a := len(fake.Instances()), fake.Address(gcpTestProject, "us-central1", "egress-acc-ip"); n != 0 || a != nil {
				return fmt.Errorf("%d instances and address %v left after a refused create", n, a)
			}
			return nil
		},
	})
}
