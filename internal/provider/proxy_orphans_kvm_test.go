package provider

import (
	"context"
	"fmt"
	"os/exec"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

func virsh(t *testing.T, uri string, args ...string) {
	t.Helper()
	out, err := exec.Command("virsh", append([]string{"-q", "-c", uri}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("virsh %v: %v\n%s", args, err, out)
	}
}

// Creates killed halfway leave a defined domain that never ran, or volumes whose domain was never defined.
// Both are listed by egress_proxy_orphans until they are adopted (import) or cleaned up.
func TestAccProxyKVM_halfFinishedCreatesAreOrphansUntilHandled(t *testing.T) {
	uri := kvmAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	b := kvmBackend(t, uri)
	ctx := context.Background()
	spec := func() backend.Spec {
		uid := uuid.NewString()
		return backend.Spec{
			Name: backend.NameFromUID(uid), UID: uid, Owner: owner, Labels: map[string]string{},
			Placement: backend.Placement{Backend: kvm.Kind, Target: "local",
				Options: &kvm.Options{VCPUs: 1, MemoryMiB: 256, DiskGiB: 4}},
			Proxy: proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"198.18.0.0/24"}, AllowedPorts: []int{443}},
		}
	}
	defined, err := b.Create(ctx, spec())
	if err != nil {
		t.Fatal(err)
	}
	virsh(t, uri, "destroy", defined.Name) // defined, not running
	volumesOnly, err := b.Create(ctx, spec())
	if err != nil {
		t.Fatal(err)
	}
	virsh(t, uri, "destroy", volumesOnly.Name)
	virsh(t, uri, "undefine", volumesOnly.Name) // its volumes stay behind
	t.Cleanup(func() {
		_ = b.Delete(context.Background(), defined.ID)
		_ = b.Delete(context.Background(), volumesOnly.ID)
	})

	orphans := func(known string) string {
		return kvmProviderBlock(owner, uri) + fmt.Sprintf(`
data "egress_proxy_orphans" "all" {
  min_age   = "0s"
  known_ids = [%s]
}
`, known)
	}
	adopted := fmt.Sprintf(`
import {
  to = egress_proxy.adopted
  id = %q
}

resource "egress_proxy" "adopted" {
  kvm                  = { memory_mib = 256, wait_for_address = false }
  allowed_client_cidrs = ["198.18.0.0/24"]
}
`, defined.ID.String())

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             checkOwnerHasNothingLeft(b, owner),
		Steps: []resource.TestStep{
			{
				Config: orphans(""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("orphans"), knownvalue.SetExact([]knownvalue.Check{
						knownvalue.ObjectPartial(map[string]knownvalue.Check{"id": knownvalue.StringExact(defined.ID.String()), "state": knownvalue.StringExact("Stopped")}),
						knownvalue.ObjectPartial(map[string]knownvalue.Check{"id": knownvalue.StringExact(volumesOnly.ID.String()), "state": knownvalue.StringExact("Failed")}),
					})),
				},
			},
			{
				// Adopted by an import block: it is known now, and only the volumes are left to clean.
				Config: orphans("egress_proxy.adopted.id") + adopted,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("egress_proxy.adopted", tfjsonpath.New("id"), knownvalue.StringExact(defined.ID.String())),
				},
			},
			{
				Config: orphans("egress_proxy.adopted.id") + adopted,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("orphans"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.ObjectPartial(map[string]knownvalue.Check{"id": knownvalue.StringExact(volumesOnly.ID.String())}),
					})),
				},
			},
			{
				// Cleaned up with the id the orphan list gave: nothing is left to report.
				PreConfig: func() {
					if err := b.Delete(context.Background(), volumesOnly.ID); err != nil {
						t.Fatalf("deleting the leftover volumes by their orphan id: %v", err)
					}
				},
				Config: orphans("egress_proxy.adopted.id") + adopted,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("orphans"), knownvalue.ListSizeExact(0)),
					statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("incomplete"), knownvalue.Bool(false)),
				},
			},
		},
	})
}
