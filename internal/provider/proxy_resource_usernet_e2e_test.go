package provider

import (
	"fmt"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
)

// A proxy on QEMU user-mode networking (for laptops without a libvirt network) serves on the host port its
// proxy port is forwarded to. The forward listens where libvirtd runs: inside the test namespace, on its
// loopback. Forwarded connections reach Squid from 10.0.2.2, QEMU's address for the host.
func TestAccProxyKVM_userNetForwardServesTheProxy(t *testing.T) {
	uri := kvmAccPreCheck(t)
	image := os.Getenv("EGRESS_TEST_IMAGE")
	if image == "" {
		t.Fatal("EGRESS_TEST_IMAGE must name the proxy image: `make image` builds it, `make testacc` sets it")
	}
	const forward = "127.0.0.1:13128"
	owner := "e2e-" + uuid.NewString()[:8]
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { kvmAccPreCheck(t) },
		ProtoV6ProviderFactories: realProviders(),
		Steps: []resource.TestStep{{
			Config: kvmProviderBlock(owner, uri) + fmt.Sprintf(`
resource "egress_proxy" "laptop" {
  kvm = {
    image_file      = %q
    memory_mib      = 512
    user_net        = true
    forward_address = "127.0.0.1"
    forward_port    = 13128
  }
  allowed_client_cidrs = ["10.0.2.2/32"]
  allowed_destinations = ["allowed.test"]
  auth = {
    username = %q
    password = %q
  }
  timeouts {
    create = "20m"
  }
}
`, image, e2eUser, e2ePass),
			Check: func(s *terraform.State) error {
				attrs := s.RootModule().Resources["egress_proxy.laptop"].Primary.Attributes
				if attrs["proxy_url"] != "http://"+forward {
					return fmt.Errorf("proxy_url = %q, want the forward http://%s", attrs["proxy_url"], forward)
				}
				waitUntilServing(t, forward)
				// The guest has no name server on user-mode networking here, so nothing can be fetched; what
				// the forward must show is this proxy's Squid applying its rules, which need no name lookup:
				// credentials first, then the allow-list.
				for _, e := range []proxyExpectation{
					{"http://denied.test/", "", "000", "407"},
					{"http://denied.test/", e2eUser + ":wrong-password", "000", "407"},
					{"http://denied.test/", e2eUser + ":" + e2ePass, "000", "403"},
				} {
					if _, status := proxied(t, forward, e.credentials, e.url); status != e.status {
						return fmt.Errorf("%s with credentials %q through the forward: status %s, want %s", e.url, e.credentials, status, e.status)
					}
				}
				return nil
			},
		}},
	})
}
