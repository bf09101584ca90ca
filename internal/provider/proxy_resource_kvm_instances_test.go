package provider

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"
	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
)

// TestAccProxyKVM_instancesRefusedAtPlan: several instances with what cannot serve them is refused by the
// plan, on kvm.instances, before anything is created.
func TestAccProxyKVM_instancesRefusedAtPlan(t *testing.T) {
	for name, tc := range map[string]struct {
		kvm, want string
	}{
		"user_net": {`{ host = "hv1", instances = 2, user_net = true, forward_port = 3128 }`, `Attribute kvm.instances: instances > 1 needs a libvirt network: with user_net`},
		"bridge":   {`{ host = "hv1", instances = 2, bridge = "br0" }`, `Attribute kvm.instances: instances > 1 needs a libvirt network: on a bridge`},
		"ip":       {`{ host = "hv1", instances = 3, ip = "198.18.0.9" }`, `Attribute kvm.instances: instances > 1 takes neither mac nor ip`},
		"mac":      {`{ host = "hv1", instances = 2, mac = "52:54:00:12:34:56" }`, `Attribute kvm.instances: instances > 1 takes neither mac nor ip`},
		"none":     {`{ host = "hv1", instances = 0 }`, `Attribute kvm.instances value must be between 1 and 9`},
		"too many": {`{ host = "hv1", instances = 10 }`, `Attribute kvm.instances value must be between 1 and 9`},
	} {
		t.Run(name, func(t *testing.T) {
			mem := newMemoryBackends()
			tfresource.Test(t, tfresource.TestCase{
				PreCheck:                 func() { testAccPreCheck(t) },
				ProtoV6ProviderFactories: mem.protoV6(),
				Steps: []tfresource.TestStep{{
					Config: proxyConfig(`
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = ["api.example.com"]
  kvm = ` + tc.kvm),
					PlanOnly:    true,
					ExpectError: wrapped(tc.want),
				}},
			})
			for kind, b := range mem {
				if n := b.Calls("create"); n != 0 {
					t.Errorf("%s: create was called %d times", kind, n)
				}
			}
		})
	}
}

// A state written before instances existed holds null: planned against the default of one, it neither
// replaces the proxy (sameInstances) nor shows a change (instancesAddedLater keeps the null); any other
// change of instances replaces it.
func TestKVMInstancesAddedLater(t *testing.T) {
	t.Parallel()
	vals := func(v types.Int64) map[string]attr.Value { return map[string]attr.Value{"instances": v} }
	for name, tc := range map[string]struct {
		prior, planned types.Int64
		same           bool
	}{
		"null to the default": {types.Int64Null(), types.Int64Value(1), true},
		"null to two":         {types.Int64Null(), types.Int64Value(2), false},
		"one to two":          {types.Int64Value(1), types.Int64Value(2), false},
		"null to unknown":     {types.Int64Null(), types.Int64Unknown(), false},
	} {
		if got := sameInstances(context.Background(), vals(tc.prior), vals(tc.planned)); got != tc.same {
			t.Errorf("%s: sameInstances = %v, want %v", name, got, tc.same)
		}
	}
}

// A new image over a proxy of two instances is rolled in place, on both CLIs: the plan is an update (the base
// volume unknown until the apply placed the image), and the apply keeps the proxy's id, its virtual address and
// both domains (their UUIDs), and makes each domain's root disk again over the new image's volume; the next plan
// is empty. The images boot nothing (wait_for_address = false): the roll's order, its retirement of each VM and
// its waits are the backend's tests' (ha_test.go on the fake host, live_failover_test.go with booted VMs).
func TestAccProxyKVM_imageRolledInPlace(t *testing.T) {
	uri := kvmAccPreCheck(t)
	first, second := uniqueQCOW2(t), uniqueQCOW2(t)
	before := imageVolumes(t, uri)
	t.Cleanup(func() {
		// Image volumes belong to no proxy, so the provider never deletes them: this test's go here.
		for _, v := range imageVolumes(t, uri) {
			if !slices.Contains(before, v) {
				_ = exec.Command("virsh", "-q", "-c", uri, "vol-delete", "--pool", "egress-test", v).Run()
			}
		}
	})
	owner := "acc-" + uuid.NewString()[:8]
	b := kvmBackend(t, uri)
	config := func(image string) string {
		return kvmProviderBlock(owner, uri) + fmt.Sprintf(`
resource "egress_proxy" "test" {
  kvm                  = { instances = 2, image_file = %q, memory_mib = 256, wait_for_address = false }
  allowed_client_cidrs = ["198.18.0.0/24"]
}
`, image)
	}
	domainUUID := func(name string) (string, error) {
		out, err := exec.Command("virsh", "-q", "-c", uri, "domuuid", name).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	backingOf := regexp.MustCompile(`<backingStore>\s*<path>([^<]+)</path>`)
	rootBacking := func(name string) (string, error) {
		out, err := exec.Command("virsh", "-q", "-c", uri, "vol-dumpxml", "--pool", "egress-test", name+"-root.qcow2").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("virsh vol-dumpxml: %w: %s", err, out)
		}
		m := backingOf.FindStringSubmatch(string(out))
		if m == nil {
			return "", fmt.Errorf("root volume of %s has no backing store:\n%s", name, out)
		}
		return m[1], nil
	}
	var id, address, firstVolume string
	uuids := map[string]string{}
	tfresource.Test(t, tfresource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             checkOwnerHasNothingLeft(b, owner),
		Steps: []tfresource.TestStep{
			{
				Config: config(first),
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources["egress_proxy.test"].Primary.Attributes
					id, address, firstVolume = a["id"], a["internal_address"], a["kvm.base_volume"]
					for _, name := range []string{a["members.0.name"], a["members.1.name"]} {
						u, err := domainUUID(name)
						if err != nil || u == "" {
							return fmt.Errorf("domain %s: %w %s", name, err, u)
						}
						uuids[name] = u
					}
					return nil
				},
			},
			{
				Config: config(second),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
					plancheck.ExpectUnknownValue("egress_proxy.test", tfjsonpath.New("kvm").AtMapKey("base_volume")),
				}},
				Check: func(s *terraform.State) error {
					a := s.RootModule().Resources["egress_proxy.test"].Primary.Attributes
					volume := a["kvm.base_volume"]
					if a["id"] != id || a["internal_address"] != address {
						return fmt.Errorf("after the roll: id %s at %s, want the same proxy %s at %s", a["id"], a["internal_address"], id, address)
					}
					if volume == firstVolume || !strings.HasPrefix(volume, "egress-image-") || kvm.IsMixedBaseVolume(volume) {
						return fmt.Errorf("after the roll the proxy reads base volume %q, want the second image's (the first was %s)", volume, firstVolume)
					}
					for name, was := range uuids {
						u, err := domainUUID(name)
						if err != nil {
							return fmt.Errorf("domain %s after the roll: %w", name, err)
						}
						if u != was {
							return fmt.Errorf("domain %s after the roll has UUID %s, want the same domain %s", name, u, was)
						}
						backing, err := rootBacking(name)
						if err != nil {
							return err
						}
						if !strings.HasSuffix(backing, "/"+volume) {
							return fmt.Errorf("root disk of %s overlays %s, want the second image's volume %s", name, backing, volume)
						}
					}
					return nil
				},
			},
			{
				Config: config(second),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectEmptyPlan(),
				}},
			},
		},
	})
}
