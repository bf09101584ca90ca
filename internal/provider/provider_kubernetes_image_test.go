package provider

import (
	"sync"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
)

// TestAccProvider_kubernetesDefaultImageFollowsVersion proves the provider's version (main.version, set by the
// release build) reaches the kubernetes backend as its default image: a release runs the image published with
// it, the tests' build (which knows no release) the backend's DefaultImage.
func TestAccProvider_kubernetesDefaultImageFollowsVersion(t *testing.T) {
	tests := map[string]struct {
		version, want string
	}{
		"release":           {"0.3.0", kubernetes.ImageRepository + ":0.3.0"},
		"release candidate": {"1.0.0-rc.2", kubernetes.ImageRepository + ":1.0.0-rc.2"},
		"no release":        {"test", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			mem := newMemoryBackends()
			var (
				mu   sync.Mutex
				seen []string
			)
			recording := func(cfg providerModel) map[backend.Kind]backend.Factory {
				if block, ok := cfg.blocks[kubernetes.Kind].(*kubernetesProviderModel); ok {
					mu.Lock()
					seen = append(seen, kubernetesBackendConfig(block).Image)
					mu.Unlock()
				}
				return mem.factories(cfg)
			}
			resource.Test(t, resource.TestCase{
				PreCheck: func() { testAccPreCheck(t) },
				ProtoV6ProviderFactories: map[string]func() (tfprotov6.ProviderServer, error){
					"egress": providerserver.NewProtocol6WithError(&egressProvider{version: tc.version, factories: recording}),
				},
				Steps: []resource.TestStep{{
					Config: `
provider "egress" {
  owner      = "t"
  kubernetes = {}
}
resource "egress_proxy" "test" {
  kubernetes           = { namespace = "proxies" }
  allowed_client_cidrs = ["10.0.0.0/8"]
}
`,
				}},
			})
			mu.Lock()
			defer mu.Unlock()
			if len(seen) == 0 {
				t.Fatal("the provider never configured the kubernetes backend")
			}
			for i, got := range seen {
				if got != tc.want {
					t.Errorf("configuration %d of the kubernetes backend has default image %q, want %q", i, got, tc.want)
				}
			}
		})
	}
}
