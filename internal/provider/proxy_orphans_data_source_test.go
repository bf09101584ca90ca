package provider

import (
	"regexp"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/memory"
)

func instanceAt(kind backend.Kind, target, scope, name, owner string, age time.Duration) backend.Instance {
	return backend.Instance{
		ID:   backend.ProviderID{Backend: kind, Target: target, Scope: scope, Name: name},
		Name: name, UID: "uid-" + name, Owner: owner, State: backend.StateRunning,
		Labels:    map[string]string{"team": "net"},
		CreatedAt: time.Now().Add(-age),
	}
}

func TestSelectOrphans(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(name string, age time.Duration) backend.Instance {
		inst := instanceAt(kvm.Kind, "h", "", name, "o", 0)
		inst.CreatedAt = now.Add(-age)
		return inst
	}
	unknownAge := at("no-time", 0)
	unknownAge.CreatedAt = time.Time{}
	tests := map[string]struct {
		all    []backend.Instance
		known  map[string]bool
		minAge time.Duration
		want   []string
	}{
		"old unknown is orphan":   {[]backend.Instance{at("a", time.Hour)}, nil, 10 * time.Minute, []string{"kvm/h/a"}},
		"young is in flight":      {[]backend.Instance{at("a", time.Minute)}, nil, 10 * time.Minute, nil},
		"exactly min age counts":  {[]backend.Instance{at("a", 10*time.Minute)}, nil, 10 * time.Minute, []string{"kvm/h/a"}},
		"known is not orphan":     {[]backend.Instance{at("a", time.Hour)}, map[string]bool{"kvm/h/a": true}, 0, nil},
		"unknown age is reported": {[]backend.Instance{unknownAge}, nil, time.Hour, []string{"kvm/h/no-time"}},
		"sorted by id":            {[]backend.Instance{at("b", time.Hour), at("a", time.Hour)}, nil, 0, []string{"kvm/h/a", "kvm/h/b"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, inst := range selectOrphans(tc.all, tc.known, tc.minAge, now) {
				got = append(got, inst.ID.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("selectOrphans (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAccProxyOrphans_listsOwnersUnknownOldInstances(t *testing.T) {
	mem := newMemoryBackends()
	mem[kvm.Kind].Put(instanceAt(kvm.Kind, "hv1", "", "old-orphan", "team-a", time.Hour))
	mem[kvm.Kind].Put(instanceAt(kvm.Kind, "hv1", "", "in-flight", "team-a", time.Minute))
	mem[kvm.Kind].Put(instanceAt(kvm.Kind, "hv1", "", "other-owner", "team-b", time.Hour))
	mem[gcp.Kind].Put(instanceAt(gcp.Kind, "proj", "zone-a", "gcp-orphan", "team-a", 2*time.Hour))

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		CheckDestroy:             checkDestroyed(mem),
		Steps: []resource.TestStep{{
			Config: testProviderBlock + `
resource "egress_proxy" "kept" {
  kvm                  = { host = "hv1" }
  allowed_client_cidrs = ["10.0.0.0/8"]
}

data "egress_proxy_orphans" "all" {
  known_ids = [egress_proxy.kept.id]
  min_age   = "30m"
}
`,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("orphans"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectPartial(map[string]knownvalue.Check{
						"id": knownvalue.StringExact("gcp/proj/zone-a/gcp-orphan"), "backend": knownvalue.StringExact("gcp"),
						"uid": knownvalue.StringExact("uid-gcp-orphan"), "labels": knownvalue.MapExact(map[string]knownvalue.Check{"team": knownvalue.StringExact("net")}),
					}),
					knownvalue.ObjectPartial(map[string]knownvalue.Check{
						"id": knownvalue.StringExact("kvm/hv1/old-orphan"), "name": knownvalue.StringExact("old-orphan"),
						"state": knownvalue.StringExact("Running"),
					}),
				})),
				statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("incomplete"), knownvalue.Bool(false)),
				statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("errors"), knownvalue.ListSizeExact(0)),
			},
		}},
	})
}

// A scope that cannot be listed is reported, and the other scopes' orphans are still listed.
func TestAccProxyOrphans_failingScopeIsReported(t *testing.T) {
	mem := newMemoryBackends()
	mem[kvm.Kind].Put(instanceAt(kvm.Kind, "hv1", "", "reachable", "team-a", time.Hour))
	mem[kvm.Kind].Put(instanceAt(kvm.Kind, "hv2", "", "behind-outage", "team-a", time.Hour))
	mem[kvm.Kind].SetFaults(memory.Faults{ListFailures: map[string]error{
		"hv2": memory.ClassError(backend.ClassTransient, "kvm host hv2", "connection refused"),
	}})
	// The whole gcp backend fails to list: it is one failed scope, not an error of the data source.
	mem[gcp.Kind].SetFaults(memory.Faults{Errors: map[string]error{
		"list": memory.ClassError(backend.ClassPermanent, "gcp project proj", "permission denied"),
	}})

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		Steps: []resource.TestStep{{
			Config: testProviderBlock + `
data "egress_proxy_orphans" "all" {
  backends = ["kvm", "gcp"]
  timeouts {
    read = "2s"
  }
}
`,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("orphans"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectPartial(map[string]knownvalue.Check{"id": knownvalue.StringExact("kvm/hv1/reachable")}),
				})),
				statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("incomplete"), knownvalue.Bool(true)),
				statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("errors"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.StringRegexp(regexp.MustCompile(`^kvm scope "hv2": transient: kvm host hv2: connection refused \(class Transient\)$`)),
					knownvalue.StringRegexp(regexp.MustCompile(`^gcp scope "\*": .*permission denied \(class Permanent\)$`)),
				})),
			},
		}},
	})
	// Each read lists each backend once: neither the Permanent failure nor the partial one is retried.
	if gcp, kvm := mem[gcp.Kind].Calls("list"), mem[kvm.Kind].Calls("list"); gcp != kvm || gcp == 0 {
		t.Errorf("gcp was listed %d times and kvm %d times; a Permanent failure must not be retried", gcp, kvm)
	}
}

func TestAccProxyOrphans_invalidInput(t *testing.T) {
	tests := map[string]struct{ body, want string }{
		"bad min_age":  {`min_age = "ten minutes"`, `Invalid duration.*Attribute min_age`},
		"negative age": {`min_age = "-5m"`, `Invalid duration.*Attribute min_age: must not be negative`},
		"bad known id": {`known_ids = ["vm-1"]`, `Invalid id.*Attribute known_ids\[Value\("vm-1"\)\]: invalid id "vm-1"`},
		"bad backend":  {`backends = ["azure"]`, `Invalid Attribute Value Match.*backends\[0\] value must be one of`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			resource.Test(t, resource.TestCase{
				PreCheck:                 func() { testAccPreCheck(t) },
				ProtoV6ProviderFactories: newMemoryBackends().protoV6(),
				Steps: []resource.TestStep{{
					Config:      testProviderBlock + "data \"egress_proxy_orphans\" \"all\" {\n" + tc.body + "\n}\n",
					ExpectError: wrapped("(?s)Error: " + tc.want),
				}},
			})
		})
	}
}
