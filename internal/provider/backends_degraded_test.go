package provider

import (
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/memory"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/secretmanagerfake"
)

// noneListed is an empty degraded_proxies or proxy_errors.
var noneListed = knownvalue.ListExact([]knownvalue.Check{})

// Two gcp proxies of three instances on the Compute fake: while every VM passes the load balancer's health
// check, egress_backends lists no proxy as degraded; once the second VM of one fails it, that proxy is listed
// on its project with that VM, its zone and the health check's words, and the other proxy is not. The
// listing alone counts a running VM as serving: only reading each proxy back tells.
func TestAccBackendsGCP_degradedProxies(t *testing.T) {
	fake := gcpFake(t)
	gcpGuests(t, fake)
	// Secret Manager too: the listing asks it for the secrets of gone proxies.
	sm := secretmanagerfake.New(secretmanagerfake.Options{AdminToken: "acc-token", AdminPermissions: gcpDocumentedRole(t)})
	t.Cleanup(sm.Close)
	const name, other = "egress-acc-deg", "egress-acc-ok"
	config := gcpProviderWithSecrets(fake, sm.URL, "us-central1-a") + fmt.Sprintf(`
resource "egress_proxy" "test" {
  name                 = %q
  gcp                  = { instances = 3 }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]
}
resource "egress_proxy" "healthy" {
  name                 = %q
  gcp                  = { instances = 3 }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]
}
data "egress_backends" "all" {
  depends_on = [egress_proxy.test, egress_proxy.healthy]
}
`, name, other)
	backends := func(degraded knownvalue.Check) statecheck.StateCheck {
		return statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends"), knownvalue.ListExact([]knownvalue.Check{
			knownvalue.ObjectPartial(map[string]knownvalue.Check{
				"backend": knownvalue.StringExact("gcp"), "target": knownvalue.StringExact(gcpTestProject),
				"degraded_proxies": degraded, "proxy_errors": noneListed,
			}),
		}))
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("members"), knownvalue.ListSizeExact(3)),
					statecheck.ExpectKnownValue("egress_proxy.healthy", tfjsonpath.New("members"), knownvalue.ListSizeExact(3)),
					backends(noneListed),
				},
			},
			{
				PreConfig: func() { fake.SetHealthy(gcpTestProject, "us-central1-b", name+"-2", false) },
				Config:    config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("state"), knownvalue.StringExact("Degraded")),
					statecheck.ExpectKnownValue("egress_proxy.healthy", tfjsonpath.New("state"), knownvalue.StringExact("Running")),
					backends(knownvalue.ListExact([]knownvalue.Check{
						knownvalue.ObjectExact(map[string]knownvalue.Check{
							"id":   knownvalue.StringExact("gcp/" + gcpTestProject + "/us-central1-a/" + name),
							"name": knownvalue.StringExact(name),
							"unhealthy_members": knownvalue.ListExact([]knownvalue.Check{
								knownvalue.ObjectExact(map[string]knownvalue.Check{
									"name": knownvalue.StringExact(name + "-2"), "scope": knownvalue.StringExact("us-central1-b"),
									"reason": knownvalue.StringRegexp(regexp.MustCompile(`health check \(HTTP on port 3129\) reports UNHEALTHY`)),
								}),
							}),
						}),
					})),
				},
			},
		},
	})
}

