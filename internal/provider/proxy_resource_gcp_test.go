package provider

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/computefake"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/secretmanagerfake"
)

// The gcp acceptance tests run the real provider, its real Compute client and the CLI against the Compute
// fake started here, on loopback, with a bearer token the fake checks.

const gcpTestProject = "egress-acc"

func gcpFake(t *testing.T) *computefake.Server {
	t.Helper()
	// The provider's account holds exactly the role users are told to grant (gcp_permissions_test.go).
	fake := computefake.New(computefake.Options{Token: "acc-token", Permissions: gcpDocumentedRole(t)})
	t.Cleanup(fake.Close)
	// Every test through the provider also proves its guest attribute polls kept within Compute Engine's rate.
	t.Cleanup(func() {
		if n := fake.GuestQueryViolations(); n != 0 {
			t.Errorf("%d guest attribute queries beyond the documented rate (10 a minute, 3 a second per VM)", n)
		}
	})
	return fake
}

func gcpProviderFactories() map[string]func() (tfprotov6.ProviderServer, error) {
	return map[string]func() (tfprotov6.ProviderServer, error){
		"egress": providerserver.NewProtocol6WithError(&egressProvider{version: "test", factories: defaultFactories}),
	}
}

func gcpConfig(fake *computefake.Server, token, resourceBody string) string {
	return gcpProvider(fake, token, "", "us-central1-a") + fmt.Sprintf(`resource "egress_proxy" "test" {
%s
}
`, resourceBody)
}

// gcpProviderWithSecrets is the provider block of team-a on the Compute fake and a Secret Manager fake at
// secretManagerURL (token acc-token), with defaultZone when it is not empty.
func gcpProviderWithSecrets(fake *computefake.Server, secretManagerURL, defaultZone string) string {
	return gcpProvider(fake, "acc-token", secretManagerURL, defaultZone)
}

// gcpProvider is the provider block of team-a on the Compute fake with token, and secret_manager_endpoint and
// default_zone when they are not empty.
func gcpProvider(fake *computefake.Server, token, secretManagerURL, defaultZone string) string {
	var optional strings.Builder
	if secretManagerURL != "" {
		fmt.Fprintf(&optional, "\n    secret_manager_endpoint   = %q", secretManagerURL)
	}
	if defaultZone != "" {
		fmt.Fprintf(&optional, "\n    default_zone              = %q", defaultZone)
	}
	return fmt.Sprintf(`
provider "egress" {
  owner = "team-a"
  gcp = {
    project                   = %q
    compute_endpoint          = %q
    resource_manager_endpoint = %q
    access_token              = %q%s
  }
}
`, gcpTestProject, fake.URL, fake.URL, token, optional.String())
}

func gcpProxy(labels, destination string) string {
	if destination == "" {
		destination = ".example.com"
	}
	return fmt.Sprintf(`  name                 = "egress-acc"
  gcp                  = { static_egress_ip = true }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [%q]
  labels               = { %s }`, destination, labels)
}

// gcpGuests plays the guest side of every VM of the fake: the startup script's watcher, which applies each
// configuration set in the instance's metadata and reports its id in a guest attribute. The proxy runs
// nowhere here; what the test proves is the provider's and the backend's part of an in-place change.
func gcpGuests(t *testing.T, fake *computefake.Server) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, in := range fake.Instances() {
				for _, item := range in.GetMetadata().GetItems() {
					if item.GetKey() == gcpguest.MetadataConfigID {
						// Refused, as on a real VM, where guest attributes are off: the report never arrives.
						_ = fake.SetGuestAttribute(gcpTestProject, path.Base(in.GetZone()), in.GetName(),
							gcpguest.GuestAttributeNamespace+"/"+gcpguest.GuestAttributeApplied, item.GetValue())
					}
				}
			}
		}
	}()
}

