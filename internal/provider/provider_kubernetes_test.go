package provider

import (
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// TestAccProvider_kubernetesClusterSettings proves every cluster setting decodes (the model embeds the extra
// settings) and that a proxy placed on the named cluster reaches the kubernetes backend.
func TestAccProvider_kubernetesClusterSettings(t *testing.T) {
	mem := newMemoryBackends()
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		Steps: []resource.TestStep{{
			Config: `
provider "egress" {
  owner = "t"
  kubernetes = { clusters = { east = {
    config_paths           = ["/nonexistent/a", "/nonexistent/b"]
    host                   = "https://127.0.0.1:6443"
    token                  = "t0ken"
    cluster_ca_certificate = "-----BEGIN CERTIFICATE-----"
    insecure               = false
    image                  = "registry.example/squid:1"
    namespaces             = ["a", "b"]
    exec = { api_version = "client.authentication.k8s.io/v1", command = "get-token", args = ["--x"], env = { A = "1" } }
  } } }
}
resource "egress_proxy" "test" {
  kubernetes           = { cluster = "east", namespace = "proxies" }
  allowed_client_cidrs = ["10.0.0.0/8"]
}
`,
			Check: resource.TestMatchResourceAttr("egress_proxy.test", "id", regexp.MustCompile(`^kubernetes/east/proxies/egress-[0-9a-f]{16}$`)),
		}},
	})
}
