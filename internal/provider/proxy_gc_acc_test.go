package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-version"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/querycheck"
	"github.com/hashicorp/terraform-plugin-testing/querycheck/queryfilter"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// version1_14 is the first Terraform with list resources (`terraform query`) and actions.
var version1_14 = version.Must(version.NewVersion("1.14.0"))

// checkKVMIDs says which kvm proxies the backend holds.
func checkKVMIDs(mem memoryBackends, want ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		var got []string
		for _, inst := range mem[kvm.Kind].Instances() {
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
		inst := instanceAt(kvm.Kind, "hv1", "", name, "team-a", 3*time.Hour)
		inst.Labels["team"] = "ci"
		mem[kvm.Kind].Put(inst)
	}
	mem[kvm.Kind].Put(instanceAt(kvm.Kind, "hv1", "", "in-flight", "team-a", time.Minute))
	mem[kvm.Kind].Put(instanceAt(kvm.Kind, "hv1", "", "not-ours", "team-b", 3*time.Hour))
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

// requireQueryCLI returns the CLI under test when it has `terraform query` and actions, and skips the test,
// saying why, when it has not: OpenTofu and Terraform before 1.14. The Terraform leg of `make test-provider`
// runs Terraform 1.15.9, where these tests must run.
func requireQueryCLI(t *testing.T) string {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1 (make testacc)")
	}
	testAccPreCheck(t)
	cli := os.Getenv("TF_ACC_TERRAFORM_PATH")
	if cliIsOpenTofu(t, cli) {
		t.Skip("OpenTofu has no `query` command and no actions: the Terraform leg runs this test")
	}
	v, err := cliVersion(cli)
	if err != nil {
		t.Fatal(err)
	}
	if v.LessThan(version1_14) {
		t.Skipf("Terraform %s has no `query` command and no actions (1.14 has): the Terraform leg of `make test-provider` runs this test on Terraform 1.15.9", v)
	}
	return cli
}

// cliWorkdir is a working directory in which a test runs the CLI itself, for the commands
// terraform-plugin-testing has no step for, with the provider served by the test process.
type cliWorkdir struct {
	t        *testing.T
	cli, dir string
	env      []string
}