func TestAccProxyGCP_lifecycle(t *testing.T) {
	fake := gcpFake(t)
	var name, ip string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		CheckDestroy: func(*terraform.State) error {
			if n := len(fake.Instances()); n != 0 {
				return fmt.Errorf("%d instances left after destroy", n)
			}
			if a := fake.Address(gcpTestProject, "us-central1", name+"-ip"); a != nil {
				return fmt.Errorf("reserved address %s left after destroy", a.GetName())
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: gcpConfig(fake, "acc-token", gcpProxy(`team = "net"`, "")),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("id"), knownvalue.StringExact("gcp/egress-acc/us-central1-a/egress-acc")),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("state"), knownvalue.StringExact("Running")),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("gcp").AtMapKey("machine_type"), knownvalue.StringExact("e2-small")),
				},
				Check: func(s *terraform.State) error {
					rs := s.RootModule().Resources["egress_proxy.test"].Primary
					name = rs.Attributes["name"]
					a := fake.Address(gcpTestProject, "us-central1", name+"-ip")
					if a == nil || rs.Attributes["egress_address"] != a.GetAddress() {
						return fmt.Errorf("egress_address %q is not the reserved address %v", rs.Attributes["egress_address"], a)
					}
					ip = a.GetAddress()
					if got := fake.Instance(gcpTestProject, "us-central1-a", name).GetLabels()["team"]; got != "net" {
						return fmt.Errorf("instance label team = %q", got)
					}
					return nil
				},
			},
			{
				Config:   gcpConfig(fake, "acc-token", gcpProxy(`team = "net"`, "")),
				PlanOnly: true,
			},
			{
				ResourceName:            "egress_proxy.test",
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts"},
			},
			{
				// An import block by id, then one by resource identity (Terraform 1.12 and OpenTofu): each plans
				// the import of the VM read back from the fake with no change to make.
				ResourceName:    "egress_proxy.test",
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithID,
			},
			{
				PreConfig:       func() { fake.ResetLog() },
				ResourceName:    "egress_proxy.test",
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithResourceIdentity,
				SkipFunc:        skipStepBelow(t, tfversion.Version1_12_0),
				ImportPlanChecks: resource.ImportPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionNoop),
					gcpReadBack(fake, "egress-acc"),
				}},
			},
			{
				// Labels change in place: same instance, new label, one setLabels.
				Config: gcpConfig(fake, "acc-token", gcpProxy(`team = "sec"`, "")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
				}},
				Check: func(*terraform.State) error {
					if got := fake.Instance(gcpTestProject, "us-central1-a", name).GetLabels()["team"]; got != "sec" {
						return fmt.Errorf("instance label team = %q after the update", got)
					}
					return nil
				},
			},
			{
				// The rules change in place: the same VM, its metadata carrying the new configuration, applied
				// by the guest's watcher before the apply returns.
				PreConfig: func() { gcpGuests(t, fake) },
				Config:    gcpConfig(fake, "acc-token", gcpProxy(`team = "sec"`, "api.example.org")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
				}},
				Check: func(s *terraform.State) error {
					if got := s.RootModule().Resources["egress_proxy.test"].Primary.Attributes["name"]; got != name {
						return fmt.Errorf("the proxy is now %s, want the same VM %s", got, name)
					}
					in := fake.Instance(gcpTestProject, "us-central1-a", name)
					for _, item := range in.GetMetadata().GetItems() {
						if item.GetKey() == gcpguest.MetadataSquidConf && strings.Contains(item.GetValue(), "api.example.org") {
							return nil
						}
					}
					return fmt.Errorf("the VM's metadata does not carry the new allow-list")
				},
			},
			{
				// The VM deleted behind Terraform's back is recreated, under its name, and takes the address
				// reserved under that name again: the egress address does not change.
				PreConfig: func() {
					if !fake.DeleteInstance(gcpTestProject, "us-central1-a", name) {
						t.Fatal("no instance to delete")
					}
				},
				Config: gcpConfig(fake, "acc-token", gcpProxy(`team = "sec"`, "api.example.org")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionCreate),
				}},
				Check: func(s *terraform.State) error {
					rs := s.RootModule().Resources["egress_proxy.test"].Primary
					if fake.Instance(gcpTestProject, "us-central1-a", name) == nil || len(fake.Instances()) != 1 {
						return fmt.Errorf("the deleted VM was not recreated as the one instance")
					}
					if a := fake.Address(gcpTestProject, "us-central1", name+"-ip"); a == nil || a.GetStatus() != "IN_USE" || rs.Attributes["egress_address"] != ip {
						return fmt.Errorf("the recreated VM egresses from %q, not from the address reserved under its name %v", rs.Attributes["egress_address"], a)
					}
					return nil
				},
			},
		},
	})
}