// Each target reports its own proxies, and what it could not list or read is data on that target alone: a
// host whose listing fails says so in its proxy_errors while the other still lists its degraded proxy; a
// proxy that cannot be read is named in its target's proxy_errors. Never an error diagnostic. Only the
// owner's Degraded proxies are listed: not a healthy proxy of several, not one of one, not another owner's.
func TestAccBackends_degradedProxiesPerTarget(t *testing.T) {
	mem := newMemoryBackends()
	hosts := mem[kvm.Kind]
	hosts.SetHealth([]backend.Health{
		{Target: "hv1", Healthy: true, Reason: backend.HealthHealthy},
		{Target: "hv2", Healthy: true, Reason: backend.HealthHealthy},
	})
	several := func(name, owner string, healthy ...bool) backend.Instance {
		inst := instanceAt(kvm.Kind, "hv1", "", name, owner, time.Hour)
		for i, h := range healthy {
			m := backend.Member{Name: fmt.Sprintf("%s-%d", name, i+1), Scope: "hv1", Healthy: h}
			if !h {
				m.Reason = "its domain is Stopped"
			}
			inst.Members = append(inst.Members, m)
		}
		inst.State = backend.DegradedState(inst.Members)
		return inst
	}
	hosts.Put(several("ha-degraded", "team-a", true, false, true))
	hosts.Put(several("ha-healthy", "team-a", true, true, true))
	hosts.Put(several("ha-theirs", "team-b", false, true))
	hosts.Put(instanceAt(kvm.Kind, "hv1", "", "single", "team-a", time.Hour))
	hosts.SetFaults(memory.Faults{ListFailures: map[string]error{
		"hv2": memory.ClassError(backend.ClassTransient, "kvm host hv2", "connection reset by peer"),
	}})
	config := `
provider "egress" {
  owner = "team-a"
  kvm   = {}
}
data "egress_backends" "all" {}
`
	entry := func(target string, degraded, errors knownvalue.Check) knownvalue.Check {
		return knownvalue.ObjectPartial(map[string]knownvalue.Check{
			"target": knownvalue.StringExact(target), "healthy": knownvalue.Bool(true), "degraded_proxies": degraded, "proxy_errors": errors,
		})
	}
	hv2Failed := knownvalue.ListExact([]knownvalue.Check{
		knownvalue.StringRegexp(regexp.MustCompile(`^kvm scope "hv2": .*connection reset by peer.* \(class Transient\)$`)),
	})
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("healthy"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends"), knownvalue.ListExact([]knownvalue.Check{
						entry("hv1", knownvalue.ListExact([]knownvalue.Check{
							knownvalue.ObjectExact(map[string]knownvalue.Check{
								"id": knownvalue.StringExact("kvm/hv1/ha-degraded"), "name": knownvalue.StringExact("ha-degraded"),
								"unhealthy_members": knownvalue.ListExact([]knownvalue.Check{
									knownvalue.ObjectExact(map[string]knownvalue.Check{
										"name": knownvalue.StringExact("ha-degraded-2"), "scope": knownvalue.StringExact("hv1"),
										"reason": knownvalue.StringExact("its domain is Stopped"),
									}),
								}),
							}),
						}), noneListed),
						entry("hv2", noneListed, hv2Failed),
					})),
				},
			},
			{
				PreConfig: func() {
					hosts.SetFaults(memory.Faults{
						ListFailures: map[string]error{"hv2": memory.ClassError(backend.ClassTransient, "kvm host hv2", "connection reset by peer")},
						Errors:       map[string]error{"get": memory.ClassError(backend.ClassPermanent, "kvm domain", "guest agent refused")},
					})
				},
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends"), knownvalue.ListExact([]knownvalue.Check{
						entry("hv1", noneListed, knownvalue.ListExact([]knownvalue.Check{
							knownvalue.StringRegexp(regexp.MustCompile(`^proxy kvm/hv1/ha-degraded could not be read: .*guest agent refused.* \(class Permanent\)$`)),
							knownvalue.StringRegexp(regexp.MustCompile(`^proxy kvm/hv1/ha-healthy could not be read: `)),
							knownvalue.StringRegexp(regexp.MustCompile(`^proxy kvm/hv1/single could not be read: `)),
						})),
						entry("hv2", noneListed, hv2Failed),
					})),
				},
			},
		},
	})
}

func TestTargetsOfScope(t *testing.T) {
	t.Parallel()
	targets := []string{"proj", "proj-b", "*"}
	tests := map[string]struct {
		scope string
		want  []string
	}{
		"the target itself":          {scope: "proj-b", want: []string{"proj-b"}},
		"a zone within it":           {scope: "proj/us-central1-b", want: []string{"proj"}},
		"an API's objects within it": {scope: "proj-b forwarding rules", want: []string{"proj-b"}},
		"a target that is a prefix":  {scope: "proj-b/us-east1-c", want: []string{"proj-b"}},
		"the whole backend":          {scope: "*", want: []string{"*"}},
		"no target named":            {scope: "elsewhere", want: []string{"*"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := targetsOfScope(tc.scope, targets); !slices.Equal(got, tc.want) {
				t.Errorf("targetsOfScope(%q) = %v, want %v", tc.scope, got, tc.want)
			}
		})
	}
	if got := targetsOfScope("elsewhere", []string{"hv1", "hv2"}); !slices.Equal(got, []string{"hv1", "hv2"}) {
		t.Errorf("a scope of no target, without a whole-backend entry: %v, want every target", got)
	}
}
