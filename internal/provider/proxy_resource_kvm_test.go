package provider

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
)

// These tests drive real QEMU domains through the libvirtd that scripts/libvirt-env.sh runs in its own
// network namespace; `make testacc` sets EGRESS_LIBVIRT_URI for them.

func kvmAccPreCheck(t *testing.T) string {
	t.Helper()
	// Called before resource.Test, which is where the TF_ACC gate would otherwise be: a plain `go test` on a
	// machine without the acceptance environment skips these tests instead of failing them.
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1 (make testacc)")
	}
	testAccPreCheck(t)
	uri := os.Getenv("EGRESS_LIBVIRT_URI")
	if uri == "" {
		t.Fatal("EGRESS_LIBVIRT_URI must name the test libvirtd (the URI `scripts/libvirt-env.sh start` prints): run `make test-provider`, or start the environment and `make testacc`")
	}
	return uri
}

func realProviders() map[string]func() (tfprotov6.ProviderServer, error) {
	return map[string]func() (tfprotov6.ProviderServer, error){
		"egress": providerserver.NewProtocol6WithError(New("test")()),
	}
}

func kvmProviderBlock(owner, uri string) string {
	return fmt.Sprintf(`
provider "egress" {
  owner = %q
  kvm = {
    hosts       = { local = { uri = %q } }
    pool        = "egress-test"
    network     = "egress-test"
    base_volume = "egress-base.qcow2"
    domain_type = "qemu"
  }
}
`, owner, uri)
}

// kvmBackend is the same backend the provider builds, used by the tests to look behind Terraform's back.
func kvmBackend(t *testing.T, uri string) *kvm.Backend {
	t.Helper()
	b, err := kvm.New(kvm.Config{Hosts: map[string]kvm.HostConfig{"local": {URI: uri, Pool: "egress-test", Network: "egress-test", BaseVolume: "egress-base.qcow2", DomainType: kvm.DomainTypeQEMU}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// readBack is egress_proxy.test's id in state s, and what b reads of it behind Terraform's back.
func readBack(s *terraform.State, b backend.Backend) (backend.ProviderID, backend.Instance, error) {
	id, err := idForms.Parse(s.RootModule().Resources["egress_proxy.test"].Primary.ID)
	if err != nil {
		return id, backend.Instance{}, err
	}
	inst, err := b.Get(context.Background(), id)
	return id, inst, err
}

// checkOwnerHasNothingLeft proves a destroy complete: ListByTag reports domains and also volumes whose domain
// is gone, so an empty list means no domain and no volume of this owner is left.
func checkOwnerHasNothingLeft(b backend.Backend, owner string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		left, err := b.ListByTag(context.Background(), backend.Selector{Owner: owner})
		if err != nil {
			return fmt.Errorf("listing the owner's objects after destroy: %w", err)
		}
		if len(left) != 0 {
			return fmt.Errorf("after destroy the owner still has %d objects: %+v", len(left), left)
		}
		return nil
	}
}

func TestAccProxyKVM_lifecycleOnRealLibvirt(t *testing.T) {
	uri := kvmAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	b := kvmBackend(t, uri)
	config := kvmProviderBlock(owner, uri) + `
resource "egress_proxy" "test" {
  kvm                  = { memory_mib = 256, wait_for_address = false }
  allowed_client_cidrs = ["198.18.0.0/24"]
  allowed_destinations = [".example.com"]
  labels               = { suite = "acceptance" }
}
`
	var id backend.ProviderID
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy: func(*terraform.State) error {
			if _, err := b.Get(context.Background(), id); err == nil {
				return fmt.Errorf("%s still exists after destroy", id)
			} else if !backend.IsNotFound(err) {
				return fmt.Errorf("%s after destroy: get returned %w, want NotFound", id, err)
			}
			return checkOwnerHasNothingLeft(b, owner)(nil)
		},
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("state"), knownvalue.StringExact("Running")),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("kvm").AtMapKey("host"), knownvalue.StringExact("local")),
				},
				Check: func(s *terraform.State) error {
					var inst backend.Instance
					var err error
					if id, inst, err = readBack(s, b); err != nil {
						return err
					}
					if inst.State != backend.StateRunning || inst.Owner != owner || inst.Labels["suite"] != "acceptance" {
						return fmt.Errorf("libvirt reports %+v", inst)
					}
					return nil
				},
			},
			{
				ResourceName:            "egress_proxy.test",
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts"},
			},
			{
				// An import block plans an import and nothing else: no replacement of what the host filled in.
				ResourceName:    "egress_proxy.test",
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithID,
			},
			{
				// The domain is destroyed behind Terraform's back: the next plan creates it again.
				PreConfig: func() {
					if err := b.Delete(context.Background(), id); err != nil {
						t.Fatalf("deleting %s behind terraform's back: %v", id, err)
					}
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionCreate),
				}},
			},
		},
	})
}

func TestAccProxyKVM_hostErrors(t *testing.T) {
	uri := kvmAccPreCheck(t)
	tests := map[string]struct {
		provider, placement, want string
	}{
		"memory beyond the host is Quota": {
			kvmProviderBlock("acc-quota", uri), `kvm = { memory_mib = 1048576, wait_for_address = false }`,
			`(?s)Egress proxy backend limit reached.*Error class: Quota.*ask for fewer vCPUs, less memory`,
		},
		// Within its connect_timeout, well inside the create timeout below: the error comes from the dial
		// bound, not from the operation running out of time.
		"unreachable host fails fast and says so": {
			`provider "egress" {
  owner = "acc-unreachable"
  kvm   = { hosts = { local = { uri = "qemu+tcp://127.0.0.1:9/system", insecure = true, connect_timeout = "2s" } }, base_volume = "egress-base.qcow2" }
}`, `kvm = { wait_for_address = false }`,
			`(?s)Error: Egress proxy request refused by the backend.*Error class: Permanent.*127.0.0.1:9.*could not be reached within 2s.*is libvirtd running there`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resource.Test(t, resource.TestCase{
				PreCheck:                 func() { kvmAccPreCheck(t) },
				ProtoV6ProviderFactories: realProviders(),
				Steps: []resource.TestStep{{
					Config: tc.provider + `
resource "egress_proxy" "test" {
  ` + tc.placement + `
  allowed_client_cidrs = ["198.18.0.0/24"]
  timeouts {
    create = "2m"
  }
}
`,
					ExpectError: wrapped(tc.want),
				}},
			})
		})
	}
}