func TestAccProxyGCP_errors(t *testing.T) {
	for name, tc := range map[string]struct {
		setup func(*computefake.Server)
		token string
		want  string
	}{
		"quota exhausted":  {func(f *computefake.Server) { f.SetQuota("us-central1", "CPUS", 1) }, "acc-token", `(?s)limit reached.*Quota\s+'CPUS'\s+exceeded.*compute.googleapis.com/cpus`},
		"zone exhausted":   {func(f *computefake.Server) { f.ExhaustZone("us-central1-a", true) }, "acc-token", `(?s)limit reached.*ZONE_RESOURCE_POOL_EXHAUSTED`},
		"wrong credential": {func(*computefake.Server) {}, "wrong-token", `(?s)refused by the backend.*Error\s+401.*invalid\s+authentication\s+credentials`},
	} {
		t.Run(name, func(t *testing.T) {
			fake := gcpFake(t)
			tc.setup(fake)
			resource.Test(t, resource.TestCase{
				PreCheck:                 func() { testAccPreCheck(t) },
				ProtoV6ProviderFactories: gcpProviderFactories(),
				Steps: []resource.TestStep{{
					Config:      gcpConfig(fake, tc.token, gcpProxy(`team = "net"`, "")),
					ExpectError: regexp.MustCompile(tc.want),
				}},
			})
			if n := len(fake.Instances()); n != 0 {
				t.Fatalf("%d instances left by a refused create", n)
			}
		})
	}
}

// Three in ten requests fail with 503, 429 or a lost answer; the apply still converges to one VM.
func TestAccProxyGCP_faultsConverge(t *testing.T) {
	fake := gcpFake(t)
	fake.AddFault(computefake.Fault{Rate: 0.1, Seed: 7, Status: http.StatusServiceUnavailable})
	fake.AddFault(computefake.Fault{Rate: 0.1, Seed: 8, Status: http.StatusTooManyRequests, Reason: "rateLimitExceeded"})
	fake.AddFault(computefake.Fault{Rate: 0.1, Seed: 9, After: true})
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		Steps: []resource.TestStep{{
			Config: gcpConfig(fake, "acc-token", gcpProxy(`team = "net"`, "")),
			Check: func(*terraform.State) error {
				if n := len(fake.Instances()); n != 1 {
					return fmt.Errorf("%d instances, want exactly 1", n)
				}
				if fake.Fired() == 0 {
					return fmt.Errorf("no fault fired: the test proves nothing")
				}
				return nil
			},
		}},
	})
}

