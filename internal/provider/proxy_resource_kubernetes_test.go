//go:build k8sacc

// Built only with -tags k8sacc until scripts/k8s-env.sh is part of make test: without the cluster these
// acceptance tests fail their PreCheck under TF_ACC.

package provider

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
)

// These tests drive the real single-node cluster scripts/k8s-env.sh runs in its own network namespace: the
// proxy pod runs Squid from the image scripts/build-k8s-image.sh builds, and requests go through its Service
// from inside that namespace, to the HTTP origin the script serves there.

const k8sOrigin = "origin.egress-k8s.test"

func k8sAccPreCheck(t *testing.T) (kubeconfig, netns string) {
	t.Helper()
	testAccPreCheck(t)
	kubeconfig, netns = os.Getenv("EGRESS_K8S_KUBECONFIG"), os.Getenv("EGRESS_K8S_NETNS")
	if kubeconfig == "" || netns == "" {
		t.Fatal("EGRESS_K8S_KUBECONFIG and EGRESS_K8S_NETNS must name the test cluster: run `scripts/k8s-env.sh start` " +
			"(KUBECONFIG=/var/tmp/egress-k8s/kubeconfig, namespace egress-k8s) or `make testacc`")
	}
	return kubeconfig, netns
}

func k8sProviderBlock(owner, kubeconfig string) string {
	return fmt.Sprintf(`
provider "egress" {
  owner = %q
  kubernetes = { clusters = { test = { config_path = %q } } }
}
`, owner, kubeconfig)
}

func k8sBackend(t *testing.T, kubeconfig string) *kubernetes.Backend {
	t.Helper()
	b, err := kubernetes.New(kubernetes.Config{Clusters: map[string]kubernetes.ClusterConfig{"test": {ConfigPath: kubeconfig}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// k8sProxied sends one plain HTTP request through the proxy from inside the cluster's network namespace and
// returns curl's status code ("000" when there was no answer).
func k8sProxied(t *testing.T, netns, proxy, url string) string {
	t.Helper()
	out, _ := exec.Command("ip", "netns", "exec", netns, "curl", "-sS", "-o", "/dev/null", "--max-time", "20",
		"-w", "%{http_code}", "-x", "http://"+proxy, url).Output()
	return strings.TrimSpace(string(out))
}

func k8sCheckServes(t *testing.T, netns string, want map[string]string, address *string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		rs := s.RootModule().Resources["egress_proxy.k8s"]
		proxy := rs.Primary.Attributes["internal_address"] + ":" + rs.Primary.Attributes["port"]
		if address != nil {
			if *address != "" && *address != rs.Primary.Attributes["internal_address"] {
				return fmt.Errorf("the Service address changed from %s to %s", *address, rs.Primary.Attributes["internal_address"])
			}
			*address = rs.Primary.Attributes["internal_address"]
		}
		for url, status := range want {
			if got := k8sProxied(t, netns, proxy, url); got != status {
				return fmt.Errorf("GET %s through %s: status %s, want %s", url, proxy, got, status)
			}
		}
		return nil
	}
}

func TestAccProxyKubernetes_lifecycleOnRealCluster(t *testing.T) {
	kubeconfig, netns := k8sAccPreCheck(t)
	owner := "acc-" + uuid.NewString()[:8]
	b := k8sBackend(t, kubeconfig)
	config := func(destination string) string {
		return k8sProviderBlock(owner, kubeconfig) + fmt.Sprintf(`
resource "egress_proxy" "k8s" {
  kubernetes           = { cluster = "test", namespace = "default" }
  allowed_client_cidrs = ["10.244.0.0/16", "172.31.255.0/24"]
  allowed_destinations = [%q]
  labels               = { suite = "acceptance" }
}
`, destination)
	}
	var id backend.ProviderID
	var address string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { k8sAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		CheckDestroy: func(*terraform.State) error {
			if _, err := b.Get(context.Background(), id); !backend.IsNotFound(err) {
				return fmt.Errorf("%s after destroy: get returned %v, want NotFound", id, err)
			}
			return checkOwnerHasNothingLeft(b, owner)(nil)
		},
		Steps: []resource.TestStep{
			{
				Config: config(k8sOrigin),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("egress_proxy.k8s", tfjsonpath.New("state"), knownvalue.StringExact("Running")),
				},
				Check: resource.ComposeTestCheckFunc(
					func(s *terraform.State) error {
						var err error
						id, err = backend.ParseProviderID(s.RootModule().Resources["egress_proxy.k8s"].Primary.ID)
						return err
					},
					k8sCheckServes(t, netns, map[string]string{
						"http://" + k8sOrigin + "/":      "200",
						"http://denied.egress-k8s.test/": "403",
					}, &address),
				),
			},
			{
				Config:   config(k8sOrigin),
				PlanOnly: true, // nothing changed: an empty plan
			},
			{
				ResourceName:            "egress_proxy.k8s",
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts"},
			},
			{
				// A new allow-list is enforced. The backend changes it in place (Reconfigure, same Service); the
				// provider layer plans a replacement until it calls Reconfigure, so the address is not compared.
				Config: config("other.egress-k8s.test"),
				Check:  k8sCheckServes(t, netns, map[string]string{"http://" + k8sOrigin + "/": "403"}, nil),
			},
			{
				// The Deployment is deleted behind Terraform's back: the next plan creates the proxy again.
				PreConfig: func() {
					if err := b.Delete(context.Background(), id); err != nil {
						t.Fatalf("deleting %s behind terraform's back: %v", id, err)
					}
				},
				Config: config(k8sOrigin),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.k8s", plancheck.ResourceActionCreate),
				}},
				Check: k8sCheckServes(t, netns, map[string]string{"http://" + k8sOrigin + "/": "200"}, nil),
			},
		},
	})
}
