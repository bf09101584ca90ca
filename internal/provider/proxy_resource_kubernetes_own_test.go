package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil/k8stest"
)

// The proxy pod refuses its own address, which it learns from the downward API when it starts: a name the
// allow-list admits, pointed at the pod once it runs, gets 403 from Squid's destination guard, although the
// pods' range is in allowed_private_cidrs, so that no other guard stands in the way; without the guard Squid
// would connect to the pod itself (503 here: nothing listens on port 80). The origin, allowed the same way,
// still answers.
func TestAccProxyKubernetes_refusesItsOwnAddress(t *testing.T) {
	env := k8sAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	ns := env.cluster.Namespace(t, "acc-own")
	self := "self-" + owner + ".pods.test"
	config := k8sProviderBlock(t, env, owner, ns) + fmt.Sprintf(`
resource "egress_proxy" "own" {
  kubernetes            = { cluster = "test", namespace = %q }
  allowed_client_cidrs  = ["10.244.0.0/16", "172.31.255.0/24"]
  allowed_destinations  = [%q, %q]
  allowed_private_cidrs = [%q, "10.244.0.0/16"]
}
`, ns, k8sOrigin, self, k8sOriginCIDR)
	var id backend.ProviderID
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { k8sAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy:             k8sCheckNothingLabelled(env, owner),
		Steps: []resource.TestStep{{
			Config: config,
			Check: resource.ComposeTestCheckFunc(
				func(s *terraform.State) error {
					var err error
					if id, err = idForms.Parse(s.RootModule().Resources["egress_proxy.own"].Primary.ID); err != nil {
						return err
					}
					ips, err := env.cluster.PodIPs(context.Background(), id.Scope, backend.LabelName, id.Name)
					if err != nil {
						return err
					}
					if len(ips) != 1 {
						return fmt.Errorf("the proxy runs pods with addresses %v, want one pod with one address", ips)
					}
					k8stest.AddDNSName(t, env.kubeconfig, ips[0], self)
					return nil
				},
				k8sCheckServes(t, env, "own", nil,
					k8sRequest{url: "http://" + k8sOrigin + "/", status: "200"},
					k8sRequest{url: "http://" + self + "/", status: "403"},
				),
				func(*terraform.State) error {
					// The refusal is the destination guard's, not the allow-list's: Squid's access log says so.
					log := env.cluster.PodLog(context.Background(), id.Scope, backend.LabelName, id.Name)
					for _, line := range strings.Split(log, "\n") {
						if refusedByAddressGuard(line, self) {
							return nil
						}
					}
					return fmt.Errorf("Squid's log has no refusal of %s by the destination guard:\n%s", self, log)
				},
			),
		}},
	})
}

// refusedByAddressGuard tells whether an access log line, in either log format (a new proxy logs JSON), is a
// 403 for host port 80 that the destination address guard decided.
func refusedByAddressGuard(line, host string) bool {
	var entry struct {
		Host   string  `json:"host"`
		Port   string  `json:"port"`
		Status float64 `json:"status"`
		Reason string  `json:"reason"`
	}
	if json.Unmarshal([]byte(strings.TrimSpace(line)), &entry) == nil {
		return entry.Host == host && entry.Port == "80" && entry.Status == 403 && entry.Reason == proxyconf.ReasonDestinationAddress
	}
	return strings.Contains(line, "host="+host+" port=80 status=403") && strings.Contains(line, "reason="+proxyconf.ReasonDestinationAddress)
}
