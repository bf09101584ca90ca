package provider

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// Proxies Terraform does not know, in two namespaces, are found by one orphan list, as the documented Role
// alone sees them: it may not list across the cluster, so the provider lists the cluster's two namespaces; the
// backends' health, in a check block, reports the cluster ready with its version and no missing permission.
func TestAccProxyKubernetes_orphansAcrossNamespaces(t *testing.T) {
	env := k8sAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	ctx := context.Background()
	namespaces := []string{env.cluster.Namespace(t, "egress-orphans-a"), env.cluster.Namespace(t, "egress-orphans-b")}
	b := k8sBackend(t, env, namespaces...)
	made := make([]backend.Instance, len(namespaces))
	errs := make(chan error, len(namespaces))
	for i, ns := range namespaces {
		go func() {
			uid := uuid.NewString()
			var err error
			made[i], err = b.Create(ctx, backend.Spec{
				Name: backend.NameFromUID(uid), UID: uid, Owner: owner, Labels: map[string]string{},
				Placement: backend.Placement{Backend: kubernetes.Kind, Target: "test", Scope: ns,
					Options: &kubernetes.Options{}},
				Proxy: proxyconf.Settings{Port: 3128, AllowedClientCIDRs: []string{"10.244.0.0/16"}, AllowedDestinations: []string{k8sOrigin}},
			})
			errs <- err
		}()
	}
	for range namespaces {
		if err := <-errs; err != nil {
			t.Fatalf("creating a proxy behind terraform's back: %v", err)
		}
	}
	t.Cleanup(func() {
		for _, inst := range made {
			_ = b.Delete(context.Background(), inst.ID)
		}
	})
	orphan := func(inst backend.Instance) knownvalue.Check {
		return knownvalue.ObjectPartial(map[string]knownvalue.Check{
			"id": knownvalue.StringExact(inst.ID.String()), "uid": knownvalue.StringExact(inst.UID),
			"backend": knownvalue.StringExact("kubernetes"), "state": knownvalue.StringExact("Running"),
		})
	}
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { k8sAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		Steps: []resource.TestStep{{
			Config: k8sProviderBlock(t, env, owner, namespaces...) + fmt.Sprintf(`
data "egress_proxy_orphans" "all" {
  min_age   = "0s"
  known_ids = [%q]
}

check "backends" {
  data "egress_backends" "all" {}
  assert {
    condition     = data.egress_backends.all.healthy
    error_message = "the test cluster is not healthy"
  }
}
`, "kubernetes/test/default/known"),
			// A check block's data source is read again by every plan; there is nothing else in this one.
			ExpectNonEmptyPlan: true,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("orphans"),
					knownvalue.SetExact([]knownvalue.Check{orphan(made[0]), orphan(made[1])})),
				statecheck.ExpectKnownValue("data.egress_proxy_orphans.all", tfjsonpath.New("incomplete"), knownvalue.Bool(false)),
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("healthy"), knownvalue.Bool(true)),
				statecheck.ExpectKnownValue("data.egress_backends.all", tfjsonpath.New("backends"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectPartial(map[string]knownvalue.Check{
						"backend": knownvalue.StringExact("kubernetes"), "target": knownvalue.StringExact("test"),
						"healthy": knownvalue.Bool(true),
						"details": knownvalue.MapPartial(map[string]knownvalue.Check{"version": knownvalue.StringExact("v1.37.2")}),
					}),
				})),
			},
		}},
	})
}
