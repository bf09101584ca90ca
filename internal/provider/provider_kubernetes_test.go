package provider

import (
	"fmt"
	"reflect"
	"regexp"
	"sync"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kubernetes"
)

// TestAccProvider_kubernetesClusterSettings proves every cluster setting decodes (the model embeds the extra
// settings) into the configuration the kubernetes backend is built from, and that a proxy placed on the named
// cluster reaches the kubernetes backend (the memory one stands in for it: no cluster answers at 127.0.0.1:6443).
func TestAccProvider_kubernetesClusterSettings(t *testing.T) {
	mem := newMemoryBackends()
	var (
		mu   sync.Mutex
		seen []kubernetes.Config
	)
	// The factories the provider uses, recording what it would configure the real kubernetes backend with.
	recording := func(cfg providerModel) map[backend.Kind]backend.Factory {
		if block, ok := cfg.blocks[kubernetes.Kind].(*kubernetesProviderModel); ok {
			mu.Lock()
			seen = append(seen, kubernetesBackendConfig(block))
			mu.Unlock()
		}
		return mem.factories(cfg)
	}
	want := kubernetes.Config{Clusters: map[string]kubernetes.ClusterConfig{"east": {
		ConfigPaths:          []string{"/nonexistent/a", "/nonexistent/b"},
		Host:                 "https://127.0.0.1:6443",
		Token:                "t0ken",
		ClusterCACertificate: "-----BEGIN CERTIFICATE-----",
		Image:                "registry.example/squid:1",
		Namespaces:           []string{"a", "b"},
		Exec: &kubernetes.ExecConfig{
			APIVersion: "client.authentication.k8s.io/v1", Command: "get-token", Args: []string{"--x"}, Env: map[string]string{"A": "1"},
		},
	}}}
	resource.Test(t, resource.TestCase{
		PreCheck: func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: map[string]func() (tfprotov6.ProviderServer, error){
			"egress": providerserver.NewProtocol6WithError(&egressProvider{version: "test", factories: recording}),
		},
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
			Check: resource.ComposeTestCheckFunc(
				resource.TestMatchResourceAttr("egress_proxy.test", "id", regexp.MustCompile(`^kubernetes/east/proxies/egress-[0-9a-f]{16}$`)),
				func(*terraform.State) error {
					if n := mem[kubernetes.Kind].Calls("create"); n != 1 {
						return fmt.Errorf("the kubernetes backend saw %d creates, want 1", n)
					}
					return nil
				},
			),
		}},
	})
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("the provider never configured the kubernetes backend")
	}
	for i, got := range seen {
		if !reflect.DeepEqual(got, want) {
			t.Errorf("configuration %d of the kubernetes backend:\n got %+v\nwant %+v", i, got, want)
		}
	}
}