// Proxies of the owner that no state holds (made here straight through the backend, as a crashed apply
// would leave them) are listed by egress_proxy_orphans with one aggregated call per read, and a zone that
// cannot be listed is reported, not hidden; so is the Secret Manager secret of a proxy whose VM is gone
// (gcp/<project>/secrets/<secret id>). egress_backends reports the project healthy with its quotas, and the zone
// that cannot be listed in its proxy_errors. Then the
// egress_proxy_gc action deletes them all, the secret too (Terraform 1.14 and later).
func TestAccProxyGCP_orphansAndHealth(t *testing.T) {
	fake := gcpFake(t)
	sm := secretmanagerfake.New(secretmanagerfake.Options{AdminToken: "acc-token", AdminPermissions: gcpDocumentedRole(t)})
	t.Cleanup(sm.Close)
	b, err := gcp.New(gcp.Config{DefaultProject: gcpTestProject, ProjectConfig: gcp.ProjectConfig{ComputeEndpoint: fake.URL,
		SecretManagerEndpoint: sm.URL, AccessToken: "acc-token"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	var ids []string
	for i, zone := range []string{"us-central1-a", "us-central1-b", "us-central1-a"} {
		uid := fmt.Sprintf("orphan-%d", i)
		spec := backend.Spec{
			Name: backend.NameFromUID(uid), UID: uid, Owner: "team-a",
			Placement: backend.Placement{Backend: gcp.Kind, Target: gcpTestProject, Scope: zone},
			Proxy:     proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.0.0.0/8"}},
		}
		if i == 2 {
			// Its VM, with a service account, keeps its secrets in Secret Manager; deleted behind the provider's
			// back, it leaves the secret.
			spec.Placement.Options = &gcp.Options{ServiceAccount: "proxy@" + gcpTestProject + ".iam.gserviceaccount.com"}
			spec.Proxy.Users = []proxyconf.BasicAuth{{Username: "u", Password: "correct-horse-battery"}}
		}
		inst, err := b.Create(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			if !fake.DeleteInstance(gcpTestProject, zone, spec.Name) {
				t.Fatal("the fake had no instance to delete")
			}
			if got := sm.Secrets(gcpTestProject); len(got) != 1 {
				t.Fatalf("secrets: %v, want the gone proxy's", got)
			}
			ids = append([]string{"gcp/" + gcpTestProject + "/secrets/" + sm.Secrets(gcpTestProject)[0]}, ids...)
			continue
		}
		ids = append(ids, inst.ID.String())
	}
	fake.BreakZone("europe-west1-b", "UNREACHABLE")
	fake.ResetLog()
	provider := gcpProviderWithSecrets(fake, sm.URL, "")
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		Steps: []resource.TestStep{{
			Config: provider + `
data "egress_proxy_orphans" "all" {
  backends = ["gcp"]
  min_age  = "0s"
}
data "egress_backends" "all" {}
`,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("orphans"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectPartial(map[string]knownvalue.Check{"id": knownvalue.StringExact(ids[0])}),
					knownvalue.ObjectPartial(map[string]knownvalue.Check{"id": knownvalue.StringExact(ids[1])}),
					knownvalue.ObjectPartial(map[string]knownvalue.Check{"id": knownvalue.StringExact(ids[2])}),
				})),
				statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("incomplete"), knownvalue.Bool(true)),
				statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("errors"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.StringRegexp(regexp.MustCompile(`europe-west1-b.*UNREACHABLE`)),
				})),
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("healthy"), knownvalue.Bool(true)),
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends").AtSliceIndex(0).AtMapKey("reason"),
					knownvalue.StringExact(backend.HealthHealthy)),
				// The zone that cannot be listed leaves the project's list of degraded proxies incomplete: data, not an error.
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends").AtSliceIndex(0).AtMapKey("degraded_proxies"),
					knownvalue.ListExact([]knownvalue.Check{})),
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends").AtSliceIndex(0).AtMapKey("proxy_errors"),
					knownvalue.ListExact([]knownvalue.Check{knownvalue.StringRegexp(regexp.MustCompile(`europe-west1-b.*UNREACHABLE`))})),
			},
			Check: func(*terraform.State) error {
				// One aggregated list each for the orphans and for egress_backends; the orphans read no instance,
				// egress_backends reads each of the two running proxies once (their health is not in a list).
				lists, all := fake.Count(http.MethodGet, `/aggregated/instances$`), fake.Requests()
				instanceGets := fake.Count(http.MethodGet, `/instances/`)
				if lists != 2 || instanceGets != 2 {
					return fmt.Errorf("%d aggregated lists and %d instance GETs (of %d requests); want 2 lists and the 2 running proxies' GETs", lists, instanceGets, len(all))
				}
				return nil
			},
		}, {
			SkipFunc: skipStepBelow(t, version1_14),
			Config: provider + `
action "egress_proxy_gc" "sweep" {
  config {
    backends = ["gcp"]
    min_age  = "0s"
    dry_run  = false
  }
}
resource "terraform_data" "sweep" {
  lifecycle {
    action_trigger {
      events  = [after_create]
      actions = [action.egress_proxy_gc.sweep]
    }
  }
}
`,
			Check: func(*terraform.State) error {
				if left := sm.Secrets(gcpTestProject); len(left) != 0 {
					return fmt.Errorf("secrets left after garbage collection: %v", left)
				}
				for _, in := range fake.Instances() {
					if in.GetLabels()[backend.LabelOwner] == "team-a" {
						return fmt.Errorf("instance %s left after garbage collection", in.GetName())
					}
				}
				return nil
			},
		}},
	})
}

// An address the user reserved and names is the egress address, kept when the proxy is replaced (a new
// machine type) and never released by the provider.
func TestAccProxyGCP_namedAddressSurvivesReplacement(t *testing.T) {
	fake := gcpFake(t)
	ip := fake.ReserveAddress(gcpTestProject, "us-central1", "team-egress")
	proxy := func(machineType string) string {
		return fmt.Sprintf(`  gcp                  = { egress_address_name = "team-egress", machine_type = %q }
  allowed_client_cidrs = ["10.0.0.0/8"]`, machineType)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		CheckDestroy: func(*terraform.State) error {
			if a := fake.Address(gcpTestProject, "us-central1", "team-egress"); a == nil || a.GetStatus() != "RESERVED" {
				return fmt.Errorf("the user's address was released or left in use: %v", a)
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config:            gcpConfig(fake, "acc-token", proxy("e2-small")),
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("egress_address"), knownvalue.StringExact(ip))},
			},
			{
				Config: gcpConfig(fake, "acc-token", proxy("e2-medium")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionDestroyBeforeCreate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("egress_address"), knownvalue.StringExact(ip))},
			},
		},
	})
}

