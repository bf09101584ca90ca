package provider

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/secretmanagerfake"
)

// cloud_logging on the Compute fake: refused at plan time on the attribute at fault without a service account
// or with scopes that cannot write logs; created on, it names the proxy's log in the VM's metadata; turned off
// and on again it changes in place (the same VM, its id unchanged), and an import reads it back.
func TestAccProxyGCP_cloudLogging(t *testing.T) {
	fake := gcpFake(t)
	// A VM with a service account has a Secret Manager secret to look for when it is deleted.
	sm := secretmanagerfake.New(secretmanagerfake.Options{AdminToken: "acc-token", AdminPermissions: gcpDocumentedRole(t)})
	t.Cleanup(sm.Close)
	proxy := func(gcpBody string) string {
		return gcpProviderWithSecrets(fake, sm.URL, "us-central1-a") + fmt.Sprintf(`
resource "egress_proxy" "test" {
  name                 = "egress-acc-log"
  gcp                  = { %s }
  allowed_client_cidrs = ["10.0.0.0/8"]
}
`, gcpBody)
	}
	const sa = `service_account = "proxy@` + gcpTestProject + `.iam.gserviceaccount.com"`
	logKey := func(want bool) resource.TestCheckFunc {
		return func(*terraform.State) error {
			in := fake.Instance(gcpTestProject, "us-central1-a", "egress-acc-log")
			if in == nil {
				return fmt.Errorf("no instance egress-acc-log")
			}
			for _, it := range in.GetMetadata().GetItems() {
				if it.GetKey() == gcpguest.MetadataCloudLogging {
					if !want || it.GetValue() != gcp.CloudLogID("egress-acc-log") {
						return fmt.Errorf("metadata %s = %q, want it only while cloud_logging is on, as %q", it.GetKey(), it.GetValue(), gcp.CloudLogID("egress-acc-log"))
					}
					return nil
				}
			}
			if want {
				return fmt.Errorf("no metadata %s while cloud_logging is on", gcpguest.MetadataCloudLogging)
			}
			return nil
		}
	}
	// Off is null: unset in the configuration, as in a state from before the attribute existed.
	on := func(v bool) []statecheck.StateCheck {
		var want knownvalue.Check = knownvalue.Null()
		if v {
			want = knownvalue.Bool(true)
		}
		return []statecheck.StateCheck{statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("gcp").AtMapKey("cloud_logging"), want)}
	}
	inPlace := resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate)}}
	sameID := statecheck.CompareValue(compare.ValuesSame())
	// The VM's own numeric id, which a replacement of the same name would change.
	var vmID uint64
	sameVM := func() resource.TestCheckFunc {
		return func(*terraform.State) error {
			in := fake.Instance(gcpTestProject, "us-central1-a", "egress-acc-log")
			switch {
			case in == nil:
				return fmt.Errorf("no instance egress-acc-log")
			case vmID == 0:
				vmID = in.GetId()
			case in.GetId() != vmID:
				return fmt.Errorf("the VM was replaced: id %d, was %d", in.GetId(), vmID)
			}
			return nil
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		Steps: []resource.TestStep{
			{
				Config:      (proxy(`cloud_logging = true`)),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)Missing .*service_account.*gcp\.cloud_logging is true.*no identity to write with`),
			},
			{
				Config:      (proxy(sa + `, scopes = ["https://www.googleapis.com/auth/devstorage.read_only"], cloud_logging = true`)),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`(?s)Cloud logging needs a scope that writes logs.*logging\.write`),
			},
			{
				Config:            (proxy(sa + `, cloud_logging = true`)),
				ConfigStateChecks: append(on(true), sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id"))),
				Check:             resource.ComposeTestCheckFunc(logKey(true), sameVM()),
			},
			{
				ResourceName:            "egress_proxy.test",
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts"},
			},
			{
				Config:            (proxy(sa)),
				ConfigPlanChecks:  inPlace,
				ConfigStateChecks: append(on(false), sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id"))),
				Check:             resource.ComposeTestCheckFunc(logKey(false), sameVM()),
			},
			{
				Config:            (proxy(sa + `, cloud_logging = true`)),
				ConfigPlanChecks:  inPlace,
				ConfigStateChecks: append(on(true), sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id"))),
				Check:             resource.ComposeTestCheckFunc(logKey(true), sameVM()),
			},
		},
	})
}
