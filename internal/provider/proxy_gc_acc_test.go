package provider

import (
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/querycheck"
	"github.com/hashicorp/terraform-plugin-testing/querycheck/queryfilter"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
)

// version1_14 is the first Terraform with list resources (`terraform query`) and actions.
var version1_14 = version.Must(version.NewVersion("1.14.0"))

// checkKVMIDs says which kvm proxies the backend holds.
func checkKVMIDs(mem memoryBackends, want ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		var got []string
		for _, inst := range mem[backend.KindKVM].Instances() {
			got = append(got, inst.ID.String())
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("the kvm backend holds %v, want %v", got, want)
		}
		return nil
	}
}

// The CLI's side of garbage collection: `terraform query` lists the owner's orphans with their identities
// and objects, and the action, triggered from a configuration, deletes them. Both need Terraform 1.14; on
// older CLIs and OpenTofu only the first step runs (the protocol tests cover the rest there).
func TestAccProxyGC_queryAndAction(t *testing.T) {
	mem := newMemoryBackends()
	for _, name := range []string{"old-orphan", "older-orphan"} {
		inst := instanceAt(backend.KindKVM, "hv1", "", name, "team-a", 3*time.Hour)
		inst.Labels["team"] = "ci"
		mem[backend.KindKVM].Put(inst)
	}
	mem[backend.KindKVM].Put(instanceAt(backend.KindKVM, "hv1", "", "in-flight", "team-a", time.Minute))
	mem[backend.KindKVM].Put(instanceAt(backend.KindKVM, "hv1", "", "not-ours", "team-b", 3*time.Hour))
	kept := proxyConfig(`  name                 = "kept"
  kvm                  = { host = "hv1" }
  allowed_client_cidrs = ["10.0.0.0/8"]`)
	orphanIdentity := func(name string) map[string]knownvalue.Check {
		return map[string]knownvalue.Check{"id": knownvalue.StringExact("kvm/hv1/" + name)}
	}
	gc := func(dryRun bool) string {
		return kept + fmt.Sprintf(`
action "egress_proxy_gc" "sweep" {
  config {
    dry_run   = %t
    known_ids = [egress_proxy.test.id]
    min_age   = "30m"
  }
}

resource "terraform_data" "sweep" {
  input = %t
  lifecycle {
    action_trigger {
      events  = [after_create, after_update]
      actions = [action.egress_proxy_gc.sweep]
    }
  }
}
`, dryRun, dryRun)
	}

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		Steps: []resource.TestStep{
			{
				Config: kept,
				Check:  checkKVMIDs(mem, "kvm/hv1/in-flight", "kvm/hv1/kept", "kvm/hv1/not-ours", "kvm/hv1/old-orphan", "kvm/hv1/older-orphan"),
			},
			{
				SkipFunc: skipStepBelow(t, version1_14),
				Query:    true,
				Config: `
list "egress_proxy" "orphans" {
  provider         = egress
  include_resource = true
  config {
    orphaned_only = true
    known_ids     = ["kvm/hv1/kept"]
  }
}

list "egress_proxy" "all" {
  provider = egress
}
`,
				QueryResultChecks: []querycheck.QueryResultCheck{
					querycheck.ExpectLength("egress_proxy.orphans", 2),
					querycheck.ExpectIdentity("egress_proxy.orphans", orphanIdentity("old-orphan")),
					querycheck.ExpectIdentity("egress_proxy.orphans", orphanIdentity("older-orphan")),
					querycheck.ExpectResourceDisplayName("egress_proxy.orphans", queryfilter.ByResourceIdentity(orphanIdentity("old-orphan")),
						knownvalue.StringRegexp(regexp.MustCompile(`^kvm/hv1/old-orphan \(team=ci, age 3h\)$`))),
					querycheck.ExpectResourceKnownValues("egress_proxy.orphans", queryfilter.ByResourceIdentity(orphanIdentity("old-orphan")),
						[]querycheck.KnownValueCheck{
							{Path: tfjsonpath.New("uid"), KnownValue: knownvalue.StringExact("uid-old-orphan")},
							{Path: tfjsonpath.New("labels"), KnownValue: knownvalue.MapExact(map[string]knownvalue.Check{"team": knownvalue.StringExact("ci")})},
						}),
					// Without orphaned_only: the owner's four, the known and the young one too, never another owner's.
					querycheck.ExpectLength("egress_proxy.all", 4),
					querycheck.ExpectIdentity("egress_proxy.all", orphanIdentity("kept")),
					querycheck.ExpectIdentity("egress_proxy.all", orphanIdentity("in-flight")),
				},
			},
			{
				SkipFunc: skipStepBelow(t, version1_14),
				Config:   gc(true),
				Check:    checkKVMIDs(mem, "kvm/hv1/in-flight", "kvm/hv1/kept", "kvm/hv1/not-ours", "kvm/hv1/old-orphan", "kvm/hv1/older-orphan"),
			},
			{
				SkipFunc: skipStepBelow(t, version1_14),
				Config:   gc(false),
				Check:    checkKVMIDs(mem, "kvm/hv1/in-flight", "kvm/hv1/kept", "kvm/hv1/not-ours"),
			},
		},
	})
}
