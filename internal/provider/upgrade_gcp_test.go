package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/secretmanagerfake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// TestAccUpgrade_gcp: a proxy the baseline made on Compute Engine (a VM with its metadata and labels, a
// reserved address, its secrets in Secret Manager) is planned and applied by HEAD without a change, and without
// one call to Compute or Secret Manager that changes anything. Runs on the fakes, which the baseline reaches
// through the provider's endpoints.
func TestAccUpgrade_gcp(t *testing.T) {
	fake := gcpFake(t)
	sm := secretmanagerfake.New(secretmanagerfake.Options{AdminToken: "acc-token", AdminPermissions: gcpDocumentedRole(t)})
	t.Cleanup(sm.Close)
	gcpGuests(t, fake)
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	config := fmt.Sprintf(`
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
  name = "egress-upgrade"
  gcp = {
    static_egress_ip = true
    service_account  = "proxy@%s.iam.gserviceaccount.com"
  }
  %s
  %s
  %s
}
`, gcpTestProject, fake.URL, sm.URL, gcpTestProject, upgradeRules, writeOnlyAuth("upgrade-password", 1), writeOnlyTLS(cert, key))
	var before map[string]string
	var mark, smMark int
	resource.Test(t, resource.TestCase{
		PreCheck: func() { testAccPreCheck(t) },
		Steps: upgradeSteps(t, config,
			func() error {
				before, mark, smMark = gcpUpgradeObjects(fake, sm), len(fake.Requests()), len(sm.Requests())
				if len(fake.Instances()) != 1 || len(sm.Secrets(gcpTestProject)) != 1 {
					return fmt.Errorf("the baseline made %d instances and %d secrets, want 1 and 1", len(fake.Instances()), len(sm.Secrets(gcpTestProject)))
				}
				return nil
			},
			func() error {
				var changes []string
				for _, r := range fake.Requests()[mark:] {
					if gcpMutates(r.Method, r.Path) {
						changes = append(changes, "compute "+r.Method+" "+r.Path)
					}
				}
				for _, r := range sm.Requests()[smMark:] {
					if r.Method != "GET" { // Secret Manager's reads (get, access, list) are all GETs
						changes = append(changes, "secret manager "+r.Method+" "+r.Path)
					}
				}
				if len(changes) != 0 {
					return fmt.Errorf("HEAD's plan and apply changed the backend: %v", changes)
				}
				if changed := changedSince(before, gcpUpgradeObjects(fake, sm)); len(changed) != 0 {
					return fmt.Errorf("the fakes' objects changed after HEAD's apply:\n%s", strings.Join(changed, "\n"))
				}
				return nil
			}),
	})
}

// gcpMutates tells a Compute call that may change something from one that only reads: GETs, an operation's
// wait (a POST that waits for one already made) and Resource Manager's testIamPermissions (a question).
func gcpMutates(method, path string) bool {
	return method != "GET" && !strings.HasSuffix(path, "/wait") && !strings.HasSuffix(path, ":testIamPermissions")
}

// gcpUpgradeObjects describes every object of the fakes the proxy is made of: each VM and address printed whole
// (status, metadata and its fingerprint, labels, access configs), and each secret with its versions' payloads.
func gcpUpgradeObjects(fake *computefake.Server, sm *secretmanagerfake.Server) map[string]string {
	out := map[string]string{}
	for _, in := range fake.Instances() {
		out["instance "+in.GetName()] = prototext.Format(in)
		region := "us-central1"
		if a := fake.Address(gcpTestProject, region, in.GetName()+"-ip"); a != nil {
			out["address "+a.GetName()] = prototext.Format(a)
		}
	}
	for _, id := range sm.Secrets(gcpTestProject) {
		out["secret "+id] = fmt.Sprintf("%q %q", prototext.Format(sm.Secret(gcpTestProject, id)), sm.Payloads(gcpTestProject, id))
	}
	return out
}
