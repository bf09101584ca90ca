package provider

import (
	"fmt"
	"slices"
	"testing"

	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// TestAccProxy_metrics: metrics turn on, change and turn off in place on a backend that serves them; the
// backend is given exactly the planned metrics each time; the URLs follow the ports, are kept by a plan that
// changes nothing of theirs, and are null without metrics.
func TestAccProxy_metrics(t *testing.T) {
	for kind, placement := range map[backend.Kind]string{
		kubernetes.Kind: `kubernetes = { cluster = "default", namespace = "egress" }`,
		kvm.Kind:        `kvm = { host = "hv1" }`,
	} {
		t.Run(string(kind), func(t *testing.T) { testAccProxyMetrics(t, kind, placement) })
	}
}

func testAccProxyMetrics(t *testing.T, kind backend.Kind, placement string) {
	mem := newMemoryBackends()
	config := func(metrics string) string {
		return proxyConfig(fmt.Sprintf(`
  %s
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = ["api.example.com"]
  %s
`, placement, metrics))
	}
	urls := func(metrics, squid knownvalue.Check) []statecheck.StateCheck {
		return []statecheck.StateCheck{
			statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("metrics_url"), metrics),
			statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("squid_metrics_url"), squid),
		}
	}
	const host = "10.0.0.10" // the memory backend's internal address
	update := tfresource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate)}}
	tfresource.Test(t, tfresource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		CheckDestroy:             checkDestroyed(mem),
		Steps: []tfresource.TestStep{
			{
				Config:            config(""),
				ConfigStateChecks: urls(knownvalue.Null(), knownvalue.Null()),
				Check:             checkBackendMetrics(mem, kind, nil, 0),
			},
			{
				Config:            config(`metrics = { allowed_client_cidrs = ["192.168.7.0/24"] }`),
				ConfigPlanChecks:  update,
				ConfigStateChecks: urls(knownvalue.StringExact("http://"+host+":3903/metrics"), knownvalue.StringExact("http://"+host+":9301/metrics")),
				Check:             checkBackendMetrics(mem, kind, &proxyconf.MetricsSettings{Port: 3903, SquidPort: 9301, AllowedClientCIDRs: []string{"192.168.7.0/24"}}, 1),
			},
			{
				// Another range: the URLs stay, and are known in the plan.
				Config: config(`metrics = { allowed_client_cidrs = ["192.168.7.0/24", "172.16.0.0/12"] }`),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("metrics_url"), knownvalue.StringExact("http://"+host+":3903/metrics")),
				}},
				Check: checkBackendMetrics(mem, kind, &proxyconf.MetricsSettings{Port: 3903, SquidPort: 9301, AllowedClientCIDRs: []string{"172.16.0.0/12", "192.168.7.0/24"}}, 2),
			},
			{
				Config: config(`metrics = { allowed_client_cidrs = ["192.168.7.0/24"], port = 9100, squid_port = 9101 }`),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionUpdate),
					plancheck.ExpectUnknownValue("egress_proxy.test", tfjsonpath.New("metrics_url")),
				}},
				ConfigStateChecks: urls(knownvalue.StringExact("http://"+host+":9100/metrics"), knownvalue.StringExact("http://"+host+":9101/metrics")),
				Check:             checkBackendMetrics(mem, kind, &proxyconf.MetricsSettings{Port: 9100, SquidPort: 9101, AllowedClientCIDRs: []string{"192.168.7.0/24"}}, 3),
			},
			{
				Config:            config(""),
				ConfigPlanChecks:  update,
				ConfigStateChecks: urls(knownvalue.Null(), knownvalue.Null()),
				Check:             checkBackendMetrics(mem, kind, nil, 4),
			},
		},
	})
}

// checkBackendMetrics: the one proxy the memory backend of kind holds was given want, after reconfigures
// in-place changes (none replaced it).
func checkBackendMetrics(mem memoryBackends, kind backend.Kind, want *proxyconf.MetricsSettings, reconfigures int) tfresource.TestCheckFunc {
	return func(*terraform.State) error {
		held := mem[kind].Instances()
		if len(held) != 1 || held[0].Proxy == nil {
			return fmt.Errorf("the backend holds %d proxies, want 1 with settings", len(held))
		}
		got := held[0].Proxy.Metrics
		switch {
		case (got == nil) != (want == nil):
			return fmt.Errorf("the backend was given metrics %+v, want %+v", got, want)
		case got != nil && (got.Port != want.Port || got.SquidPort != want.SquidPort || !slices.Equal(got.AllowedClientCIDRs, want.AllowedClientCIDRs)):
			return fmt.Errorf("the backend was given metrics %+v, want %+v", *got, *want)
		}
		if n := mem[kind].Calls("reconfigure"); n != reconfigures {
			return fmt.Errorf("reconfigure was called %d times, want %d", n, reconfigures)
		}
		if n := mem[kind].Calls("create"); n != 1 {
			return fmt.Errorf("create was called %d times, want 1: metrics change in place", n)
		}
		return nil
	}
}

// TestAccProxy_metricsRefusedAtPlan: each mistake is refused by the plan, on the attribute at fault, before
// anything is created.
func TestAccProxy_metricsRefusedAtPlan(t *testing.T) {
	const k8s = `kubernetes = { cluster = "default", namespace = "egress" }`
	for name, tc := range map[string]struct {
		body, want string
	}{
		"kvm on user-mode networking": {`kvm = { host = "hv1", user_net = true }
  metrics = { allowed_client_cidrs = ["192.168.7.0/24"] }`, `Attribute metrics: a proxy on kvm.user_net cannot serve metrics`},
		"the text log": {k8s + `
  log_format = "text"
  metrics = { allowed_client_cidrs = ["192.168.7.0/24"] }`, `Attribute metrics: the metrics count the JSON access log`},
		"no range": {k8s + `
  metrics = { allowed_client_cidrs = [] }`, `Attribute metrics.allowed_client_cidrs set must contain at least 1`},
		"a range with host bits": {k8s + `
  metrics = { allowed_client_cidrs = ["192.168.7.1/24"] }`, `host bits set`},
		"the proxy's port": {k8s + `
  port = 9100
  metrics = { allowed_client_cidrs = ["192.168.7.0/24"], port = 9100 }`, `Attribute metrics.port: 9100 is the proxy's own port`},
		"one port for both": {k8s + `
  metrics = { allowed_client_cidrs = ["192.168.7.0/24"], port = 9100, squid_port = 9100 }`, `Attribute metrics.squid_port: 9100 is also metrics.port`},
		"the health port": {k8s + `
  metrics = { allowed_client_cidrs = ["192.168.7.0/24"], squid_port = 3129 }`, `Attribute metrics.squid_port: port 3129 is reserved for the proxy's health check`},
		"the proxy on the manager port": {k8s + `
  port = 3130
  metrics = { allowed_client_cidrs = ["192.168.7.0/24"] }`, `Attribute port: a proxy with metrics keeps 3130`},
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
  ` + tc.body),
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
