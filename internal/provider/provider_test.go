package provider

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/egress-proxies/terraform-provider-egress/internal/backend"
	"github.com/egress-proxies/terraform-provider-egress/internal/backend/memory"
)

// memoryBackends stands in for the three real backends: one in-memory Backend per kind, reached through the
// same registry, logging decorator and provider configuration as the real ones.
type memoryBackends map[backend.Kind]*memory.Backend

func newMemoryBackends() memoryBackends {
	m := memoryBackends{}
	for _, k := range backend.Kinds {
		m[k] = memory.New(k)
	}
	return m
}

// factories configures exactly the kinds the provider block configures, as defaultFactories does.
func (m memoryBackends) factories(cfg providerModel) (map[backend.Kind]backend.Factory, error) {
	configured, err := defaultFactories(cfg)
	if err != nil {
		return nil, err
	}
	out := map[backend.Kind]backend.Factory{}
	for kind := range configured {
		b := m[kind]
		out[kind] = func(context.Context) (backend.Backend, error) { return b, nil }
	}
	return out, nil
}

func (m memoryBackends) protoV6() map[string]func() (tfprotov6.ProviderServer, error) {
	return map[string]func() (tfprotov6.ProviderServer, error){
		"egress": providerserver.NewProtocol6WithError(&egressProvider{version: "test", factories: m.factories}),
	}
}

// testAccPreCheck names what the acceptance environment lacks. `make testacc` sets all of it.
func testAccPreCheck(t *testing.T) {
	t.Helper()
	if os.Getenv("TF_ACC_TERRAFORM_PATH") == "" {
		t.Fatal("TF_ACC_TERRAFORM_PATH must point at the OpenTofu binary: run `make tofu` (it prints the path) or `make testacc`")
	}
	if os.Getenv("TF_ACC_PROVIDER_NAMESPACE") != "egress-proxies" {
		t.Fatal("TF_ACC_PROVIDER_NAMESPACE must be egress-proxies: OpenTofu rejects the legacy default namespace")
	}
}

func t0ctx() context.Context { return context.Background() }

// wrapped matches pattern in CLI output, where the CLI may break any space into a line break.
func wrapped(pattern string) *regexp.Regexp {
	return regexp.MustCompile(strings.ReplaceAll(pattern, " ", `\s+`))
}