// static_egress_ip keeps the egress address when the proxy is replaced (a new machine type): the delete half
// of the replacement keeps the address reserved under the proxy's name and the new VM takes it. A destroy
// releases it. This relies on both CLIs planning a destroy through the provider, which marks it.
func TestAccProxyGCP_staticAddressKeptAcrossReplacement(t *testing.T) {
	fake := gcpFake(t)
	const name = "egress-keep"
	var ip, uid string
	proxy := func(machineType string) string {
		return fmt.Sprintf(`  name                 = %q
  gcp                  = { static_egress_ip = true, machine_type = %q }
  allowed_client_cidrs = ["10.0.0.0/8"]`, name, machineType)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		CheckDestroy: func(*terraform.State) error {
			if n := len(fake.Instances()); n != 0 {
				return fmt.Errorf("%d instances left after destroy", n)
			}
			if a := fake.Address(gcpTestProject, "us-central1", name+"-ip"); a != nil {
				return fmt.Errorf("destroy kept the reserved address %s (%s)", a.GetName(), a.GetStatus())
			}
			if n := fake.Count(http.MethodDelete, `/addresses/`+name+`-ip$`); n == 0 {
				return fmt.Errorf("the address was never deleted")
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				Config: gcpConfig(fake, "acc-token", proxy("e2-small")),
				Check: func(s *terraform.State) error {
					rs := s.RootModule().Resources["egress_proxy.test"].Primary
					a := fake.Address(gcpTestProject, "us-central1", name+"-ip")
					if a == nil || a.GetStatus() != "IN_USE" || rs.Attributes["egress_address"] != a.GetAddress() {
						return fmt.Errorf("egress_address %q is not the reserved address %v", rs.Attributes["egress_address"], a)
					}
					ip, uid = a.GetAddress(), rs.Attributes["uid"]
					return nil
				},
			},
			{
				Config: gcpConfig(fake, "acc-token", proxy("e2-medium")),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionDestroyBeforeCreate),
				}},
				Check: func(s *terraform.State) error {
					rs := s.RootModule().Resources["egress_proxy.test"].Primary
					in := fake.Instance(gcpTestProject, "us-central1-a", name)
					if rs.Attributes["uid"] == uid || in.GetLabels()[backend.LabelUID] != rs.Attributes["uid"] || path.Base(in.GetMachineType()) != "e2-medium" {
						return fmt.Errorf("the proxy was not replaced: uid %s (was %s), machine type %s", rs.Attributes["uid"], uid, in.GetMachineType())
					}
					if rs.Attributes["egress_address"] != ip {
						return fmt.Errorf("egress address after the replacement %q, want the kept %s", rs.Attributes["egress_address"], ip)
					}
					if n := fake.Count(http.MethodDelete, `/addresses/`); n != 0 {
						return fmt.Errorf("the replacement deleted the address %d times", n)
					}
					if a := fake.Address(gcpTestProject, "us-central1", name+"-ip"); a.GetStatus() != "IN_USE" || a.GetUsers()[0] != in.GetSelfLink() {
						return fmt.Errorf("the kept address is %s, used by %v, want IN_USE by the new VM", a.GetStatus(), a.GetUsers())
					}
					return nil
				},
			},
		},
	})
}

// gcpReadBack is a plan check proving the plan read the proxy back from the fake: at least one GET of the
// instance since the step began, so an import that only echoed the identity would fail it.
func gcpReadBack(fake *computefake.Server, name string) plancheck.PlanCheck {
	return planCheckFunc(func(context.Context, plancheck.CheckPlanRequest, *plancheck.CheckPlanResponse) error {
		if n := fake.Count(http.MethodGet, `/zones/us-central1-a/instances/`+name+`$`); n == 0 {
			return fmt.Errorf("the import planned without reading the instance %s from the backend", name)
		}
		return nil
	})
}

type planCheckFunc func(context.Context, plancheck.CheckPlanRequest, *plancheck.CheckPlanResponse) error

func (f planCheckFunc) CheckPlan(ctx context.Context, req plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	resp.Error = f(ctx, req, resp)
}