func newCLIWorkdir(t *testing.T, cli, reattach string, files map[string]string) *cliWorkdir {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// An empty CLI configuration of our own: the machine's may point at mirrors or at nothing.
	cliConfig := filepath.Join(dir, "cli.tfrc")
	if err := os.WriteFile(cliConfig, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w := &cliWorkdir{t: t, cli: cli, dir: dir, env: append(os.Environ(), "TF_REATTACH_PROVIDERS="+reattach,
		"TF_CLI_CONFIG_FILE="+cliConfig, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1", "TF_LOG=")}
	w.run("init", "-no-color")
	return w
}

// run runs the CLI with args and returns its output; a failure fails the test with that output.
func (w *cliWorkdir) run(args ...string) string {
	w.t.Helper()
	cmd := exec.Command(w.cli, args...)
	cmd.Dir, cmd.Env = w.dir, w.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		w.t.Fatalf("%s %s: %v\n%s", filepath.Base(w.cli), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// gcProgressLine is one progress message of the action in the CLI's output, where Terraform 1.15 names the
// action and what triggered it: "Action action.egress_proxy_gc.sweep (triggered by CLI): <message>".
var gcProgressLine = regexp.MustCompile(`(?m)^Action action\.egress_proxy_gc\.sweep(?: \([^)]*\))?: (.*)$`)

// gcCLIFixture is one backend's proxies for the CLI garbage-collection test, made behind Terraform's back as a
// killed apply leaves them: the owner's kept one (in known_ids) and orphans, and another owner's proxy.
type gcCLIFixture struct {
	providerBlock string
	b             backend.Backend
	kept          backend.Instance
	orphans       []backend.Instance
	foreign       backend.Instance
	// leftovers names what of a proxy is still on the backend: nothing once it is deleted.
	leftovers func(t *testing.T, inst backend.Instance) []string
}

func kvmGCCLIFixture(t *testing.T) gcCLIFixture {
	uri := kvmAccPreCheck(t)
	b := kvmBackend(t, uri)
	owner, made := kvmOrphans(t, b, uri, 3)
	_, other := kvmOrphans(t, b, uri, 1)
	return gcCLIFixture{
		providerBlock: kvmProviderBlock(owner, uri), b: b, kept: made[0], orphans: made[1:], foreign: other[0],
		leftovers: func(t *testing.T, inst backend.Instance) []string {
			var left []string
			if _, err := b.Get(context.Background(), inst.ID); !backend.IsNotFound(err) {
				left = append(left, fmt.Sprintf("domain %s (get: %v)", inst.Name, err))
			}
			for _, vol := range kvmVolumes(t, uri) {
				if strings.HasPrefix(vol, inst.Name) {
					left = append(left, "volume "+vol)
				}
			}
			return left
		},
	}
}

func k8sGCCLIFixture(t *testing.T) gcCLIFixture {
	env := k8sAccPreCheck(t)
	ns := env.cluster.Namespace(t, "egress-gc-cli")
	b := k8sBackend(t, env, ns)
	owner, other := "acc-"+uuid.NewString()[:8], "acc-"+uuid.NewString()[:8]
	owners := []string{owner, owner, owner, other}
	made := make([]backend.Instance, len(owners))
	errs := make(chan error, len(owners))
	for i, o := range owners {
		go func() {
			uid := uuid.NewString()
			var err error
			made[i], err = b.Create(context.Background(), backend.Spec{
				Name: backend.NameFromUID(uid), UID: uid, Owner: o, Labels: map[string]string{"team": "ci"},
				Placement: backend.Placement{Backend: kubernetes.Kind, Target: "test", Scope: ns,
					Options: &kubernetes.Options{}},
				// The ports the provider's schema defaults to: a proxy made without any is not one the provider makes.
				Proxy: proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.244.0.0/16"},
					AllowedDestinations: []string{k8sOrigin}, AllowedPorts: []int{443}},
			})
			errs <- err
		}()
	}
	for range owners {
		if err := <-errs; err != nil {
			t.Fatalf("creating a proxy behind terraform's back: %v", err)
		}
	}
	t.Cleanup(func() {
		for _, inst := range made {
			_ = b.Delete(context.Background(), inst.ID)
		}
	})
	return gcCLIFixture{
		providerBlock: k8sProviderBlock(t, env, owner, ns), b: b, kept: made[0], orphans: made[1:3], foreign: made[3],
		leftovers: func(t *testing.T, inst backend.Instance) []string {
			left, err := env.cluster.Labelled(context.Background(), backend.LabelUID, inst.UID)
			if err != nil {
				t.Fatalf("listing what carries %s=%s: %v", backend.LabelUID, inst.UID, err)
			}
			return left
		},
	}
}

// The CLI commands terraform-plugin-testing has no step for, against the real libvirtd, the real cluster and
// the EC2 fake:
// `terraform query -generate-config-out` writes import and resource blocks for the owner's orphans, and a plan
// of them imports each with no change; `terraform apply -invoke` runs the garbage-collection action, whose dry
// run deletes nothing and whose real run deletes the orphans with everything made for them, and only them.
func TestAccProxyGC_generateConfigAndInvokeOnRealBackends(t *testing.T) {
	cli := requireQueryCLI(t)
	for name, fixture := range map[string]func(*testing.T) gcCLIFixture{
		"kvm":        kvmGCCLIFixture,
		"kubernetes": k8sGCCLIFixture,
		"aws":        awsGCCLIFixture,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := fixture(t)
			reattach := serveProviderForCLI(t, New("test")())
			header := `terraform {
  required_providers {
    egress = { source = "registry.terraform.io/egress-proxies/egress" }
  }
}
` + f.providerBlock

			t.Run("query generates config that imports the orphans with no changes", func(t *testing.T) {
				w := newCLIWorkdir(t, cli, reattach, map[string]string{
					"main.tf": header,
					"orphans.tfquery.hcl": fmt.Sprintf(`
list "egress_proxy" "orphans" {
  provider         = egress
  include_resource = true
  config {
    orphaned_only = true
    known_ids     = [%q]
    min_age       = "0s"
  }
}
`, f.kept.ID),
				})
				w.run("query", "-no-color", "-generate-config-out=generated.tf")
				generated, err := os.ReadFile(filepath.Join(w.dir, "generated.tf"))
				if err != nil {
					t.Fatalf("the query wrote no configuration: %v", err)
				}
				out := w.run("plan", "-no-color", "-out=tfplan")
				if !wrapped("Plan: 2 to import, 0 to add, 0 to change, 0 to destroy.").MatchString(out) {
					t.Errorf("the plan of the generated configuration is not two imports and nothing else:\n%s\ngenerated:\n%s", out, generated)
				}
				var plan struct {
					ResourceChanges []struct {
						Address string `json:"address"`
						Change  struct {
							Actions   []string       `json:"actions"`
							Importing map[string]any `json:"importing"`
							After     struct {
								ID string `json:"id"`
							} `json:"after"`
						} `json:"change"`
					} `json:"resource_changes"`
				}
				if err := json.Unmarshal([]byte(w.run("show", "-json", "tfplan")), &plan); err != nil {
					t.Fatal(err)
				}
				var imported []string
				for _, rc := range plan.ResourceChanges {
					if !slices.Equal(rc.Change.Actions, []string{"no-op"}) || rc.Change.Importing == nil {
						t.Errorf("%s: actions %v, importing %v: want a no-op import", rc.Address, rc.Change.Actions, rc.Change.Importing)
					}
					imported = append(imported, rc.Change.After.ID)
				}
				slices.Sort(imported)
				want := []string{f.orphans[0].ID.String(), f.orphans[1].ID.String()}
				slices.Sort(want)
				if !slices.Equal(imported, want) {
					t.Errorf("the generated configuration imports %v, want the orphans %v:\n%s", imported, want, generated)
				}
			})

			t.Run("the action's dry run deletes nothing and its real run the orphans alone", func(t *testing.T) {
				w := newCLIWorkdir(t, cli, reattach, map[string]string{"main.tf": header + fmt.Sprintf(`
variable "dry_run" {
  type = bool
}

action "egress_proxy_gc" "sweep" {
  config {
    dry_run   = var.dry_run
    known_ids = [%q]
    min_age   = "0s"
  }
}
`, f.kept.ID)})
				invoke := func(dryRun bool) []string {
					out := w.run("apply", "-no-color", "-auto-approve", "-invoke=action.egress_proxy_gc.sweep", fmt.Sprintf("-var=dry_run=%t", dryRun))
					var progress []string
					for _, m := range gcProgressLine.FindAllStringSubmatch(out, -1) {
						progress = append(progress, m[1])
					}
					if len(progress) == 0 {
						t.Fatalf("the action reported no progress:\n%s", out)
					}
					return progress
				}
				all := append([]backend.Instance{f.kept, f.foreign}, f.orphans...)

				progress := invoke(true)
				if last := progress[len(progress)-1]; !strings.HasPrefix(last, "dry run: 2 orphan(s) found, 2 would be deleted, nothing was deleted") {
					t.Errorf("dry run progress: %q", progress)
				}
				for _, inst := range all {
					if _, err := f.b.Get(context.Background(), inst.ID); err != nil {
						t.Errorf("after the dry run %s: %v", inst.ID, err)
					}
				}

				progress = invoke(false)
				if last := progress[len(progress)-1]; last != "2 orphan(s) found, 2 deleted" {
					t.Errorf("real run progress: %q", progress)
				}
				for _, inst := range f.orphans {
					if left := f.leftovers(t, inst); len(left) > 0 {
						t.Errorf("orphan %s is not gone: %s", inst.ID, strings.Join(left, ", "))
					}
				}
				for _, inst := range []backend.Instance{f.kept, f.foreign} {
					if _, err := f.b.Get(context.Background(), inst.ID); err != nil {
						t.Errorf("the real run touched %s, which is not an orphan: %v", inst.ID, err)
					}
				}
			})
		})
	}
}
