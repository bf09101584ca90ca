package provider

import (
	"context"
	"fmt"
	"os/exec"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// TestAccProxyKVM_goneMemberMadeAgainInPlace: one VM of a proxy of three is deleted behind Terraform's back
// (domain and volumes, as `virsh undefine --remove-all-storage` does), the last one, then the first (whose
// domain bears the proxy's name and holds its record: the proxy is read from the others). Each time the refresh
// reads it gone, the plan updates the proxy in place (no replacement: its virtual address stays), the apply
// makes that VM again under its own name and address, and the plan after is empty. On the private libvirt,
// without booting (no wait for the address): what is checked is what the provider and libvirt do, not the
// guest.
func TestAccProxyKVM_goneMemberMadeAgainInPlace(t *testing.T) {
	uri := kvmAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	b := kvmBackend(t, uri)
	config := kvmProviderBlock(owner, uri) + `
resource "egress_proxy" "test" {
  kvm                  = { memory_mib = 256, wait_for_address = false, instances = 3 }
  allowed_client_cidrs = ["198.18.0.0/24"]
  allowed_destinations = [".example.com"]
}
`
	var id backend.ProviderID
	var members []backend.Member
	sameID := statecheck.CompareValue(compare.ValuesSame())
	sameAddress := statecheck.CompareValue(compare.ValuesSame())
	unchanged := func() []statecheck.StateCheck {
		return []statecheck.StateCheck{
			sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id")),
			sameAddress.AddStateValue("egress_proxy.test", tfjsonpath.New("internal_address")),
		}
	}
	// lose deletes member i behind Terraform's back, and makes it again by an apply.
	lose := func(i int) []resource.TestStep {
		return []resource.TestStep{
			{
				PreConfig: func() {
					// Stopped first where it runs (the blank disk boots nothing, but QEMU runs): undefine alone
					// would leave the running VM's domain transient.
					_ = exec.Command("virsh", "-q", "-c", uri, "destroy", members[i].Name).Run()
					virsh(t, uri, "undefine", "--nvram", "--remove-all-storage", members[i].Name)
				},
				RefreshState:       true,
				ExpectNonEmptyPlan: true, // the update that makes the member again
				Check: func(s *terraform.State) error {
					inst, err := b.Get(context.Background(), id)
					if err != nil {
						return fmt.Errorf("the proxy with member %d undefined: %w", i+1, err)
					}
					// The blank disks serve nothing: the proxy reads Failed, not Degraded, here.
					if inst.ID != id || !inst.Members[i].Gone {
						return fmt.Errorf("after the undefine libvirt reports %s, member %+v; want %s, it gone", inst.ID, inst.Members[i], id)
					}
					if a := s.RootModule().Resources["egress_proxy.test"].Primary.Attributes; a["id"] != id.String() {
						return fmt.Errorf("the refresh kept id %q, want %s", a["id"], id)
					}
					return nil
				},
			},
			{
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
					plancheck.ExpectUnknownValue("egress_proxy.test", tfjsonpath.New("members")),
				}},
				ConfigStateChecks: unchanged(),
				Check: func(s *terraform.State) error {
					inst, err := b.Get(context.Background(), id)
					if err != nil {
						return err
					}
					again := inst.Members[i]
					if again.Gone || again.Name != members[i].Name || again.InternalAddress != members[i].InternalAddress {
						return fmt.Errorf("after the apply member %d is %+v, want %s at %s again", i+1, again, members[i].Name, members[i].InternalAddress)
					}
					return nil
				},
			},
			{
				// Made again, the member is no longer gone: nothing more to do.
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectEmptyPlan(),
				}},
			},
		}
	}
	steps := []resource.TestStep{{
		Config:            config,
		ConfigStateChecks: unchanged(),
		Check: func(s *terraform.State) error {
			var inst backend.Instance
			var err error
			if id, inst, err = readBack(s, b); err != nil {
				return err
			}
			if len(inst.Members) != 3 {
				return fmt.Errorf("libvirt reports %d members, want 3", len(inst.Members))
			}
			members = inst.Members
			return nil
		},
	}}
	steps = append(append(steps, lose(2)...), lose(0)...)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             checkOwnerHasNothingLeft(b, owner),
		Steps:                    steps,
	})
}
