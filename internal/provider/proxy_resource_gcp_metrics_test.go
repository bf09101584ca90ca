package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	gcpguest "github.com/egress-proxies/terraform-provider-egress/internal/backend/gcp/guest"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// metrics on gcp, on the Compute fake: planned and created on, the VM's metadata holds the metrics programs'
// files (mtail's drop-in on metrics.port) and the backstop the metrics ranges, and metrics_url and
// squid_metrics_url are the VM's internal address; the ranges and then the port change in place (the same
// VM, its id unchanged; a URL whose port stays is known in the plan); off, the keys go and the URLs are null.
func TestAccProxyGCP_metrics(t *testing.T) {
	fake := gcpFake(t)
	// The guests answer for the VMs: an in-place change waits for the VM to report the new configuration.
	gcpGuests(t, fake)
	const name = "egress-acc-metrics"
	config := func(metrics string) string {
		return gcpConfig(fake, "acc-token", fmt.Sprintf(`  name                 = %q
  gcp                  = {}
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]
  log_format           = "json"
  %s`, name, metrics))
	}
	// The VM's own numeric id, which a replacement of the same name would change, and its internal address.
	var vmID uint64
	var address string
	metadata := func(key string) (string, bool) {
		in := fake.Instance(gcpTestProject, "us-central1-a", name)
		for _, it := range in.GetMetadata().GetItems() {
			if it.GetKey() == key {
				return it.GetValue(), true
			}
		}
		return "", false
	}
	// held checks the VM is the first one and holds the metrics keys for port and ranges (port 0: none).
	held := func(port int, ranges ...string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			in := fake.Instance(gcpTestProject, "us-central1-a", name)
			switch {
			case in == nil:
				return fmt.Errorf("no instance %s", name)
			case vmID == 0:
				vmID, address = in.GetId(), in.GetNetworkInterfaces()[0].GetNetworkIP()
			case in.GetId() != vmID:
				return fmt.Errorf("the VM was replaced: id %d, was %d", in.GetId(), vmID)
			}
			dropIn, has := metadata(gcpguest.MetadataMtailDropIn)
			backstop, _ := metadata(gcpguest.MetadataBackstop)
			if port == 0 {
				for k := range gcpguest.MetricsKeys {
					if _, has := metadata(k); has {
						return fmt.Errorf("metadata %s without metrics", k)
					}
				}
				return nil
			}
			if !has || !strings.Contains(dropIn, fmt.Sprintf("--port %d ", port)) {
				return fmt.Errorf("metadata %s = %q (present %v), want mtail on port %d", gcpguest.MetadataMtailDropIn, dropIn, has, port)
			}
			for _, w := range append(ranges, proxyconf.NftablesMetricsChain) {
				if !strings.Contains(backstop, w) {
					return fmt.Errorf("the backstop lacks %s: it does not admit %v to the metrics ports:\n%s", w, ranges, backstop)
				}
			}
			return nil
		}
	}
	url := func(attr string, port int) statecheck.StateCheck {
		return statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New(attr), knownvalueFunc(func() string {
			return fmt.Sprintf("http://%s:%d/metrics", address, port)
		}))
	}
	null := func(attr string) statecheck.StateCheck {
		return statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New(attr), knownvalue.Null())
	}
	sameID := statecheck.CompareValue(compare.ValuesSame())
	// Each step adds its own state value to compare: the id stays the VM's.
	id := func() statecheck.StateCheck { return sameID.AddStateValue("egress_proxy.test", tfjsonpath.New("id")) }
	update := func(checks ...plancheck.PlanCheck) resource.ConfigPlanChecks {
		return resource.ConfigPlanChecks{PreApply: append([]plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate)}, checks...)}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: gcpProviderFactories(),
		Steps: []resource.TestStep{
			{
				Config:            config(`metrics = { allowed_client_cidrs = ["192.168.7.0/24"] }`),
				Check:             held(3903, "192.168.7.0/24"),
				ConfigStateChecks: []statecheck.StateCheck{id(), url("metrics_url", 3903), url("squid_metrics_url", 9301)},
			},
			{
				ResourceName:            "egress_proxy.test",
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts"},
			},
			{
				// Another range: in place, the URLs known in the plan.
				Config:            config(`metrics = { allowed_client_cidrs = ["192.168.7.0/24", "172.16.0.0/12"] }`),
				ConfigPlanChecks:  update(plancheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("metrics_url"), knownvalueFunc(func() string { return fmt.Sprintf("http://%s:3903/metrics", address) }))),
				Check:             held(3903, "192.168.7.0/24", "172.16.0.0/12"),
				ConfigStateChecks: []statecheck.StateCheck{id(), url("metrics_url", 3903)},
			},
			{
				Config:            config(`metrics = { allowed_client_cidrs = ["192.168.7.0/24"], port = 9100 }`),
				ConfigPlanChecks:  update(plancheck.ExpectUnknownValue("egress_proxy.test", tfjsonpath.New("metrics_url"))),
				Check:             held(9100, "192.168.7.0/24"),
				ConfigStateChecks: []statecheck.StateCheck{id(), url("metrics_url", 9100), url("squid_metrics_url", 9301)},
			},
			{
				Config:            config(""),
				ConfigPlanChecks:  update(),
				Check:             held(0),
				ConfigStateChecks: []statecheck.StateCheck{id(), null("metrics_url"), null("squid_metrics_url")},
			},
		},
	})
}

// knownvalueFunc is a string check against want(), read when the check runs: the VM's address is known once
// it exists.
func knownvalueFunc(want func() string) knownvalue.Check {
	return knownvalue.StringFunc(func(v string) error {
		if w := want(); v != w {
			return fmt.Errorf("%q, want %q", v, w)
		}
		return nil
	})
}
