package provider

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

// imageVolumes lists the shared image volumes in the test pool.
func imageVolumes(t *testing.T, uri string) []string {
	t.Helper()
	out, err := exec.Command("virsh", "-q", "-c", uri, "vol-list", "egress-test").CombinedOutput()
	if err != nil {
		t.Fatalf("virsh vol-list: %v\n%s", err, out)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "egress-image-") {
			names = append(names, f[0])
		}
	}
	return names
}

// Two proxies created in parallel from one image file share a single uploaded volume.
func TestAccProxyKVM_parallelProxiesShareOneImageUpload(t *testing.T) {
	uri := kvmAccPreCheck(t)
	// A fresh image (unique content, so a volume from an earlier run cannot stand in for the upload).
	image := filepath.Join(t.TempDir(), "image.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-f", "qcow2", "-o", "cluster_size=65536", image, "64M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v\n%s", err, out)
	}
	if out, err := exec.Command("qemu-io", "-c", "write -P 0x5a 0 64k", "-c", "write -P 0x"+uuid.NewString()[:2]+" 64k 64k", image).CombinedOutput(); err != nil {
		t.Fatalf("qemu-io: %v\n%s", err, out)
	}
	before := imageVolumes(t, uri)
	owner := "acc-" + uuid.NewString()[:8]
	proxy := func(name string) string {
		return fmt.Sprintf(`
resource "egress_proxy" %q {
  kvm                  = { image_file = %q, memory_mib = 256, wait_for_address = false }
  allowed_client_cidrs = ["198.18.0.0/24"]
}
`, name, image)
	}
	var uploaded string
	t.Cleanup(func() {
		if uploaded != "" {
			_ = exec.Command("virsh", "-q", "-c", uri, "vol-delete", "--pool", "egress-test", uploaded).Run()
		}
	})
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		Steps: []resource.TestStep{{
			// OpenTofu creates independent resources in parallel.
			Config: kvmProviderBlock(owner, uri) + proxy("a") + proxy("b"),
			Check: func(s *terraform.State) error {
				after := imageVolumes(t, uri)
				var added []string
				for _, v := range after {
					if !slices.Contains(before, v) {
						added = append(added, v)
					}
				}
				if len(added) != 1 {
					return fmt.Errorf("image volumes added: %v, want exactly one", added)
				}
				uploaded = added[0]
				a := s.RootModule().Resources["egress_proxy.a"].Primary.Attributes
				b := s.RootModule().Resources["egress_proxy.b"].Primary.Attributes
				if a["kvm.base_volume"] != uploaded || b["kvm.base_volume"] != uploaded || a["state"] != "Running" || b["state"] != "Running" {
					return fmt.Errorf("a: %s %s, b: %s %s; want both running on %s", a["kvm.base_volume"], a["state"], b["kvm.base_volume"], b["state"], uploaded)
				}
				return nil
			},
		}, {
			// The import cannot know the local path; the configured file's content names the volume the proxy
			// already runs on, so the import plans no replacement: only image_file is recorded, in place.
			ResourceName:       "egress_proxy.a",
			ImportState:        true,
			ImportStateKind:    resource.ImportBlockWithID,
			ExpectNonEmptyPlan: true,
			ImportPlanChecks: resource.ImportPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectResourceAction("egress_proxy.a", plancheck.ResourceActionUpdate),
				plancheck.ExpectKnownValue("egress_proxy.a", tfjsonpath.New("kvm").AtMapKey("image_file"), knownvalue.StringExact(image)),
			}},
		}},
	})
	if !slices.Contains(imageVolumes(t, uri), uploaded) {
		t.Errorf("destroying the proxies deleted the shared image volume %s", uploaded)
	}
}
