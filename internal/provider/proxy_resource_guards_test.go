package provider

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend/kvm"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
	"github.com/egress-proxies/terraform-provider-egress/internal/testing/testutil"
)

// The guard, TLS and limit attributes reach the backend's settings, default where unset, and proxy_url says
// https:// with tls.
func TestAccProxy_guardSettings(t *testing.T) {
	mem := newMemoryBackends()
	cert, key := testutil.SelfSignedPEM(t, "proxy.test")
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		CheckDestroy:             checkDestroyed(mem),
		Steps: []resource.TestStep{
			{
				Config: proxyConfig(`
  kvm                  = { host = "hv1" }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]
`),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("proxy_url"), knownvalue.StringExact("http://10.0.0.10:3128")),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("max_connections_per_client"), knownvalue.Int64Exact(proxyconf.DefaultMaxConnectionsPerClient)),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("allowed_private_cidrs"), knownvalue.SetExact([]knownvalue.Check{})),
				},
				Check: checkBackendSettings(mem, func(s proxyconf.Settings) error {
					if s.TLS != nil || len(s.AllowedPrivateCIDRs) != 0 || s.MaxConnectionsPerClient != proxyconf.DefaultMaxConnectionsPerClient {
						return fmt.Errorf("defaults: got TLS %v, private %q, max %d", s.TLS != nil, s.AllowedPrivateCIDRs, s.MaxConnectionsPerClient)
					}
					return nil
				}),
			},
			{
				Config: proxyConfig(fmt.Sprintf(`
  kvm                        = { host = "hv1" }
  allowed_client_cidrs       = ["10.0.0.0/8"]
  allowed_destinations       = [".example.com"]
  allowed_private_cidrs      = ["10.20.0.0/16", "fd00::/8"]
  max_connections_per_client = 50
  tls = {
    certificate_pem = %q
    private_key_pem = %q
  }
`, cert, key)),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("proxy_url"), knownvalue.StringExact("https://10.0.0.10:3128")),
				},
				Check: checkBackendSettings(mem, func(s proxyconf.Settings) error {
					if s.TLS == nil || s.TLS.CertificatePEM != cert || s.TLS.PrivateKeyPEM != key {
						return fmt.Errorf("the backend got another TLS certificate or key")
					}
					if !slices.Equal(s.AllowedPrivateCIDRs, []string{"10.20.0.0/16", "fd00::/8"}) || s.MaxConnectionsPerClient != 50 {
						return fmt.Errorf("got private %q, max %d", s.AllowedPrivateCIDRs, s.MaxConnectionsPerClient)
					}
					return nil
				}),
			},
		},
	})
}

// The TLS key given write-only reaches the backend and never the state; a new key alone changes nothing, a new
// private_key_pem_wo_version replaces the proxy with one serving it.
func TestAccProxy_tlsWriteOnlyKey(t *testing.T) {
	mem := newMemoryBackends()
	cert1, key1 := testutil.SelfSignedPEM(t, "proxy.test")
	cert2, key2 := testutil.SelfSignedPEM(t, "proxy.test")
	// key1 in another encoding: a new value that still forms a pair with cert1.
	block, _ := pem.Decode([]byte(key1))
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatalf("SelfSignedPEM made a %T key, not ECDSA", parsed)
	}
	sec1, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	key1SEC1 := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}))
	config := func(cert, key string, version int) string {
		return proxyConfig(fmt.Sprintf(`
  kvm                  = { host = "hv1" }
  allowed_client_cidrs = ["10.0.0.0/8"]
  allowed_destinations = [".example.com"]
  tls = {
    certificate_pem            = %q
    private_key_pem_wo         = %q
    private_key_pem_wo_version = %d
  }
`, cert, key, version))
	}
	backendServes := func(cert, key string) resource.TestCheckFunc {
		return resource.ComposeTestCheckFunc(
			checkBackendSettings(mem, func(s proxyconf.Settings) error {
				if s.TLS == nil || s.TLS.CertificatePEM != cert || s.TLS.PrivateKeyPEM != key {
					return fmt.Errorf("the backend got another TLS certificate or key")
				}
				return nil
			}),
			func(s *terraform.State) error {
				for name, v := range s.RootModule().Resources["egress_proxy.test"].Primary.Attributes {
					if strings.Contains(v, "PRIVATE KEY") {
						return fmt.Errorf("state attribute %s holds a private key", name)
					}
				}
				return nil
			},
		)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: mem.protoV6(),
		CheckDestroy:             checkDestroyed(mem),
		Steps: []resource.TestStep{
			{
				Config: config(cert1, key1, 1),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("proxy_url"), knownvalue.StringExact("https://10.0.0.10:3128")),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("tls").AtMapKey("private_key_pem_wo"), knownvalue.Null()),
					statecheck.ExpectKnownValue("egress_proxy.test", tfjsonpath.New("tls").AtMapKey("private_key_pem"), knownvalue.Null()),
				},
				Check: backendServes(cert1, key1),
			},
			{
				// Terraform cannot see a write-only value change: only the version tells it.
				Config:           config(cert1, key1SEC1, 1),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				Check:            backendServes(cert1, key1),
			},
			{
				Config: config(cert2, key2, 2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("egress_proxy.test", plancheck.ResourceActionDestroyBeforeCreate)}},
				Check: resource.ComposeTestCheckFunc(checkBackendHoldsOne(mem, kvm.Kind), backendServes(cert2, key2)),
			},
		},
	})
}

func checkBackendSettings(mem memoryBackends, check func(proxyconf.Settings) error) resource.TestCheckFunc {
	return func(*terraform.State) error {
		insts := mem[kvm.Kind].Instances()
		if len(insts) != 1 || insts[0].Proxy == nil {
			return fmt.Errorf("want one instance with settings, got %d", len(insts))
		}
		return check(*insts[0].Proxy)
	}
}