// Every VM is a Shielded VM with OS Login on and project SSH keys blocked, which the state shows; opting out
// of all three replaces the VM with one whose insert carries none of them. A configuration asking for
// project SSH keys while OS Login stays on is refused at plan time.
func TestAccProxyGCP_hardeningDefaultsAndOptOuts(t *testing.T) {
	fake := gcpFake(t)
	proxy := func(gcpBody string) string {
		return fmt.Sprintf(`  gcp                  = { %s }
  allowed_client_cidrs = ["10.0.0.0/8"]`, gcpBody)
	}
	hardening := func(shielded, osLogin, projectKeys bool) resource.TestCheckFunc {
		return func(s *terraform.State) error {
			rs := s.RootModule().Resources["egress_proxy.test"].Primary
			in := fake.Instance(gcpTestProject, "us-central1-a", rs.Attributes["name"])
			if in == nil {
				return fmt.Errorf("no instance %s", rs.Attributes["name"])
			}
			sc := in.GetShieldedInstanceConfig()
			if got := sc.GetEnableSecureBoot() && sc.GetEnableVtpm() && sc.GetEnableIntegrityMonitoring(); got != shielded || (!shielded && sc != nil) {
				return fmt.Errorf("shieldedInstanceConfig %v, want shielded %v", sc, shielded)
			}
			md := map[string]string{}
			for _, it := range in.GetMetadata().GetItems() {
				md[it.GetKey()] = it.GetValue()
			}
			for key, want := range map[string]bool{gcp.MetadataEnableOSLogin: osLogin, gcp.MetadataBlockProjectSSHKeys: !projectKeys} {
				if v, set := md[key]; (want && v != "TRUE") || (!want && set) {
					return fmt.Errorf("metadata %s = %q (set %v), want TRUE %v", key, v, set, want)
				}
			}
			return nil
		}
	}
	state := func(shielded, osLogin, projectKeys bool) []statecheck.StateCheck {
		return []statecheck.StateCheck{
			statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("gcp").AtMapKey("shielded_vm"), knownvalue.Bool(shielded)),
			statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("gcp").AtMapKey("os_login"), knownvalue.Bool(osLogin)),
			statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("gcp").AtMapKey("allow_project_ssh_keys"), knownvalue.Bool(projectKeys)),
		}
	}
	optedOut := proxy(`shielded_vm = false, os_login = false, allow_project_ssh_keys = true`)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		Steps: []resource.TestStep{
			{
				Config:            gcpConfig(fake, "acc-token", proxy("")),
				ConfigStateChecks: state(true, true, false),
				Check:             hardening(true, true, false),
			},
			{
				// An import reads the hardening back from the VM.
				ResourceName:            "egress_proxy.test",
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts"},
			},
			{
				Config:      gcpConfig(fake, "acc-token", proxy(`allow_project_ssh_keys = true`)),
				PlanOnly:    true,
				ExpectError: wrapped(`(?s)Conflicting gcp.allow_project_ssh_keys.*gcp.os_login must be set to false.*OS Login`),
			},
			{
				Config: gcpConfig(fake, "acc-token", optedOut),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionDestroyBeforeCreate),
				}},
				ConfigStateChecks: state(false, false, true),
				Check:             hardening(false, false, true),
			},
			{
				ResourceName:            "egress_proxy.test",
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts"},
			},
		},
	})
}

// A state written before the hardening attributes existed has none: a refresh fills them from what the VM
// is, so that a configuration saying the same plans no replacement, and one that wants the defaults says
// which of them it changes.
func TestGCPPlacementSetResolvedFillsHardeningFromTheVM(t *testing.T) {
	t.Parallel()
	old := gcpPlacementModel{ShieldedVM: types.BoolNull(), OSLogin: types.BoolNull(), AllowProjectSSHKeys: types.BoolNull()}
	kept := gcpPlacementModel{ShieldedVM: types.BoolValue(true), OSLogin: types.BoolValue(false), AllowProjectSSHKeys: types.BoolValue(true)}
	inst := backend.Instance{
		ID:        backend.ProviderID{Backend: gcp.Kind, Target: "p", Scope: "z", Name: "n"},
		Placement: backend.Placement{Options: &gcp.Options{DisableShieldedVM: true, AllowProjectSSHKeys: true, DisableOSLogin: true}},
	}
	old.setResolved(inst)
	if old.ShieldedVM.ValueBool() || old.OSLogin.ValueBool() || !old.AllowProjectSSHKeys.ValueBool() || old.Project.ValueString() != "p" {
		t.Errorf("an earlier state after refresh: %+v, want the VM's unhardened settings", old)
	}
	kept.setResolved(inst)
	if !kept.ShieldedVM.ValueBool() || kept.OSLogin.ValueBool() || !kept.AllowProjectSSHKeys.ValueBool() {
		t.Errorf("known values were overwritten: %+v", kept)
	}
}
